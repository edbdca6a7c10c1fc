"""Unprofiled A/B timing of two prepared forwards, interleaved, until the ratio is known.

The headline of a live diagnosis. Each side's profiled steps carry its profiler's own
overhead (which differs by stack: a CPU eager step can be 20x slower profiled), and timing
the sides minutes apart lets the machine change in between, so the headline comes from
neither. Instead, after warm-up, the two forwards run alternately in the same process,
each pair in the opposite order to the last (A B, B A, ...). Whichever side runs second
in a pair tends to run faster (warm caches), so the ratio is taken per block of two
consecutive pairs (A B B A: both orders, summed per side), which cancels that advantage
and any steady drift in the machine's speed. Like torch.utils.benchmark's adaptive_autorange,
sampling continues until the ratio's interval (porter.core.stats: block bootstrap widened to
wall-time batch means) is narrow enough, after at least min_seconds_narrow of sampling so
that its chunks see the machine's load change, or the time budget ends; every sample is kept.

Each forward is timed on two clocks: wall time, and the process's CPU time. When both
sides run on the CPU with one intra-op thread, the headline uses CPU time (clock="cpu"):
a forward's wall time then also holds whatever the scheduler gave other processes while
it waited, which on a shared machine swings between runs far more than the work does
(two consecutive demo runs beside a busy loop: source wall medians 4.34 and 6.97 ms,
wall ratio x0.736 [0.643, 0.842] and x0.738 [0.654, 0.833]; CPU medians 3.93 and 4.25 ms,
CPU ratio x0.703 [0.685, 0.721] and x0.694 [0.666, 0.723]). With several threads CPU time
sums them, and an accelerator's work is not the process's CPU time, so those use wall time.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from porter.runtime.policy import MIN_TIMING_S, WARMUP
from porter.runtime.timing import timed_call
from porter.core.stats import RatioInterval, ab_ba_blocks, paired_ratio

Step = Callable[[], Any]  # one synchronised forward


@dataclass(frozen=True)
class InterleaveOptions:
    warmup: int = WARMUP  # untimed forwards per side before the first pair (the measurement policy's)
    min_pairs: int = 20  # before the budget may stop sampling
    min_pairs_narrow: int = 40  # before a narrow interval may: stopping early on a lucky streak biases it
    # nor before this: the interval's chunks must span the machine's slow drift. Demo runs stopped
    # narrow after 5 s with +-2% and missed each other by 6%; cut from long recordings, full
    # 10 s runs come out +-4-8% and overlapped in 16 of 17 consecutive triples (porter.core.stats.CHUNKS)
    min_seconds_narrow: float = MIN_TIMING_S  # the measurement policy's (porter.runtime.policy), as bench's
    max_pairs: int = 20000
    budget_s: float = 10.0  # wall time for the timed pairs (warm-up excluded); PORTER_TIMING_BUDGET_S on the CLI
    goal_half_width: float = 0.03  # stop once the 95% interval is within +-3% of the ratio
    check_every: int = 5  # fewest pairs between interval checks; checks then space out by 25%


CLOCKS = ("wall", "cpu")


@dataclass
class PairedTiming:
    """Seconds per forward, sample i of each side taken back to back, on both clocks;
    source_s/target_s are the headline clock's (`clock`), other_s the other clock's."""

    source_s: list[float] = field(default_factory=list)
    target_s: list[float] = field(default_factory=list)
    clock: str = "wall"  # which clock source_s/target_s hold: "wall" or "cpu" (process CPU time)
    other_s: dict[str, list[float]] = field(default_factory=lambda: {"source": [], "target": []})
    source_first: list[bool] = field(default_factory=list)
    stopped: str = ""  # why sampling ended: "narrow", "budget", "max_pairs"
    elapsed_s: float = 0.0
    load_average: float | None = None  # 1-minute load average when sampling ended (None where unknown)
    cpus: int = 0
    threads: dict[str, Any] | None = None  # porter.runtime.threads.ThreadPolicy.to_dict() of a live pair
    heap: dict[str, Any] | None = None  # porter.runtime.allocator.HeapPolicy.to_dict() of a live pair
    measurement: dict[str, Any] | None = None  # porter.runtime.policy.MeasurementPolicy.to_dict(): the whole policy

    def interval(self) -> RatioInterval:
        """Median over A B B A blocks of target/source, bootstrap 95% (porter.core.stats.paired_ratio)."""
        return paired_ratio(*ab_ba_blocks(self.source_s, self.target_s))

    @property
    def other_clock(self) -> str:
        return CLOCKS[1 - CLOCKS.index(self.clock)]

    def other_interval(self) -> RatioInterval:
        """The same ratio on the other clock, kept beside the headline."""
        return paired_ratio(*ab_ba_blocks(self.other_s["source"], self.other_s["target"]))

    def to_dict(self) -> dict[str, Any]:
        import statistics

        med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
        return {"source_s": self.source_s, "target_s": self.target_s, "source_first": self.source_first,
                "source_median_s": med(self.source_s), "target_median_s": med(self.target_s),
                "pairs": len(self.source_s), "stopped": self.stopped, "elapsed_s": self.elapsed_s,
                "load_average": self.load_average, "cpus": self.cpus, "threads": self.threads,
                "heap": self.heap, "measurement": self.measurement, "clock": self.clock, "other_clock": {"clock": self.other_clock, "source_s": self.other_s["source"],
                                                     "target_s": self.other_s["target"], **self.other_interval().to_dict()},
                **self.interval().to_dict()}


def _machine_load() -> tuple[float | None, int]:
    """(1-minute load average, CPU count): an oversubscribed machine explains a wide interval."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    return load, os.cpu_count() or 0


@dataclass
class Rounds:
    """Seconds per forward of each named side, round i of every side taken back to back, on
    both clocks (`samples` the headline clock's, `other` the other's)."""

    samples: dict[str, list[float]]
    other: dict[str, list[float]]
    forward_first: list[bool] = field(default_factory=list)  # round i ran the sides in the given order
    stopped: str = ""
    elapsed_s: float = 0.0


def time_rounds(steps: dict[str, Step], opts: InterleaveOptions = InterleaveOptions(),
                clock: Callable[[], float] = time.perf_counter, headline_clock: str = "wall",
                watch: tuple[str, str] | None = None) -> Rounds:
    """Warm every side, then time rounds in the given order and reversed, alternately, so each
    pair of sides sees both orders within two rounds (ab_ba_blocks); stop once watch's (reference,
    side) ratio interval is narrow, or the budget ends. Two sides are the headline's A B, B A.
    Three or more (tune's source, untuned and tuned target) cycle A B C, C B A, A C B, B C A: in
    A B C / C B A alone B is always in the middle and never runs right after itself, while A and
    C do at every other round boundary (warm caches); the tune then read a recipe with no
    settings at all as +55-85 us "recovered" on the transformer -> xla (BENCHMARKS.md). The
    four-round cycle gives B and C the middle and the repeats equally (A, the reference of every
    ratio, repeats once more per cycle: no four-round cycle balances all three)."""
    if headline_clock not in CLOCKS:
        raise ValueError(f"headline_clock must be one of {CLOCKS}, not {headline_clock!r}")
    names = list(steps)
    swapped = names[:1] + names[1:][::-1]  # for two sides the same as names: A B, B A, A B, B A
    orders = [names, names[::-1], swapped, swapped[::-1]]
    ref, side = watch or (names[0], names[-1])
    for _ in range(opts.warmup):
        for name in names:
            steps[name]()
    out = Rounds({n: [] for n in names}, {n: [] for n in names})
    pick = 1 if headline_clock == "cpu" else 0
    next_check = max(opts.min_pairs, opts.min_pairs_narrow, opts.check_every)
    start = clock()
    while True:
        n = len(out.forward_first)
        forward = n % 2 == 0
        for name in orders[n % 4]:
            t = timed_call(steps[name])
            out.samples[name].append(t[pick])
            out.other[name].append(t[1 - pick])
        out.forward_first.append(forward)
        n += 1
        elapsed = clock() - start
        if n >= opts.max_pairs:
            out.stopped = "max_pairs"
        elif n >= opts.min_pairs and elapsed >= opts.budget_s:
            out.stopped = "budget"
        elif n >= next_check and elapsed >= opts.min_seconds_narrow:  # the bootstrap costs O(n): check less often
            next_check = max(n + opts.check_every, int(n * 1.25))
            if paired_ratio(*ab_ba_blocks(out.samples[ref], out.samples[side])).half_width <= opts.goal_half_width:
                out.stopped = "narrow"
        if out.stopped:
            out.elapsed_s = elapsed
            return out


def time_interleaved(source: Step, target: Step, opts: InterleaveOptions = InterleaveOptions(),
                     clock: Callable[[], float] = time.perf_counter, headline_clock: str = "wall") -> PairedTiming:
    """Warm both, then time pairs alternately until the interval is narrow or the budget ends.
    headline_clock: "wall", or "cpu" for two single-threaded CPU stacks (see the module docstring)."""
    rounds = time_rounds({"source": source, "target": target}, opts, clock, headline_clock)
    out = PairedTiming(rounds.samples["source"], rounds.samples["target"], clock=headline_clock,
                       other_s={"source": rounds.other["source"], "target": rounds.other["target"]},
                       source_first=rounds.forward_first, stopped=rounds.stopped, elapsed_s=rounds.elapsed_s)
    out.load_average, out.cpus = _machine_load()
    return out
