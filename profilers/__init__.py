"""Profiler readers: one module per vendor trace format, each turning a file into the
common schema (porter.core.schema). A new format is one new module plus one line in READERS.

Readers import porter.core.schema, porter.core.opclass and porter.core.errors only; never the analysis.
"""

from __future__ import annotations

from profilers.base import ReadResult, Reader, TraceMeta

# Order matters for detection: the first reader whose sniff() accepts a file wins.
READER_MODULES: tuple[str, ...] = (
    "profilers.nsys",
    "profilers.rocpd",
    "profilers.xplane",
    "profilers.rocprof",
    "profilers.onnxruntime",
    "profilers.kineto",
)

__all__ = ["ReadResult", "Reader", "TraceMeta", "READER_MODULES"]
