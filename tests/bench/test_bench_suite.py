"""Suites from SUITE.toml and the per-run context (fast: no model runs)."""

from __future__ import annotations

import re

import pytest

from porter.bench.context import SeriesKey, environment, environment_id, model_commit, run_context
from porter.bench.suite import builtin_suite, load_suite, single_case, with_stacks
from porter.core.errors import PorterError
from tests.bench_support import REPO


def test_suite_file_defaults_overrides_and_relative_models(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "net.py").write_text("def factory():\n    raise RuntimeError\n")
    path = tmp_path / "s.toml"
    path.write_text('[suite]\nname = "nightly"\nstacks = ["cpu", "xla"]\nthreshold = 0.07\n\n'
                    '[[case]]\nmodel = "mlp"\nshapes = [[64, 256]]\n\n'
                    '[[case]]\nname = "net-train"\nmodel = "m/net.py:factory"\nmode = "train"\nstacks = ["cpu"]\n'
                    'threshold = 0.2\ndtype = "bfloat16"\n')
    suite = load_suite(path)
    assert suite.name == "nightly"
    mlp, net = suite.cases
    assert (mlp.name, mlp.stacks, mlp.shapes, mlp.threshold, mlp.mode) == ("mlp", ("cpu", "xla"), ((64, 256),), 0.07, "inference")
    assert net.model == f"{(tmp_path / 'm' / 'net.py').resolve()}:factory"
    assert (net.stacks, net.threshold, net.dtype, net.mode) == (("cpu",), 0.2, "bfloat16", "train")
    assert {c.stacks for c in with_stacks(suite, ("cpu:ort",)).cases} == {("cpu:ort",)}


@pytest.mark.parametrize("body, message", [
    ('[[case]]\nmodel = "mlp"\n', "names no stacks"),
    ('[[case]]\nmodel = "mlp"\nstacks = ["cpu"]\nmode = "serve"\n', "mode must be one of"),
    ('[[case]]\nmodel = "mlp"\nstacks = ["cpu"]\nshapes = [[0]]\n', "positive integers"),
    ('[[case]]\nmodel = "mlp"\nstacks = ["cpu", "cpu"]\n', "lists a target twice"),
    ('[[case]]\nname = "a|b"\nmodel = "mlp"\nstacks = ["cpu"]\n', "free of '|'"),
    ('[[case]]\nmodel = "mlp"\nstacks = ["cpu"]\n[[case]]\nmodel = "mlp"\nstacks = ["cpu"]\n', "used twice"),
    ('[suite]\nname = "x"\n', "no [[case]]"),
    ('not toml = = 1', "not a valid TOML suite"),
])
def test_bad_suites_are_one_line_errors(tmp_path, body, message):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(PorterError, match=re.escape(message)):
        load_suite(path)


def test_builtin_suite_and_single_case():
    suite = builtin_suite(("cpu", "cpu:inductor", "xla", "cpu:ort"))
    assert [c.name for c in suite.cases] == ["transformer", "cnn", "mlp", "mlp-train"]
    assert suite.cases[-1].stacks == ("cpu", "cpu:inductor") and suite.cases[-1].mode == "train"
    assert single_case("tests/models/planted_work.py:factory", ("cpu",)).cases[0].name == "planted_work:factory"


def test_context_records_versions_load_and_model_commit():
    env = environment({"cpu:eager": {"name": "X"}})
    assert env["cpu_model"] and env["cpu_count"] >= 1 and "torch" in env["versions"] and "numpy" in env["versions"]
    assert environment_id(env) == environment_id(dict(env)) and len(environment_id(env)) == 16
    ctx = run_context(["mlp", f"{REPO}/tests/models/planted_work.py:factory"], 1)
    assert len(ctx["load_average"]) == 3 and ctx["threads"] == 1
    assert all(re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", c) for c in ctx["model_commits"].values()), ctx
    assert model_commit("/nonexistent/x.py:f") == ""
    key = SeriesKey("mlp", "cpu:AMD EPYC", "cpu:eager")
    assert SeriesKey.parse(key.text) == key


def test_store_addresses_print_without_password():
    from porter.bench.store import safe_url

    assert safe_url("postgresql://porter:s3cret@db.example/bench") == "postgresql://porter:***@db.example/bench"
    assert safe_url("/data/bench.sqlite") == "/data/bench.sqlite"
