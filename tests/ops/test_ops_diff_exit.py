"""`porter ops diff` gates an upgrade: exit 1 when a status got worse, 0 when none did, and
it answers without loading a model stack (two ops.json files of a real `porter ops mlp --on xla`)."""

from __future__ import annotations

import json

from conftest import FIXTURES
from timed_cli import ERROR_CPU_S, porter_timed

MATRIX = FIXTURES / "ops" / "mlp_xla.json"


def with_status(tmp_path, status: str):
    data = json.loads(MATRIX.read_text())
    data["rows"][1]["cells"]["xla"]["confirmed"]["status"] = status  # aten.gelu.default on xla
    path = tmp_path / f"{status}.json"
    path.write_text(json.dumps(data))
    return path


def test_a_worse_status_exits_1_and_says_so(tmp_path):
    done, cpu, stacks = porter_timed("ops", "diff", str(MATRIX), str(with_status(tmp_path, "host_fallback")))
    assert done.returncode == 1, done.stderr[-1500:]
    assert "aten.gelu.default" in done.stdout and "native" in done.stdout and "host_fallback" in done.stdout
    assert "1 status change worse (exit 1)" in done.stdout
    assert not stacks and cpu < 2 * ERROR_CPU_S  # two JSON files, no torch


def test_a_better_status_exits_0(tmp_path):
    done, _, _ = porter_timed("ops", "diff", str(with_status(tmp_path, "host_fallback")), str(MATRIX))
    assert done.returncode == 0 and "better" in done.stdout and "worse" not in done.stdout


def test_no_change_exits_0():
    done, _, _ = porter_timed("ops", "diff", str(MATRIX), str(MATRIX))
    assert done.returncode == 0 and "no status changed" in done.stdout
