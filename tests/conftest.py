"""Shared test fixtures: the real trace corpus and the project's own small fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"


# Test files whose assertions read measured time (a ranking by time gap, an interval, a
# bench/diagnose agreement, a kept tune recipe). scripts/test.sh runs them alone, one test at a
# time, after the rest has run on every core (pytest-xdist): beside another test on a 2-core
# machine their timings are a busy loop's, and the rest halves its wall time in parallel.
TIMING_FILES = (
    "analysis/test_gap_noise.py",
    "analysis/test_headline.py",
    "bench/test_bench_cli.py",
    "bench/test_bench_runner.py",
    "capture/test_confirm_settle.py",
    "capture/test_round_order.py",
    "e2e/test_live_agreement.py",
    "e2e/test_live_called.py",
    "e2e/test_live_fused_split.py",
    "pipeline/test_confirmation.py",
    "pipeline/test_diagnose.py",
    "runtime/test_allocator.py",
    "runtime/test_policy.py",
    "runtime/test_threads.py",
    "runtime/test_xla_pool.py",
    "tune/test_diagnose_tune.py",
    "tune/test_tune_cli.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks TIMING_FILES' tests `timing`; a listed file that is gone fails collection, so a
    moved file cannot silently leave the serial phase."""
    tests = REPO / "tests"
    missing = [name for name in TIMING_FILES if not (tests / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py TIMING_FILES lists missing files: {missing}")
    timing = {str(tests / name) for name in TIMING_FILES}
    for item in items:
        if str(item.path) in timing:
            item.add_marker(pytest.mark.timing)


def pytest_configure(config: pytest.Config) -> None:
    """XLA's CPU client starts once per process, with the threads it is given then: start it
    here as a live pair starts it (porter.runtime.threads: Eigen single, one pool thread), so
    in-process live pairs measure the same program whichever test touches jax first.
    Subprocesses (the CLI tests) start their own, as users do."""
    from porter.runtime.threads import XLA_SINGLE

    before = os.environ.get("XLA_FLAGS")
    os.environ["XLA_FLAGS"] = f"{before or ''} {XLA_SINGLE}".strip()
    try:
        from porter.targets.xla import jax_devices

        jax_devices("cpu")
    except Exception:  # noqa: BLE001 - no jax here: the XLA tests skip on their own
        pass
    finally:
        if before is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = before


def corpus_dir() -> Path:
    return Path(os.environ.get("PORTER_TRACE_CORPUS", REPO.parent / "shared" / "traces")).resolve()


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The real-hardware trace corpus; tests that need it skip with a reason when absent."""
    path = corpus_dir()
    if not (path / "kineto").is_dir():
        pytest.skip(f"trace corpus not found at {path} (set PORTER_TRACE_CORPUS to ../shared/traces)")
    return path


def corpus_files(sub: str, pattern: str = "*") -> list[Path]:
    """Corpus files for parametrize; empty list (so tests skip) when the corpus is absent."""
    base = corpus_dir() / sub
    return sorted(base.glob(pattern)) if base.is_dir() else []


def db_value(path: Path, sql: str) -> float:
    """One number from an SQLite profiler database, read independently of porter's readers."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return float(conn.execute(sql).fetchone()[0] or 0)
    finally:
        conn.close()


def hlo_stats(path: Path, tmp: Path) -> list[dict]:
    """xprof's own hlo_stats rows for an XPlane (run on a copy in tmp: it writes caches beside its input)."""
    import json
    import shutil

    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    from xprof.convert import raw_to_tool_data

    copy = tmp / path.name
    shutil.copyfile(path, copy)
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "hlo_stats", {})
    table = json.loads(data)
    cols = [c["id"] for c in table["cols"]]
    return [dict(zip(cols, [cell.get("v") for cell in row["c"]])) for row in table["rows"]]


def run_porter(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    env = dict(os.environ, COLUMNS="160", TF_CPP_MIN_LOG_LEVEL="3")
    # The live headline's timing: 3 s of interleaved pairs, not the CLI's 10 (at least its 20
    # pairs either way). A test of the headline's interval passes its own InterleaveOptions; the
    # rest run a live diagnosis for its modules, accuracy or files, and 7 s each of ~30 such runs
    # is 3-4 minutes of a 2-core CI run.
    env.setdefault("PORTER_TIMING_BUDGET_S", "3")
    return subprocess.run(
        [sys.executable, "-m", "porter", *args],
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def run_probe(code: str, *args: str, drop_env: tuple[str, ...] = (), timeout: float = 300) -> dict:
    """Run code in a fresh interpreter (what a process sets up once: XLA's client, glibc's
    malloc) with the repo importable; its last stdout line, as JSON."""
    import json

    env = dict(os.environ, PYTHONPATH=str(REPO))
    for key in drop_env:
        env.pop(key, None)
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
