"""Where `porter bench` writes: its run artifact beside the store it wrote to (never the
current directory unasked), the stacks' warnings in a log beside the artifact."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO
from porter.bench.store import runs_dir

FAST = ("--budget", "1", "--min-samples", "3", "--max-samples", "6", "--warmup", "1", "--threads", "1")


def test_runs_go_beside_a_sqlite_store_or_into_the_data_folder(tmp_path, monkeypatch):
    assert runs_dir(str(tmp_path / "team.sqlite")) == tmp_path / "team-runs"
    assert runs_dir(f"sqlite:///{tmp_path}/h.sqlite") == tmp_path / "h-runs"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert runs_dir("postgresql://u:p@host/db") == tmp_path / "data" / "porter" / "bench-runs"


@pytest.mark.slow
def test_bench_writes_nothing_into_the_current_directory_and_logs_warnings(tmp_path):
    cwd, db = tmp_path / "here", tmp_path / "store" / "h.sqlite"
    cwd.mkdir()
    done = subprocess.run([sys.executable, "-m", "porter", "bench", str(REPO / "tests/models/warns.py:factory"),
                           "--on", "cpu", "--db", str(db), *FAST], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200"), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(cwd.iterdir()) == []
    (artifact,) = (tmp_path / "store" / "h-runs").glob("*.parquet")
    assert "FutureWarning" not in done.stderr and "LeafSpec" not in done.stdout + done.stderr
    log = artifact.with_suffix(".log")
    assert "FutureWarning: isinstance(treespec, LeafSpec) is deprecated" in log.read_text()
    assert f"third-party output (warnings, native lines) in {log}" in " ".join(done.stdout.split())
