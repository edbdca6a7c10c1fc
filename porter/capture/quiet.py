"""Third-party output during a capture goes to the bundle's log, not the user's terminal.

Kineto prints `USDT: ... profiler_start` / `profiler_stop` from C++ straight to file
descriptor 2, and JAX warns through Python's warnings (int64 truncation); neither is
something the user of `porter diagnose` can act on. While a capture runs, descriptor 2 points
at a temporary file and Python warnings are recorded; porter's own progress still reaches
the terminal, because sys.stderr is pointed at a copy of the original descriptor.
The text is written into the bundle as `capture.log`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Iterator

LOG = "capture.log"


class NativeLog:
    """What third-party code printed while capturing; `text` once the context has closed."""

    def __init__(self) -> None:
        self.text = ""

    def save(self, bundle_dir: Path) -> None:
        if self.text:
            (Path(bundle_dir) / LOG).write_text(self.text)

    def save_as(self, path: Path) -> Path | None:
        """Write the text to path (its folder made); None when nothing was printed."""
        if not self.text:
            return None
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(self.text)
        return Path(path)


@contextlib.contextmanager
def third_party_output() -> Iterator[NativeLog]:
    """Redirect descriptor 2 and Python warnings into a NativeLog for the duration."""
    log = NativeLog()
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fd = os.dup(2)
    saved_stderr = sys.stderr
    with tempfile.TemporaryFile() as sink, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        os.dup2(sink.fileno(), 2)
        sys.stderr = os.fdopen(os.dup(saved_fd), "w", buffering=1, encoding="utf-8", errors="replace")
        try:
            yield log
        finally:
            sys.stderr.flush()
            sys.stderr.close()
            sys.stderr = saved_stderr
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            sink.seek(0)
            native = sink.read().decode("utf-8", errors="replace")
            lines = [f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught]
            log.text = native + "".join(f"{line}\n" for line in lines)
