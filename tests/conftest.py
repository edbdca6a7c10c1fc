"""Shared test fixtures: the real trace corpus and the project's own small fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"


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


def run_porter(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    env = dict(os.environ, COLUMNS="160", TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, "-m", "porter", *args],
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
