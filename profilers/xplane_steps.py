"""Which profiled step an XLA op ran in, from the step markers an XSpace carries.

``jax.profiler.StepTraceAnnotation(name, step_num=i)`` (and TensorFlow's step markers)
write one host event with an integer stat ``step_num`` around the step's host work; porter's
xla stack wraps each profiled forward (with its ``block_until_ready``) in one, numbered
from 0. Work launched inside that window belongs to the step: XLA:CPU thunks run inside it,
GPU kernels are launched inside it (the launch's host event carries the kernel's
correlation id). TPU device planes may instead carry a ``Steps`` line whose events name the
step number; it is used only when the host marks no steps. Traces without markers give
step -1 to every op, as before.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from porter.core.schema import NO_ID
from profilers.xplane_events import Event, PlaneView, line_events, text

STEP_STAT = "step_num"
DEVICE_STEPS_LINE = "Steps"


@dataclass
class StepSpans:
    """Step windows [start, end] in picoseconds, sorted by start, with their step numbers."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)

    @staticmethod
    def from_windows(windows: dict[int, tuple[int, int]]) -> "StepSpans":
        spans = sorted((lo, hi, num) for num, (lo, hi) in windows.items())
        return StepSpans([s[0] for s in spans], [s[1] for s in spans], [s[2] for s in spans])

    def __bool__(self) -> bool:
        return bool(self.starts)

    def at(self, t_ps: int) -> int:
        """The step whose window holds t (the latest-starting one), NO_ID outside every step."""
        i = bisect_right(self.starts, t_ps) - 1
        while i >= 0:
            if t_ps <= self.ends[i]:
                return self.numbers[i]
            i -= 1
        return NO_ID


def _widen(windows: dict[int, tuple[int, int]], num: int, start: int, end: int) -> None:
    """A step marked on several threads spans all its marks."""
    lo, hi = windows.get(num, (start, end))
    windows[num] = (min(lo, start), max(hi, end))


def host_steps(view: PlaneView | None, path: Path) -> StepSpans:
    """Step windows from host events with an integer ``step_num`` stat (any thread)."""
    windows: dict[int, tuple[int, int]] = {}
    if view is None:
        return StepSpans()
    step_ids = {k for k, v in view.stat_names.items() if v == STEP_STAT}
    if not step_ids:
        return StepSpans()
    for line in view.plane.lines:
        for start, dur, ev in line_events(view, line, path):
            for s in ev.stats:
                if s.metadata_id in step_ids:
                    num = view.value(s)
                    if isinstance(num, int) and not isinstance(num, bool) and num >= 0:
                        _widen(windows, num, start, start + dur)
                    break
    return StepSpans.from_windows(windows)


def device_steps(views: list[PlaneView], path: Path) -> StepSpans:
    """Step windows from device planes' ``Steps`` lines (event named by its step number)."""
    windows: dict[int, tuple[int, int]] = {}
    for view in views:
        for line in view.plane.lines:
            if text(line.name) != DEVICE_STEPS_LINE:
                continue
            for start, dur, ev in line_events(view, line, path):
                num = view.event_stats(ev).get(STEP_STAT)
                if not isinstance(num, int):
                    name = view.event_name(ev.metadata_id).strip()
                    num = int(name) if name.isascii() and name.isdigit() else None
                if num is not None and 0 <= num < 2**63:  # a step number fits int64
                    _widen(windows, num, start, start + dur)
    return StepSpans.from_windows(windows)


def group_steps(groups: list[list[Event]], spans: StepSpans, launch_start_ps: dict[int, int]) -> list[int]:
    """Each op group's step: where its first kernel was launched on the host (by correlation
    id), else where it started (thunks and TPU ops start inside their step's window)."""
    if not spans:
        return [NO_ID] * len(groups)
    out = []
    for group in groups:
        corr = group[0].stats.get("correlation_id")
        t = launch_start_ps.get(corr, group[0].start_ps) if isinstance(corr, int) else group[0].start_ps
        out.append(spans.at(t))
    return out
