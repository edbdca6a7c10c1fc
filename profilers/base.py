"""What a reader returns, and the shared file handling every reader uses."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, Union

from porter.core import columns
from porter.core.errors import TraceFormatError
from porter.core.schema import coerce_kernels, coerce_ops, validate
from profilers import progress
from profilers.limits import InflateLimit, check_file_size, check_regular, decompressed_cap, too_large


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


if TYPE_CHECKING:
    import pandas as pd

AnyTable = Union["pd.DataFrame", columns.Table]


class ReadResult:
    """A reader's two tables and the run's facts. A reader gives each table as numpy columns
    (porter.core.columns.Table) or as a DataFrame: `ops_table`/`kernels_table` are the columns
    (no pandas), `ops`/`kernels` DataFrames, made on first use (pandas loads then)."""

    def __init__(self, ops: AnyTable, kernels: AnyTable, meta: TraceMeta):
        self._ops, self._kernels, self.meta = ops, kernels, meta

    @property
    def ops(self) -> "pd.DataFrame":
        if isinstance(self._ops, dict):
            self._ops = columns.to_frame(self._ops)
        return self._ops

    @property
    def kernels(self) -> "pd.DataFrame":
        if isinstance(self._kernels, dict):
            self._kernels = columns.to_frame(self._kernels)
        return self._kernels

    @property
    def ops_table(self) -> columns.Table:
        return columns.as_columns(self._ops)

    @property
    def kernels_table(self) -> columns.Table:
        return columns.as_columns(self._kernels)

    def validated(self) -> "ReadResult":
        """Coerce both tables to the schema's dtypes and check the invariants."""
        if isinstance(self._ops, dict) and isinstance(self._kernels, dict):
            ops_t, kernels_t = columns.coerce_ops(self._ops), columns.coerce_kernels(self._kernels)
            columns.validate(ops_t, kernels_t)
            return ReadResult(ops_t, kernels_t, self.meta)
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


_GZIP_STEP = 1 << 16  # compressed bytes fed to zlib per call: its output stays small
_MAX_RATIO = 1032  # deflate's largest expansion: caps a damaged trailer's size claim


def gunzip(data: bytes, limit: int = 1 << 62, progress: Callable[[int], None] | None = None) -> bytearray:
    """Decompress gzip data (any number of members) into one buffer of the final size.

    `gzip.decompress` grows its output in blocks and joins them at the end, so it peaks
    near twice the result (+390 MB for a 175 MB trace, with the input). Here the buffer
    is allocated once, sized from the trailer's ISIZE (the last member's length mod
    2**32: exact for the usual single member, a first guess otherwise), and filled from
    small steps of zlib output; a wrong guess only costs a resize at the end. Errors are
    the stdlib's: zlib.error for damaged data, EOFError when the data stops mid-member;
    InflateLimit once the output passes `limit` bytes (a gzip bomb stops there).
    `progress`, when given, is called with the compressed bytes consumed so far."""
    n = len(data)
    guess = int.from_bytes(data[-4:], "little") if n >= 18 else 0
    out = bytearray(min(guess, n * _MAX_RATIO, limit))
    view, at, pos = memoryview(data), 0, 0
    inflate, fed = zlib.decompressobj(16 + zlib.MAX_WBITS), False
    while at < n:
        chunk = view[at : at + _GZIP_STEP]
        piece = inflate.decompress(chunk)
        out[pos : pos + len(piece)] = piece  # grows the buffer if the guess was short
        pos += len(piece)
        if pos > limit:
            raise InflateLimit(pos)
        at += len(chunk)
        if progress is not None:
            progress(at)
        fed = True
        if inflate.eof:  # end of a member: another may follow, after optional zero padding
            at -= len(inflate.unused_data)
            while at < n and view[at] == 0:
                at += 1
            inflate, fed = zlib.decompressobj(16 + zlib.MAX_WBITS), False
    if fed:
        raise EOFError("compressed file ended before the end-of-stream marker was reached")
    del out[pos:]
    return out


def read_bytes(path: Path) -> bytes | bytearray:
    """Whole file, gunzipped when needed (then a bytearray, see gunzip); damage becomes
    a TraceFormatError."""
    size = check_regular(path).st_size  # a FIFO would block the read forever
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
            if magic != GZIP_MAGIC:
                check_file_size(path, size)
            fh.seek(0)
            data = fh.read()
    except OSError as exc:
        raise TraceFormatError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if data[:2] == GZIP_MAGIC:
        limit, why = decompressed_cap(len(data))
        try:
            data = gunzip(data, limit, progress.for_file(path, len(data)))
        except InflateLimit:
            raise too_large(path, why) from None
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceFormatError(f"damaged gzip data ({exc})", path=path) from None
    if not data or data.isspace():  # not data.strip(): that copies a file ending in a newline
        raise TraceFormatError("file is empty", path=path)
    return data
