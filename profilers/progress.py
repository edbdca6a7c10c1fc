"""Progress of long reads, for a front end to draw (the CLI shows a bar on a terminal).

Off unless a reporter is set; readers report compressed bytes consumed, so a bar moves
while a big gzipped trace is decompressed, the longest single step of a read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

Reporter = Callable[[Path, int, int], None]  # (file, bytes done, bytes in all)
MIN_BYTES = 16 << 20  # smaller reads end before a bar would help

_reporter: Optional[Reporter] = None


def set_reporter(reporter: Optional[Reporter]) -> None:
    global _reporter
    _reporter = reporter


def current_reporter() -> Optional[Reporter]:
    """The reporter now set (a parallel read relays its children's progress to it)."""
    return _reporter


def for_file(path: Path, total: int) -> Optional[Callable[[int], None]]:
    """A callback taking bytes done for this file, or None when no one is listening or
    the file is small."""
    reporter = _reporter
    if reporter is None or total < MIN_BYTES:
        return None
    return lambda done: reporter(path, done, total)
