"""Shared by the bench tests: synthetic sample histories and the store backends.

Synthetic histories model a reasonably quiet benchmark machine: per run a drift factor
exp(N(0, 1%)), per sample exp(N(0, 2%)) noise with 5% of samples hit by a preemption
(x 1 + Exp(30%)), 40 samples a run. They exercise the statistics with a known truth;
the recorded real runs (fixtures/bench/history) show what this shared machine does.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest

from porter.bench.parquet import read_run
from porter.bench.records import RunRecord
from porter.bench.stats import admitted
from porter.bench.store import HistoryEntry

REPO = Path(__file__).resolve().parents[1]
HISTORY = REPO / "fixtures" / "bench" / "history"
POSTGRES_ENV = "PORTER_TEST_POSTGRES_URL"
BASE_S = 0.010
THRESHOLD = 0.05


def synthetic_run(rng: np.random.Generator, index: int, slowdown: float = 0.0, n: int = 40) -> HistoryEntry:
    drift = float(np.exp(rng.normal(0, 0.01)))
    samples = BASE_S * (1 + slowdown) * drift * np.exp(rng.normal(0, 0.02, n))
    hit = rng.random(n) < 0.05
    samples[hit] *= 1 + rng.exponential(0.3, hit.sum())
    s = [float(x) for x in samples]
    return HistoryEntry(f"run{index:03d}", f"2026-01-01T00:{index // 60:02d}:{index % 60:02d}", "ok",
                        not admitted(s, THRESHOLD), THRESHOLD, s)


def synthetic_history(seed: int, before: int, after: int, slowdown: float) -> list[HistoryEntry]:
    rng = np.random.default_rng(seed)
    return [synthetic_run(rng, i, slowdown if i >= before else 0.0) for i in range(before + after)]


def recorded_runs() -> list[RunRecord]:
    """The real runs fixtures/make_bench_history.py recorded, oldest first."""
    return sorted((read_run(p) for p in HISTORY.glob("*.parquet")), key=lambda r: r.started_at)


def entry(run: RunRecord) -> HistoryEntry:
    r = run.results[0]
    return HistoryEntry(run.run_id, run.started_at, r.status, r.unstable, r.threshold, r.samples_s, r.error)


def postgres_url() -> str:
    """The test server's URL; skip outside CI when unset, fail inside CI (it must be tested there)."""
    url = os.environ.get(POSTGRES_ENV, "")
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{POSTGRES_ENV} is unset in CI: .ci/run starts PostgreSQL and exports it")
        pytest.skip(f"no PostgreSQL server: set {POSTGRES_ENV}=postgresql://user:pass@host/db (.ci/run does)")
    return url


def postgres_schema_url(base: str) -> tuple[str, str]:
    """A URL whose connections use a fresh schema (so tests never see each other's rows)."""
    schema = f"porter_test_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}", schema
