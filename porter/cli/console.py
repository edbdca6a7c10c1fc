"""Terminal output for every command: rich only when it draws something (a table, a bar, a
terminal's colours), so pipes, scripts and `porter --help` never import it."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import typer

from porter.core.errors import PorterError


class LazyConsole:
    """A rich Console built on first use, so `porter --help` never imports rich."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Any = None

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr)
        return self._console

    def _plain(self) -> Any:
        """The raw stream when rich would only copy plain text to it: no console built yet
        (tests install their own), not a terminal by rich's rule (isatty; FORCE_COLOR and
        TTY_COMPATIBLE=1 force one). Pipes and scripts then never import rich."""
        if self._console is not None or os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") == "1":
            return None
        stream = sys.stderr if self._stderr else sys.stdout
        try:
            return None if stream.isatty() else stream
        except (AttributeError, ValueError):
            return None

    def print(self, *objects: Any, **kwargs: Any) -> None:
        plain = self._plain() if len(objects) == 1 and isinstance(objects[0], str) else None
        if plain is not None and kwargs.get("markup") is False and (
                kwargs.get("soft_wrap") is True or _one_short_line(objects[0])):
            plain.write(objects[0] + "\n")  # what rich writes for unstyled, unwrapped text off a terminal
            return
        self.console.print(*objects, **kwargs)

    def print_parts(self, *parts: str | tuple[str, str]) -> None:
        """One line of text pieces, some styled ((text, style), as rich's Text.assemble takes
        them), never read as markup, never wrapped. Off a terminal rich would write the bare
        text: so does this, without importing rich."""
        plain = self._plain()
        if plain is not None:
            plain.write("".join(p if isinstance(p, str) else p[0] for p in parts) + "\n")
            return
        self.console.print(Text.assemble(*parts), highlight=False, soft_wrap=True)

    def status(self, *args: Any, **kwargs: Any) -> Any:
        return self.console.status(*args, **kwargs)

    @property
    def width(self) -> int:
        if self._plain() is not None:  # rich's rule off a terminal: any std stream's terminal, COLUMNS, else 80
            return _columns()
        return int(self.console.width)

    @property
    def is_terminal(self) -> bool:
        if self._plain() is not None:
            return False
        return bool(self.console.is_terminal)


def _one_short_line(text: str) -> bool:
    """Text rich would not wrap: one ASCII line narrower than the console."""
    return text.isascii() and "\n" not in text and len(text) < _columns()


def _columns() -> int:
    width = 0
    for fd in (0, 1, 2):
        try:
            width = os.get_terminal_size(fd).columns
            break
        except (AttributeError, ValueError, OSError):
            continue
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() else (width or 80)


out = LazyConsole()
err = LazyConsole(stderr=True)


def Table(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - rich's class, imported when a table is printed
    from rich.table import Table as RichTable

    return RichTable(*args, **kwargs)


class _LazyText:
    """rich.text.Text, imported when a message is printed (user text as plain text, never markup)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from rich.text import Text as RichText

        return RichText(*args, **kwargs)

    def assemble(self, *parts: Any, **kwargs: Any) -> Any:
        from rich.text import Text as RichText

        return RichText.assemble(*parts, **kwargs)


Text = _LazyText()


# What `porter diagnose` reports as it goes, in order (message prefixes); the bar advances
# on each, and other messages (a live capture's steps) only change its text. Reading a
# trace sends no message: a bad trace must leave exactly one line (the error) on a pipe.
DIAGNOSE_STAGES = ("reading", "aligning", "writing diagnosis", "writing reports")


def stage_of(msg: str, stages: tuple[str, ...]) -> int | None:
    return next((i for i, s in enumerate(stages) if msg.startswith(s)), None)


@contextlib.contextmanager
def stage_progress(title: str, stages: tuple[str, ...]) -> Iterator[Callable[[str], None]]:
    """A progress callback: a rich bar over `stages` on a terminal, one stderr line per
    message on a pipe or file (no bar, no control characters in logs)."""
    if not err.is_terminal:
        yield lambda msg: err.print(f"porter: {msg}", highlight=False, markup=False, soft_wrap=True)
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())
    with Progress(*columns, console=err.console, transient=True) as bar:
        task = bar.add_task(f"{title}: {stages[0]}", total=len(stages))  # the first stage says nothing before it ends

        def progress(msg: str) -> None:
            i = stage_of(msg, stages)
            bar.update(task, description=msg, **({"completed": i} if i is not None else {}))

        with _file_bars(bar):
            yield progress
        bar.update(task, completed=len(stages))


@contextlib.contextmanager
def _file_bars(bar: Any) -> Iterator[None]:
    """One more row of `bar` per big trace while it is read (MiB decompressed so far; the
    parallel readers relay theirs, porter/pipeline/inputs.py): rich allows one live display at a time."""
    from rich.markup import escape

    from profilers import progress as read_progress_hook

    rows: dict[Path, Any] = {}

    def report(path: Path, done: int, total: int) -> None:
        if path not in rows:
            rows[path] = bar.add_task(f"reading {escape(shown(path.name))} (MiB)", total=max(1, total >> 20))
        bar.update(rows[path], completed=done >> 20)

    read_progress_hook.set_reporter(report)
    try:
        yield
    finally:
        read_progress_hook.set_reporter(None)


DEBUG = {"on": False}  # set by the global --debug option


def shown(text: str) -> str:
    """User text made safe for one terminal line: control characters (newlines, escapes,
    the surrogates of undecodable file names) are written as Python escapes."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in str(text))


def print_error(exc: PorterError) -> None:
    """The one line for a user error; its text is never read as rich markup."""
    err.print_parts(("porter: error:", "bold red"), " ", shown(exc.one_line()))


@contextlib.contextmanager
def read_progress() -> Iterator[None]:
    """A bar per big gzipped trace while it decompresses (profilers/progress.py); on a
    terminal only, so pipes and logs stay one line per message."""
    from profilers import progress

    if not err.is_terminal:
        yield
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("reading {task.description}", markup=False), BarColumn(), DownloadColumn(),
                   TimeRemainingColumn(), console=err.console, transient=True)
    tasks: dict[Path, Any] = {}

    def report(path: Path, done: int, total: int) -> None:
        if path not in tasks:
            tasks[path] = bar.add_task(shown(path.name), total=total)
        bar.update(tasks[path], completed=done)

    with bar:
        progress.set_reporter(report)
        try:
            yield
        finally:
            progress.set_reporter(None)


def print_warnings(source: Path, manifest: dict) -> None:
    """What a reader changed or dropped in an otherwise sound trace, one line each."""
    meta = manifest.get("trace_meta")
    for warning in meta.get("warnings", []) if isinstance(meta, dict) else []:
        err.print_parts(("porter: warning:", "yellow"), " ", shown(f"{source}: {warning}"))


def print_measurement(record: dict | None) -> None:
    """The measurement policy's one line (porter.runtime.policy), and the oversubscription
    warning when the load exceeded the cores: printed once per command."""
    if not record:
        return
    out.print(f"  measured: {record.get('summary')}", highlight=False, markup=False, soft_wrap=True)
    if record.get("oversubscribed"):
        out.print_parts(("  warning:", "yellow"), " ", shown(str(record.get("oversubscription"))))


def fail(exc: PorterError) -> None:
    if DEBUG["on"]:
        import traceback

        err.print("".join(traceback.format_exception(exc)), highlight=False, markup=False, soft_wrap=True)
    print_error(exc)
    raise typer.Exit(exc.exit_code)


def escape_markup(text: str) -> str:
    from rich.markup import escape

    return escape(text)
