"""A diagnosis into a folder an earlier one wrote: the report files of the last run go, so
no stale report.json (from `porter report --format all`) sits beside the new report.html."""

from __future__ import annotations

from conftest import FIXTURES, run_porter

PAIR = ("--from", str(FIXTURES / "cpu_mlp.json.gz"), "--to", str(FIXTURES / "xla_cpu_mlp.xplane.pb"))


def test_a_rerun_removes_the_report_files_it_owns(tmp_path):
    out = tmp_path / "d"
    assert run_porter("diagnose", *PAIR, "-o", str(out)).returncode == 0
    assert run_porter("report", str(out), "--format", "json").returncode == 0
    (out / "notes.txt").write_text("mine")
    stale = (out / "report.json").read_text()
    assert stale
    r = run_porter("diagnose", *PAIR, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert not (out / "report.json").exists()  # the last run's, not rewritten by this one
    assert {"report.html", "report.md", "summary.md", "summary.html", "diagnosis.json"} <= {p.name for p in out.iterdir()}
    assert (out / "notes.txt").read_text() == "mine"  # not porter's: kept
    r = run_porter("diagnose", *PAIR, "-o", str(out), "--no-report")
    assert r.returncode == 0, r.stderr
    assert not any((out / n).exists() for n in ("report.html", "report.md", "summary.md", "summary.html"))
    assert (out / "diagnosis.json").is_file()
