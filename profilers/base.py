"""What a reader returns, and the shared file handling every reader uses."""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from porter.errors import TraceFormatError
from porter.schema import coerce_kernels, coerce_ops, validate


@dataclass
class TraceMeta:
    """Facts about the recorded run, for the bundle's manifest."""

    profiler: str  # e.g. "kineto", "xplane", "rocprofv3", "onnxruntime"
    device_type: str  # cuda, rocm, cpu, tpu, gpu, mtia
    device_name: str = ""
    device_properties: dict[str, Any] = field(default_factory=dict)
    framework_versions: dict[str, str] = field(default_factory=dict)
    events_read: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReadResult:
    ops: pd.DataFrame
    kernels: pd.DataFrame
    meta: TraceMeta

    def validated(self) -> "ReadResult":
        """Coerce both tables to the schema's dtypes and check the invariants."""
        ops, kernels = coerce_ops(self.ops), coerce_kernels(self.kernels)
        validate(ops, kernels)
        return ReadResult(ops, kernels, self.meta)


class Reader(Protocol):
    """A profiler format. Modules in profilers/ expose these three names."""

    FORMAT: str

    def sniff(self, path: Path, head: bytes) -> bool: ...

    def read(self, path: Path) -> ReadResult: ...


GZIP_MAGIC = b"\x1f\x8b"


def read_head(path: Path, n: int = 4096) -> bytes:
    """First n bytes of the file, decompressed when gzipped (tolerates truncation)."""
    with open(path, "rb") as fh:
        raw = fh.read(n if not path.name.endswith(".gz") else 1 << 16)
    if raw[:2] == GZIP_MAGIC:
        try:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, n)
        except zlib.error:
            return b""
    return raw[:n]


def gunzip(data: bytes) -> bytes:
    """Decompress a gzip file in one allocation. `gzip.decompress` grows its output in
    blocks and joins them, so it peaks near twice the result; here the output buffer is
    sized up front from the trailer's ISIZE (the length mod 2**32). The result is checked
    against that trailer (length and CRC), which also catches multi-member files (the
    trailer then belongs to the last member); anything unexpected takes the stdlib path."""
    if len(data) >= 18:
        isize = int.from_bytes(data[-4:], "little")
        try:
            out = zlib.decompress(data, 16 + zlib.MAX_WBITS, max(isize, 1))
        except zlib.error:
            out = None
        if out is not None and len(out) % 2**32 == isize and zlib.crc32(out) == int.from_bytes(data[-8:-4], "little"):
            return out
        del out
    return gzip.decompress(data)


def read_bytes(path: Path) -> bytes:
    """Whole file, gunzipped when needed; damage becomes a TraceFormatError."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if data[:2] == GZIP_MAGIC:
        try:
            data = gunzip(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceFormatError(f"damaged gzip data ({exc})", path=path) from None
    if not data or data.isspace():  # not data.strip(): that copies a file ending in a newline
        raise TraceFormatError("file is empty", path=path)
    return data
