"""What a shown ratio is a ratio of, in words every view uses alike: a figure below its
physical floor is explained where it is shown, never printed bare."""

from __future__ import annotations

from collections.abc import Mapping

BELOW_ONE = ("below 1x: its profiled steps ran faster than the unprofiled forwards, which alternate with the "
             "other stack's and so start with colder caches; not a profiler cost, nothing taken out")


def overhead_text(overhead: Mapping[str, float]) -> str:
    """Each side's profiler slowdown (profiled step wall time / unprofiled), a value below 1x
    said for what it is (porter.analysis.headline.step_scale leaves such a side unscaled)."""
    parts = []
    for role, v in overhead.items():
        if v is None:
            continue
        parts.append(f"{role} {v:.2f}x" + (f" ({BELOW_ONE})" if v < 1.0 else ""))
    return ", ".join(parts)
