"""How a `porter` process starts and ends: what it turns off or on before a command's imports
(threads, the cyclic collector, pandas options, typer's help), which commands typer builds,
the staged outputs of killed runs cleaned and this run's removed on SIGTERM/SIGHUP, and how
it exits. CLI only: a library never changes its caller's process like this."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from porter.cli.console import fail, print_error
from porter.core.atomic import clean_stale, remove_live
from porter.core.errors import PorterError

if TYPE_CHECKING:
    from typer import Typer


def flag_type_hidden() -> None:
    """typer 0.29 prints `<bool>` beside every on/off flag (--json, --force, --help), where a
    user reads it as a value to pass; flags take none, so their type column stays blank."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "porter_flags_blank", False):
        return

    def display_type_rich(self: TyperOption, ctx: typer.Context) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    display_type_rich.porter_flags_blank = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


MAX_INFLATE_HELP = ("Largest decompressed/compressed size ratio a gzipped trace may have (default 100; real traces "
                    "are 9-22x); 0 lifts the size caps. Stops gzip bombs.")


def set_max_inflate(ratio: Optional[float]) -> None:
    """The readers' decompression cap (profilers/limits.py), for this process and its children."""
    if ratio is not None:
        if ratio < 0:
            fail(PorterError(f"--max-inflate must be 0 or more, not {ratio:g}"))
        os.environ["PORTER_MAX_INFLATE"] = repr(float(ratio))


def object_strings() -> None:
    """New pandas str columns as plain object arrays, not pandas 3's Arrow-backed str dtype:
    the analysis makes hundreds of small str columns, and each Arrow one costs a conversion
    and compute-kernel calls. The values are the same str objects (tests/e2e/test_golden.py:
    diagnosis.json unchanged). For trace commands only. pandas 4 drops the option; then
    this does nothing."""
    import warnings

    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            pd.set_option("future.infer_string", False)
        except (KeyError, ValueError):  # pandas without the option (4 and later)
            pass


def imports_settled() -> None:
    """Called once a command's heavy imports are in (pandas, pyarrow): those objects live until
    the process ends, so they leave the cyclic collector's generations (gc.freeze) instead of
    being rescanned by every full collection the analysis triggers. The collector, off since
    main() began, runs again from here."""
    import gc

    gc.freeze()
    gc.enable()


TRACE_COMMANDS = {"ingest", "show", "report"}  # never run a model


def runs_no_model(argv: list[str]) -> bool:
    """Whether this command line only reads traces or bundles: ingest, show, report, or a
    diagnose whose --from and --to both name existing files or folders."""
    words = [w for w in argv if not w.startswith("--debug")]
    command = words[0] if words else ""
    if command in TRACE_COMMANDS:
        return True
    if command != "diagnose":
        return False
    sides = {}
    for i, w in enumerate(words):
        for opt in ("--from", "--to"):
            if w == opt and i + 1 < len(words):
                sides[opt] = words[i + 1]
            elif w.startswith(opt + "="):
                sides[opt] = w.split("=", 1)[1]
    return len(sides) == 2 and all(os.path.exists(p) for p in sides.values())


def one_blas_thread(argv: list[str]) -> None:
    """Trace commands do no matrix products, but numpy's OpenBLAS starts a thread per core when
    numpy is imported, which spins before it sleeps. One thread for them, unless the user chose."""
    if runs_no_model(argv):
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def only_the_command_run(app: Typer, argv: list[str]) -> None:
    """Register only the command this line runs: typer builds a click command, options and
    all, for every registered one before it parses. `porter --help`, a misspelt command and
    sub-apps keep the whole set."""
    words = [w for w in argv if not w.startswith("--debug")]
    names = {(c.name or c.callback.__name__): c for c in app.registered_commands if c.callback is not None}
    if words and words[0] in names:
        app.registered_commands = [names[words[0]]]
        app.registered_groups = []


def _die_clean(signum: int, frame: object) -> None:
    """A signal that would end the process: remove what it has staged, then die of that signal
    (the default action, so the exit status still says which)."""
    remove_live()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def staging_removed_on_signals() -> None:
    """SIGTERM and SIGHUP take the process's staged outputs with them (Ctrl-C's
    KeyboardInterrupt already unwinds through bundle.staging()); a handler someone else
    installed is left alone. kill -9 cannot be caught: clean_stale_at_start() is for that."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _die_clean)


def _default_outputs(app: Typer) -> set[Path]:
    """The Path defaults of every command's options (bundles/, diagnosis/, ops/ ...)."""
    import inspect

    commands = list(app.registered_commands)
    for group in app.registered_groups:
        commands += getattr(group.typer_instance, "registered_commands", [])
    found = set()
    for c in commands:
        if c.callback is None:
            continue
        for param in inspect.signature(c.callback).parameters.values():
            default = getattr(param.default, "default", None)
            if isinstance(default, Path):
                found.add(default)
    return found


def clean_stale_at_start(app: Typer, argv: list[str]) -> None:
    """Staged folders a killed (kill -9) porter left are removed at the start of the next
    command run here: in the working directory, the commands' default output folders, and
    each folder the command line names (or holds a file it names)."""
    folders = {Path(".")} | _default_outputs(app)
    for word in argv:
        path = Path(word.split("=", 1)[1] if word.startswith("--") and "=" in word else word)
        folders |= {path, path.parent}
    for folder in folders:
        try:
            if folder.is_dir():
                clean_stale(folder)
        except OSError:  # unreadable: the command itself says so
            continue


def main(app: Typer) -> None:
    """Run one command line on app (porter.cli.app passes its own: the commands it registers
    import this module, so this one never imports them)."""
    import gc

    one_blas_thread(sys.argv[1:])
    staging_removed_on_signals()
    clean_stale_at_start(app, sys.argv[1:])
    registered = app.registered_commands, app.registered_groups
    only_the_command_run(app, sys.argv[1:])
    gc.disable()  # until the command's heavy imports are in (imports_settled, or options() for other commands)
    try:
        app()
    except PorterError as exc:  # raised outside a command's own handling
        print_error(exc)
        sys.exit(exc.exit_code)
    except PermissionError as exc:  # a path the user named that this user may not read or list
        print_error(PorterError(f"permission denied{'' if exc.filename else f' ({exc})'}", path=exc.filename))
        sys.exit(PorterError.exit_code)
    finally:
        app.registered_commands, app.registered_groups = registered  # a second main() in the process sees all


def run(app: Typer) -> None:
    """The `porter` program (console script and `python -m porter`): main(), then, for a
    command that only read traces or bundles, an exit without the interpreter's teardown.
    Everything is written, closed and flushed by then; freeing the objects of pandas, pyarrow
    and the analysis one by one only costs time. Commands that ran a model exit normally:
    their stacks' atexit hooks (profilers, compile caches) run; so does a process under a
    profiler or tracer (cProfile, coverage), which writes at exit."""
    code: int | str | None = 0
    try:
        main(app)
    except SystemExit as exc:
        code = exc.code
    watched = sys.getprofile() is not None or sys.gettrace() is not None
    if not isinstance(code, (int, type(None))) or watched or not runs_no_model(sys.argv[1:]):
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: the normal exit reports it
        sys.exit(code)
    os._exit(code or 0)
