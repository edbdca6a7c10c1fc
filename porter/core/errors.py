"""The one user-facing error type.

Anything the user can fix (a bad path, a corrupt trace, a missing target) raises
PorterError; the CLI prints its one-line message and exits with `exit_code`.
Any other exception is porter's own bug and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path


class PorterError(Exception):
    """A problem with the user's input or environment, told in one line."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | Path | None = None, hint: str | None = None):
        self.path = str(path) if path is not None else None
        self.problem = message
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = f"{self.path}: {self.problem}" if self.path else self.problem
        if self.hint:
            text += f" ({self.hint})"
        return text


class TraceFormatError(PorterError):
    """The file is not a trace porter can read, or is damaged."""


class BundleError(PorterError):
    """A bundle is missing, incomplete, or of another schema version."""


class TargetUnavailable(PorterError):
    """A target (device + stack) cannot run on this machine."""

    exit_code = 3
