"""Pick the reader for a file: by --format when given, else by sniffing its head."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from porter.core.checked import FieldOutOfRange
from porter.core.errors import TraceFormatError
from porter.core.suggest import hint_with
from profilers import READER_MODULES
from profilers.base import ReadResult, read_head
from profilers.limits import check_regular


def readers() -> dict[str, ModuleType]:
    """FORMAT name -> reader module, for every reader that imports on this machine."""
    found: dict[str, ModuleType] = {}
    for name in READER_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("profilers"):
                continue  # not written yet
            raise
        found[mod.FORMAT] = mod
    return found


def check_path(path: Path) -> Path:
    """A regular file that opens for reading (checked before opening: a FIFO would block)."""
    check_regular(path)
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TraceFormatError(f"cannot read: {exc.strerror or exc}", path=path) from None
    return path


def detect(path: Path) -> str:
    """The FORMAT name of a trace file, or TraceFormatError naming what it looked like."""
    check_path(path)
    head = read_head(path)
    if not head.strip():
        raise TraceFormatError("file is empty or not a readable trace", path=path)
    for fmt, mod in readers().items():
        if mod.sniff(path, head):
            return fmt
    raise TraceFormatError(
        "not a trace porter can read",
        path=path,
        hint=f"known formats: {', '.join(sorted(readers()))}; force one with --format",
    )


def read_trace(path: Path, fmt: str | None = None) -> ReadResult:
    """Read any supported trace into validated schema tables."""
    path = check_path(Path(path))
    known = readers()
    if fmt is None:
        fmt = detect(path)
    elif fmt not in known:
        raise TraceFormatError(f"unknown format {fmt!r}", path=path, hint=hint_with(fmt, known, f"choose from {', '.join(sorted(known))}"))
    try:
        return known[fmt].read(path).validated()
    except FieldOutOfRange as exc:  # raised by the schema's coercion, which knows no path
        raise TraceFormatError(exc.problem, path=path, hint=exc.hint) from None
