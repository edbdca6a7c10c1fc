"""What one benchmark run produced: plain records shared by the runner, the store,
`porter regress` and the report (torch-free, so the store side never loads a model)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from porter.bench.context import SeriesKey, environment_id
from porter.core.samples import Samples

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
    def stats(self) -> Samples:
        """The samples' statistics, as every repeat in porter has them (porter.core.samples)."""
        return Samples.of(self.samples_s)

    @property
    def median_s(self) -> float:
        return self.stats.median

    @property
    def ci_s(self) -> tuple[float, float]:
        return self.stats.median_ci()


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
