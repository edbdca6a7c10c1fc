"""One recipe measured the headline's way: the tuned target interleaved with the untuned
target and the source in the same process, on the policy's clock (porter.capture.interleaved
time_rounds: S U T, T U S, S T U, U T S, ...), so the three ratios share one machine state, and its final
output checked against the source's with porter's tolerance (porter.analysis.accuracy)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from porter.analysis.accuracy import error_metrics
from porter.capture.interleaved import InterleaveOptions, time_rounds
from porter.core.stats import RatioInterval, ab_ba_blocks, between_run_sd, paired_ratio, with_between_run
from porter.runtime.policy import machine_load

SIDES = ("source", "untuned", "tuned")


@dataclass(frozen=True)
class Measured:
    ratio: RatioInterval  # tuned / source: the headline after the recipe
    untuned: RatioInterval  # untuned / source: the headline before it, in the same rounds
    recovery: RatioInterval  # tuned / untuned: < 1 is time recovered
    untuned_us: float  # median untuned forward, headline clock
    rounds: int
    stopped: str
    elapsed_s: float
    clock: str

    @property
    def recovered_us(self) -> tuple[float, float, float]:
        """Time recovered per forward and its 95% interval, from the tuned/untuned interval."""
        u, r = self.untuned_us, self.recovery
        return u * (1 - r.ratio), u * (1 - r.high), u * (1 - r.low)

    @property
    def excludes_zero(self) -> bool:
        """The recovery's interval lies above zero (a slower recipe's below it is not a recovery)."""
        return self.recovery.high < 1.0

    def to_dict(self) -> dict[str, Any]:
        value, lo, hi = self.recovered_us
        return {"measured": _of_source(self.ratio), "untuned": _of_source(self.untuned),
                "recovery": {"ratio": self.recovery.ratio, "ci95": [self.recovery.low, self.recovery.high],
                             "p": self.recovery.p_unity, "method": self.recovery.method},
                "recovered_us": {"value": value, "ci95": [lo, hi]}, "untuned_us": self.untuned_us,
                "rounds": self.rounds, "stopped": self.stopped, "elapsed_s": self.elapsed_s, "clock": self.clock}


def _of_source(iv: RatioInterval) -> dict[str, Any]:
    out: dict[str, Any] = {"ratio": iv.ratio, "ci95": [iv.low, iv.high]}
    if iv.within_run is not None:
        out["within_run_ci95"] = list(iv.within_run)
    return out


def time_three(source: Any, untuned: Any, tuned: Any, opts: InterleaveOptions, clock: str) -> Measured:
    """Rounds of the three forwards until tuned/untuned is narrow or opts.budget_s ends."""
    rounds = time_rounds({"source": source, "untuned": untuned, "tuned": tuned}, opts, headline_clock=clock,
                         watch=("untuned", "tuned"))
    s = rounds.samples

    def ratio(a: str, b: str) -> RatioInterval:
        return paired_ratio(*ab_ba_blocks(s[a], s[b]))

    # a ratio of the source is quoted as the pair's and must hold on the next run: widened for drift
    # between runs; tuned/untuned judges the recipe within these rounds, where that drift cancels
    load = machine_load()
    sd = between_run_sd(load.average, load.cpus)
    return Measured(with_between_run(ratio("source", "tuned"), sd), with_between_run(ratio("source", "untuned"), sd),
                    ratio("untuned", "tuned"),
                    statistics.median(s["untuned"]) * 1e6, len(rounds.forward_first), rounds.stopped,
                    rounds.elapsed_s, clock)


def accuracy(reference: Any, output: Any, tolerance: float) -> dict[str, Any]:
    """rel_l2 of output against the source's, and whether it is within tolerance (finite)."""
    try:
        rel = error_metrics(reference, output).rel_l2
    except ValueError as exc:  # a recipe that changes the output's shape fails accuracy
        return {"rel_l2": None, "tolerance": tolerance, "within_tolerance": False, "why": str(exc)}
    ok = rel == rel and rel <= tolerance
    return {"rel_l2": rel, "tolerance": tolerance, "within_tolerance": bool(ok)}


__all__ = ["Measured", "SIDES", "accuracy", "time_three"]
