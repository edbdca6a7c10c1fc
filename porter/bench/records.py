"""What one benchmark run produced: plain records shared by the runner, the store,
`porter regress` and the report (torch-free, so the store side never loads a model)."""

from __future__ import annotations

import statistics
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from porter.bench.context import SeriesKey, environment_id
from porter.bench.stats import median_ci

OK, FAILED = "ok", "failed"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def new_run_id() -> str:
    return uuid.uuid4().hex


@dataclass
class CaseResult:
    """One case on one target in one run: every raw sample (seconds per step) is kept."""

    case: str
    target: str
    device_class: str
    spec: dict[str, Any]  # Case.describe(): model, shapes, dtype, mode, threshold
    status: str = OK
    error: str = ""
    samples_s: list[float] = field(default_factory=list)
    number: int = 1  # steps averaged into one sample (short steps are timed in groups)
    unstable: bool = False  # the noise admission check failed: never alerts
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> SeriesKey:
        return SeriesKey(self.case, self.device_class, self.target)

    @property
    def threshold(self) -> float:
        return float(self.spec.get("threshold", 0.05))

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s) if self.samples_s else float("nan")

    @property
    def ci_s(self) -> tuple[float, float]:
        return median_ci(self.samples_s)


@dataclass
class RunRecord:
    run_id: str
    suite: str
    started_at: str
    finished_at: str
    environment: dict[str, Any]
    context: dict[str, Any]
    results: list[CaseResult] = field(default_factory=list)

    @property
    def environment_id(self) -> str:
        return environment_id(self.environment)


__all__ = ["FAILED", "OK", "CaseResult", "RunRecord", "new_run_id", "now_iso"]
