"""How much a trace may grow when decompressed, and which files are read at all.

A few MB of gzip can expand to many GB (a damaged or hostile file: 5 GB of whitespace
compresses to 5 MB), so decompression stops at a cap: MAX_INFLATE times the compressed
size (real traces expand 9-22x: the corpus's range), at least FLOOR_BYTES, and never more
than half the memory available now (the parse needs several times the text). The CLI's
`--max-inflate N` (or PORTER_MAX_INFLATE) raises the ratio; 0 lifts every cap.
Non-regular files (FIFOs, devices, sockets) are refused before they are opened: reading
one would block forever or never end.
"""

from __future__ import annotations

import os
import resource
import stat
from pathlib import Path

from porter.core.errors import TraceFormatError

MAX_INFLATE = 100
FLOOR_BYTES = 64 << 20
FLAG = "--max-inflate"


class InflateLimit(Exception):
    """Raised by profilers.base.gunzip when its output passes the cap it was given."""


class TooLarge(TraceFormatError):
    """A trace would decompress or load past porter's cap."""


def max_inflate() -> float:
    """The ratio in force: PORTER_MAX_INFLATE when set (the CLI flag sets it), else MAX_INFLATE."""
    try:
        return float(os.environ.get("PORTER_MAX_INFLATE", MAX_INFLATE))
    except ValueError:
        return MAX_INFLATE


def available_memory() -> int:
    """Bytes this process may still allocate: MemAvailable, less under an address-space limit."""
    avail = 1 << 62
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/statm", "rb") as fh:
                used = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            used = 0
        avail = min(avail, soft - used)
    return max(avail, 0)


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def decompressed_cap(compressed: int) -> tuple[int, str]:
    """(largest decompressed size allowed for a file of `compressed` bytes, why that size)."""
    ratio = max_inflate()
    if ratio <= 0:
        return 1 << 62, ""
    by_ratio = max(int(compressed * ratio), FLOOR_BYTES)
    by_memory = available_memory() // 2
    if by_memory < by_ratio:
        return by_memory, f"half the memory available now ({_mb(by_memory)})"
    return by_ratio, f"{ratio:g}x its compressed size ({_mb(compressed)} -> {_mb(by_ratio)})"


def too_large(path: Path, why: str) -> TooLarge:
    return TooLarge(f"decompresses to more than {why}; damaged or not a trace?", path=path,
                    hint=f"if it is a real trace, raise the cap with {FLAG} 1000 (0: no cap)")


def check_file_size(path: Path, size: int) -> None:
    """An uncompressed file too big to load in the memory available."""
    if max_inflate() > 0 and size > available_memory() // 2:
        raise TooLarge(f"is {_mb(size)}, more than half the memory available now ({_mb(available_memory() // 2)})",
                       path=path, hint=f"free memory or use a bigger machine ({FLAG} 0 reads it anyway)")


def check_regular(path: Path) -> os.stat_result:
    """stat of a regular file; TraceFormatError (without opening it) for anything else."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceFormatError("no such file", path=path) from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read: {exc.strerror or exc}", path=path) from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise TraceFormatError("is a directory, not a trace file", path=path,
                               hint="pass the trace file inside it, or a bundle to `porter show`")
    if not stat.S_ISREG(mode):
        kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
                else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise TraceFormatError(f"is {kind}, not a trace file", path=path, hint="save the trace to a file first")
    return st
