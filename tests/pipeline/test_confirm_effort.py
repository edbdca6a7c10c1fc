"""PORTER_CONFIRM_REPEATS / PORTER_CONFIRM_BUDGET_S set how long `--confirm` re-times each module
alone (porter.pipeline.confirmation.confirm_effort); a bad value stops diagnose before any capture."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from porter.capture.confirm import BUDGET_S, REPEATS
from porter.core.errors import PorterError
from porter.pipeline.confirmation import ALL_BUDGET_S, CONFIRM_ALL, confirm_effort
from tests.conftest import REPO


def test_defaults_and_overrides():
    assert confirm_effort(5, {}) == {"repeats": REPEATS, "budget_s": BUDGET_S}
    assert confirm_effort(CONFIRM_ALL, {}) == {"repeats": REPEATS, "budget_s": ALL_BUDGET_S}
    env = {"PORTER_CONFIRM_REPEATS": " 90 ", "PORTER_CONFIRM_BUDGET_S": "300"}
    assert confirm_effort(CONFIRM_ALL, env) == {"repeats": 90, "budget_s": 300.0}


@pytest.mark.parametrize("name, value", [("PORTER_CONFIRM_REPEATS", "abc"), ("PORTER_CONFIRM_REPEATS", "0"),
                                         ("PORTER_CONFIRM_REPEATS", "2.5"), ("PORTER_CONFIRM_BUDGET_S", "-1")])
def test_a_bad_value_is_named(name, value):
    with pytest.raises(PorterError, match=name):
        confirm_effort(5, {name: value})


def test_the_cli_stops_on_a_bad_value_before_capturing(tmp_path):
    env = dict(os.environ, PORTER_CONFIRM_REPEATS="many")
    r = subprocess.run([sys.executable, "-m", "porter", "diagnose", "--from", "cpu", "--to", "xla", "-o", str(tmp_path / "d")],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "PORTER_CONFIRM_REPEATS must be a positive int, not 'many'" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "d").exists()


def test_setting_them_does_not_import_a_stack_for_a_recorded_pair(tmp_path, monkeypatch):
    from tests.e2e.test_imports import FIXTURES, ML_STACKS, loaded_by

    monkeypatch.setenv("PORTER_CONFIRM_REPEATS", "60")
    monkeypatch.setenv("PORTER_CONFIRM_BUDGET_S", "120")
    mods = loaded_by("diagnose", "--from", FIXTURES / "cpu_mlp.json.gz", "--to", FIXTURES / "xla_cpu_mlp.xplane.pb",
                     "-o", tmp_path / "d")
    assert (tmp_path / "d" / "diagnosis.json").is_file() and not mods & ML_STACKS, sorted(mods & ML_STACKS)
