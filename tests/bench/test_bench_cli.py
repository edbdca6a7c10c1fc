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
    # a one-target failure is recorded and the run goes on
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
    verdicts = {v["series"]: v for v in json.loads(p.stdout)["series"]}
    assert len(verdicts) == 4
    assert {v["status"] for k, v in verdicts.items() if "cuda" in k or "xla" in k} == {"failed"}
    # one run per series: no verdict yet (or an unstable newest run, on a busy machine); never a regression
    eager = {v["status"] for k, v in verdicts.items() if k.endswith("cpu:eager")}
    assert eager <= {"too little history", "unstable"}
    # an unstable series cannot be judged (exit 4, porter regress --help); otherwise nothing regressed (0)
    assert p.returncode == (4 if "unstable" in eager else 0), p.stderr

    p = run_porter("bench", "report", "--db", db, "-o", str(tmp_path / "rep"))
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "rep" / "bench.html").read_text()
    md = (tmp_path / "rep" / "bench.md").read_text()
    assert html.count("<svg") == 4 and "http" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "failed: train mode runs on the eager and inductor stacks" in html
    assert "Mann-Whitney" in md and "binomial order statistics" in md

    files = sorted(runs.glob("*.parquet"))
    assert len(files) == 2
    p = run_porter("bench", "import", *map(str, files), "--db", str(tmp_path / "copy.sqlite"))
    assert p.returncode == 0 and p.stdout.count("imported") == 2, p.stderr
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


@pytest.mark.slow
def test_an_interrupted_bench_leaves_the_store_as_it_was(tmp_path):
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    from porter.bench.store import Store
    from tests.bench.test_bench_store import make_run

    db = tmp_path / "h.sqlite"
    with Store(db) as store:
        store.write_run(make_run())
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "porter", "bench", MODEL, "--db", str(db), "--budget", "120",
                             "--min-samples", "1000", "--max-samples", "1000", "--export", str(tmp_path / "runs")],
                            cwd=REPO, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in proc.stderr:  # wait until it is timing, then Ctrl-C it
        if "preparing" in line:
            break
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    with Store(db) as store:
        assert len(store.runs()) == 1
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert not list((tmp_path / "runs").glob("*.parquet"))


def test_regress_on_an_all_unstable_history_exits_cannot_judge_and_the_page_says_so(tmp_path):
    """The recorded history (32 real runs, all unstable on this busy 2-core machine): regress
    exits 4 with "cannot judge", and bench.html shows that verdict, never a green 0."""
    import re

    from tests.bench_support import HISTORY

    db = str(tmp_path / "h.sqlite")
    p = run_porter("bench", "import", *map(str, sorted(HISTORY.glob("*.parquet"))), "--db", db)
    assert p.returncode == 0 and p.stdout.count("imported") == 32, p.stderr
    p = run_porter("regress", "--db", db)
    assert p.returncode == 4, (p.stdout, p.stderr)
    lines = p.stdout.strip().splitlines()
    assert lines[0].split()[0] == "unstable" and "cannot judge:" in lines[0]
    assert lines[-1].startswith("cannot judge: 1 of 1 series too noisy") and lines[-1].endswith("rerun on a quiet machine")
    assert "0 confirmed regression(s)" not in p.stdout
    p = run_porter("regress", "--db", db, "--json")
    assert p.returncode == 4 and json.loads(p.stdout)["verdict"] == "cannot judge"
    p = run_porter("bench", "report", "--db", db, "-o", str(tmp_path / "rep"))
    assert p.returncode == 0, p.stderr
    html = (tmp_path / "rep" / "bench.html").read_text()
    assert re.search(r'class="v words bad" id="fig-verdict">cannot judge<', html)
    assert not re.search(r'class="v good" id="fig-regressions"', html)  # the 0 is not green
    assert "rerun on a quiet machine" in html and "unstable (cannot judge)" in html
    assert "**Verdict: cannot judge**" in (tmp_path / "rep" / "bench.md").read_text()


def test_regress_help_documents_the_exit_codes():
    p = run_porter("regress", "--help")
    text = " ".join(p.stdout.split())
    assert p.returncode == 0 and "Exit codes: 0 = every series judged" in text
    assert "1 = a confirmed regression" in text and "4 = cannot judge" in text
