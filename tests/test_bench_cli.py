"""porter bench / report / import / regress end to end: real runs through the CLI."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, run_porter

MODEL = "tests/models/planted_work.py:factory"
FAST = ("--budget", "2", "--min-samples", "5", "--max-samples", "20", "--warmup", "1", "--threads", "1")


@pytest.mark.slow
def test_bench_runs_records_failures_reports_and_regress_passes(tmp_path):
    db, runs = str(tmp_path / "h.sqlite"), tmp_path / "runs"
    for _ in range(2):  # a one-target failure is recorded and the run goes on
        p = run_porter("bench", MODEL, "--on", "cpu", "--on", "cuda", "--db", db, "--export", str(runs), *FAST)
        assert p.returncode == 0, p.stderr
        assert "failed: target cuda" in " ".join(p.stdout.split())
    suite = tmp_path / "suite.toml"
    suite.write_text(f'[suite]\nname = "t"\nstacks = ["cpu"]\n\n[[case]]\nname = "work-train"\n'
                     f'model = "{REPO / "tests" / "models" / "planted_work.py"}:factory"\n'
                     f'mode = "train"\nstacks = ["cpu", "xla"]\nshapes = [[32, 64]]\n')
    p = run_porter("bench", str(suite), "--db", db, "--export", str(runs), *FAST)
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert "work-train" in out and "train mode runs on the eager and inductor stacks, not xla" in out

    p = run_porter("regress", "--db", db, "--json")
    assert p.returncode == 0, p.stderr
    verdicts = {v["series"]: v for v in json.loads(p.stdout)["series"]}
    assert len(verdicts) == 4
    assert {v["status"] for k, v in verdicts.items() if "cuda" in k or "xla" in k} == {"failed"}
    # two runs: no verdict yet (or an unstable newest run, on a busy machine); never a regression
    assert all(v["status"] in ("too little history", "unstable") for k, v in verdicts.items() if k.endswith("cpu:eager"))

    p = run_porter("bench", "report", "--db", db, "-o", str(tmp_path / "rep"))
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "rep" / "bench.html").read_text()
    md = (tmp_path / "rep" / "bench.md").read_text()
    assert html.count("<svg") == 4 and "http" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "failed: train mode runs on the eager and inductor stacks" in html
    assert "Mann-Whitney" in md and "binomial order statistics" in md

    files = sorted(runs.glob("*.parquet"))
    assert len(files) == 3
    p = run_porter("bench", "import", *map(str, files), "--db", str(tmp_path / "copy.sqlite"))
    assert p.returncode == 0 and p.stdout.count("imported") == 3, p.stderr
    p = run_porter("bench", "import", str(files[0]), "--db", str(tmp_path / "copy.sqlite"))
    assert "already in the store" in p.stdout


def test_bad_bench_input_is_one_line(tmp_path):
    for args in (("bench", str(tmp_path / "nope.toml")),
                 ("bench", "import", str(tmp_path / "nope.parquet"), "--db", str(tmp_path / "a.sqlite")),
                 ("regress", "--db", "postgresql://nobody:x@127.0.0.1:1/none"),
                 ("bench", "report", "--db", str(tmp_path / "empty.sqlite"))):
        p = run_porter(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stderr.startswith("porter: error:") and "Traceback" not in p.stderr
        assert len(p.stderr.strip().splitlines()) <= 2  # one line (rich may wrap a long one)
