"""The `porter` command line: parses options, calls one library function per command,
prints. Logic lives in the modules it calls, so everything here is scriptable from Python."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import typer

from porter.cli import params as cli_params
from porter.core.atomic import OutputError
from porter.core.errors import PorterError
from porter.core.units import fmt_us


def _flag_type_hidden() -> None:
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


_flag_type_hidden()
cli_params.install()  # str/Path/int/float options without typer's pydantic adapters (~0.1 s a command)

app = typer.Typer(
    name="porter",
    help=(
        "Find where time and accuracy are lost when a model moves between accelerators "
        "(CUDA -> TPU, CUDA -> ROCm, eager -> compiled), and what to fix first.\n\n"
        "Start with `porter diagnose MODEL --from cpu --to xla` (runs both sides now) or "
        "`porter diagnose --from A.json.gz --to B.json.gz` (two recorded traces); it writes "
        "diagnosis.json, report.html, report.md and summary.md. `porter show TRACE` looks at one trace."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: typer's rich help imports markdown-it (~0.1 s per call)
)


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
        TTY_COMPATIBLE=1 force one). Saves importing rich (~0.03 s) on pipes and in scripts."""
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
        text: so does this, without importing rich (~0.02 s)."""
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


# Commands that call imports_settled() once their table imports are in; main() holds the
# cyclic collector off until then (importing pandas + pyarrow with it on costs ~0.06 s more).
SETTLING_COMMANDS = {"diagnose", "ingest", "show"}


@app.callback()
def options(ctx: typer.Context,
            debug: bool = typer.Option(False, "--debug", help="On an error, also print the full chained traceback "
                                                               "(the user's code and the stack's own error).")) -> None:
    """Global options (before the command: porter --debug diagnose ...)."""
    DEBUG["on"] = debug
    if ctx.invoked_subcommand not in SETTLING_COMMANDS:
        import gc

        gc.enable()  # main() turned it off for the imports; this command never calls imports_settled()


MAX_INFLATE_HELP = ("Largest decompressed/compressed size ratio a gzipped trace may have (default 100; real traces "
                    "are 9-22x); 0 lifts the size caps. Stops gzip bombs.")


def set_max_inflate(ratio: Optional[float]) -> None:
    """The readers' decompression cap (profilers/limits.py), for this process and its children."""
    if ratio is not None:
        if ratio < 0:
            fail(PorterError(f"--max-inflate must be 0 or more, not {ratio:g}"))
        os.environ["PORTER_MAX_INFLATE"] = repr(float(ratio))


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


def fail(exc: PorterError) -> None:
    if DEBUG["on"]:
        import traceback

        err.print("".join(traceback.format_exception(exc)), highlight=False, markup=False, soft_wrap=True)
    print_error(exc)
    raise typer.Exit(exc.exit_code)


def object_strings() -> None:
    """New pandas str columns as plain object arrays, not pandas 3's Arrow-backed str dtype:
    the analysis makes hundreds of small str columns, and each Arrow one costs a conversion
    and compute-kernel calls (~0.05 s of the corpus Qwen pair's analysis). The values are
    the same str objects (tests/test_golden.py: diagnosis.json unchanged). CLI only, for
    trace commands: a library never sets its caller's pandas options. pandas 4 drops the
    option; then this does nothing."""
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
    being rescanned by every full collection the analysis triggers. Measured on the corpus Qwen
    pair diagnosis: ~0.25 s less CPU of ~1.6 s. The collector, off since main() began, runs
    again from here. CLI only: a library never freezes its caller's heap."""
    import gc

    gc.freeze()
    gc.enable()


@app.command()
def ingest(
    traces: list[Path] = typer.Argument(..., help="Trace files: Kineto JSON(.gz), XPlane .xplane.pb, rocprofv3 JSON, ONNX Runtime profile JSON."),
    out_dir: Path = typer.Option(Path("bundles"), "-o", "--out", help="Directory to write one bundle per trace into."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force a reader (kineto, xplane, rocprofv3, onnxruntime) instead of detecting it."),
    max_inflate: Optional[float] = typer.Option(None, "--max-inflate", help=MAX_INFLATE_HELP),
) -> None:
    """Read traces into bundles (manifest.json + ops.parquet + kernels.parquet + raw/).

    Example: porter ingest h100.json.gz mi300x.json.gz -o bundles/
    """
    import pyarrow  # noqa: F401 - writes the tables; imported before the collector comes back on

    from porter.bundles.bundle import load_manifest
    from porter.bundles.ingest import ingest as ingest_one

    imports_settled()
    set_max_inflate(max_inflate)
    failed, written = 0, set()
    for trace in traces:
        try:
            with read_progress():
                dest = ingest_one(trace, out_dir, fmt, taken=written)
            manifest = load_manifest(dest)  # the tables stay unread: no pandas (porter.core.columns)
        except OutputError as exc:
            fail(exc)  # the next trace cannot be written there either
        except PorterError as exc:
            print_error(exc)
            failed += 1
            continue
        written.add(dest)
        s = manifest["stats"]
        out.print_parts(f"{shown(trace)} -> {shown(dest)}  ",
                        (f"{manifest['profiler']}, {manifest['device']['name'] or manifest['device']['type']}: "
                         f"{s['ops']} ops, {s['kernels']} kernels, {fmt_us(s['device_us_total'])} device time, "
                         f"read in {s['read_seconds']:.2f} s", "dim"))
        print_warnings(trace, manifest)
    if failed:
        raise typer.Exit(2)


NUMBER_COLUMNS_WIDTH = 46  # what `porter show`'s number columns and borders take of the terminal


def _key_cell(key: str, by: str, width: int) -> str:
    """A row's name for a table cell: module paths shortened from the middle, others wrap."""
    from reports.terminal import abbreviate

    return abbreviate(key, width) if by == "module" else key


@app.command()
def show(
    target: Path = typer.Argument(..., help="A bundle directory, a raw trace file, or a `porter diagnose` directory (both sides)."),
    by: str = typer.Option("op", "--by", help="Group device time by: op, op-shape (op + input shapes + dtypes), module, class or kernel."),
    top: int = typer.Option(15, "--top", "-n", help="Rows to print."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force a reader for a raw trace."),
    max_inflate: Optional[float] = typer.Option(None, "--max-inflate", help=MAX_INFLATE_HELP),
) -> None:
    """Print where device time goes, grouped by op, op and shapes, module, op class or kernel.

    Examples: porter show bundles/h100_Qwen --by module --top 20 ;
    porter show diag/ --by op-shape (both sides of a diagnosis)
    """
    from porter.bundles.ingest import open_any
    from porter.analysis.views import GROUPINGS, time_by

    imports_settled()
    set_max_inflate(max_inflate)
    if by not in GROUPINGS:
        fail(PorterError(f"--by must be one of {', '.join(GROUPINGS)}, not {by!r}"))
    if (target / "diagnosis.json").is_file():
        return show_diagnosis(target, by, top)
    try:
        with read_progress():
            bundle = open_any(target, fmt)
    except PorterError as exc:
        fail(exc)
    print_warnings(target, bundle.manifest)
    table_df = time_by(bundle.ops, bundle.kernels, by)
    total = float(table_df["device_us"].sum())
    dev = bundle.manifest.get("device", {})
    title = f"{bundle.label}: {dev.get('name') or dev.get('type', '?')} - {fmt_us(total)} device time, {len(bundle.ops)} ops, {len(bundle.kernels)} kernels"
    table = Table(title=Text(shown(title)), title_justify="left", expand=False)
    name_w = max(24, out.width - NUMBER_COLUMNS_WIDTH)
    table.add_column(by, overflow="fold", max_width=name_w)
    table.add_column("device", justify="right", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)  # names from the trace: no markup
    if by != "kernel":
        table.add_column("host", justify="right", no_wrap=True)
    for row in table_df.head(top).itertuples():
        cells = [Text(shown(_key_cell(str(row.key), by, name_w))), fmt_us(row.device_us), f"{row.share * 100:.1f}%", str(row.count)]
        if by != "kernel":
            cells.append(fmt_us(row.host_us))
        table.add_row(*cells)
    out.print(table)
    rest = len(table_df) - top
    if rest > 0:
        out.print(f"[dim]... {rest} more rows (--top to see more)[/]")


def show_diagnosis(diag: Path, by: str, top: int) -> None:
    """Both sides of a diagnosis per module, class or op shape, largest absolute gap first."""
    import json

    from rich.markup import escape

    from reports.terminal import op_shape_name

    block = {"op-shape": "by_op_shape", "module": "by_module", "class": "by_class"}.get(by)
    if block is None:
        fail(PorterError(f"a diagnosis directory shows --by op-shape, module or class, not {by!r}", path=diag,
                         hint="or show one side's bundle: DIR/source or DIR/target"))
    try:
        rows = json.loads((diag / "diagnosis.json").read_text()).get(block) or []
    except (OSError, ValueError) as exc:
        fail(PorterError(f"unreadable diagnosis.json ({exc})", path=diag))
    rows = sorted(rows, key=lambda r: abs(r.get("delta_us") or 0.0), reverse=True)
    table = Table(title=f"{diag}: {len(rows)} rows by {by}, largest gap first (gap = target - source)",
                  title_justify="left", expand=False)
    name_w = max(24, out.width - NUMBER_COLUMNS_WIDTH)
    table.add_column(by, overflow="fold", max_width=name_w)
    for col in ("count", "source", "target", "gap", "ratio"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows[:top]:
        key = op_shape_name(r) if by == "op-shape" else str(r.get("key") or "(no module)")
        count = f"{r.get('source_count', 0)}/{r.get('target_count', 0)}"
        gap = r.get("delta_us") or 0.0
        colour = "red" if gap > 0 else "green"
        ratio = r.get("ratio")
        table.add_row(escape(_key_cell(key, by, name_w)), count, fmt_us(r.get("source_us")), fmt_us(r.get("target_us")),
                      f"[{colour}]{'+' if gap > 0 else ''}{fmt_us(gap)}[/]", "-" if ratio is None else f"{ratio:.2f}x")
    out.print(table)
    if len(rows) > top:
        out.print(f"[dim]... {len(rows) - top} more rows (--top to see more)[/]")


@app.command()
def diagnose(
    model: Optional[str] = typer.Argument(None, help="Model to capture when --from/--to name targets (zoo name or pkg.mod:factory; default: transformer)."),
    src: str = typer.Option(..., "--from", help="Source run: a bundle directory, a trace file, or a target like cpu (captured now)."),
    tgt: str = typer.Option(..., "--to", help="Target run: a bundle directory, a trace file, or a target like xla (captured now)."),
    out_dir: Path = typer.Option(Path("diagnosis"), "-o", "--out", help="Directory for diagnosis.json and the two bundles."),
    oracle: Optional[str] = typer.Option(None, "--oracle", help="Accuracy oracle for live captures: fp64 (the model in float64 on the CPU)."),
    as_json: bool = typer.Option(False, "--json", help="Print diagnosis.json instead of the summary."),
    force: bool = typer.Option(False, "--force", help="Compare runs of different models anyway."),
    catalogue: Optional[Path] = typer.Option(None, "--catalogue", help="Fix catalogue TOML merged over the built-in one (docs/fixes.md)."),
    no_report: bool = typer.Option(False, "--no-report", help="Write only diagnosis.json, not report.html, report.md and summary.md/.html."),
    steps: int = typer.Option(3, "--steps", help="Live capture: profiled forwards per side."),
    warmup: int = typer.Option(1, "--warmup", help="Live capture: unrecorded forwards before timing and profiling."),
    repeats: int = typer.Option(10, "--repeats", help="Live capture: timed (unprofiled) forwards per side."),
    with_ops: bool = typer.Option(False, "--ops", help="Live capture: also check each op alone on the target stack (porter ops) and flag fallbacks, unsupported and mismatched ops in the report and fix plan."),
    max_inflate: Optional[float] = typer.Option(None, "--max-inflate", help=MAX_INFLATE_HELP),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Precision port: the target (captured now) runs the model cast to fp32, fp64, bf16 or fp16; tolerances follow that dtype and each finding says whether its error is what the dtype implies or more."),
    autocast: Optional[str] = typer.Option(None, "--autocast", help="Precision port on a torch stack: the target's forward runs under torch.autocast to bf16 or fp16 (weights stay as given)."),
) -> None:
    """Align two runs, attribute time and accuracy loss per op and module, rank fixes.

    Examples: porter diagnose transformer --from cpu --to xla -o diag/ ;
    porter diagnose --from h100.json.gz --to mi300x.json.gz -o diag/
    """
    import gc
    import shlex

    import orjson

    from porter.capture.options import CaptureOptions
    from porter.pipeline.diagnose import diagnose_specs, render_reports
    from reports.terminal import summary_lines

    imports_settled()
    if runs_no_model(sys.argv[1:]):
        object_strings()
    set_max_inflate(max_inflate)
    if oracle not in (None, "fp64"):
        fail(PorterError(f"--oracle must be fp64, not {oracle!r}"))
    opts = CaptureOptions(steps=steps, warmup=warmup, repeats=repeats)
    command = "porter " + shlex.join(sys.argv[1:]) if sys.argv[1:] else None
    try:
        with stage_progress("diagnosing", DIAGNOSE_STAGES) as progress:
            d, dest = diagnose_specs(src, tgt, out_dir, model=model, force=force, oracle=oracle, catalogue=catalogue,
                                     report=False, capture_options=opts, progress=progress, command=command,
                                     ops=with_ops, target_dtype=dtype or "", target_autocast=autocast or "")
            del d  # the reports need only diagnosis.json: free the analysis before rendering
            gc.collect()
            payload = render_reports(dest, progress) if not no_report else None
    except PorterError as exc:
        fail(exc)
    if as_json:
        sys.stdout.write(dest.read_text())
        return
    if payload is None:
        payload = orjson.loads(dest.read_bytes())  # porter wrote it: no NaN
    for line in summary_lines(payload, width=min(100, out.width)):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    wrote = "wrote diagnosis.json" + (", report.html, report.md, summary.md, summary.html" if not no_report else "")
    out.print(f"{wrote} in", highlight=False, markup=False)
    out.print(f"  {dest.parent}", highlight=False, markup=False, soft_wrap=True)


@app.command()
def capture(
    model: str = typer.Argument("transformer", help="Built-in model name (see `porter models`), FILE.py:factory or package.module:factory."),
    on: str = typer.Option("cpu", "--on", help="Target DEVICE[:STACK], e.g. cpu, cpu:inductor, cuda, tpu, xla, cpu:ort (see `porter targets`)."),
    out_dir: Optional[Path] = typer.Option(None, "-o", "--out", help="Bundle directory to write (default: captures/MODEL@TARGET)."),
    steps: int = typer.Option(5, "--steps", help="Profiled forwards."),
    warmup: int = typer.Option(2, "--warmup", help="Unrecorded forwards before timing and before profiling."),
    repeats: int = typer.Option(20, "--repeats", help="Timed (unprofiled) forwards."),
    no_activations: bool = typer.Option(False, "--no-activations", help="Skip saving per-module activations."),
    modules: Optional[list[str]] = typer.Option(None, "--modules", help="Module path (repeatable) whose full input and output tensors are saved; every other module keeps a bounded sketch. Name the suspects a diagnose of two bundles lists."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Run the model cast to fp32, fp64, bf16 or fp16 (weights, buffers and floating inputs): one side of a precision port."),
    autocast: Optional[str] = typer.Option(None, "--autocast", help="Run the forward under torch.autocast to bf16 or fp16 (torch stacks): one side of a precision port."),
) -> None:
    """Run MODEL on a target under the target's own profiler and write a capture bundle.

    Example: porter capture transformer --on cpu:inductor -o captures/tf_inductor
    """
    from porter.capture.options import CaptureOptions
    from porter.capture.run import capture as run_capture

    dest = out_dir or Path("captures") / f"{Path(model).stem if ':' in model else model}@{on.replace(':', '_')}"
    opts = CaptureOptions(steps=steps, warmup=warmup, repeats=repeats, activations=not no_activations,
                          full_modules=tuple(p for m in modules or () for p in m.split(",") if p), dtype=dtype or "",
                          autocast=autocast or "")
    try:
        with err.status("capturing", spinner="dots") as status:
            result = run_capture(model, on, dest, opts, progress=lambda msg: status.update(msg))
    except PorterError as exc:
        fail(exc)
    m = result.manifest
    t, s = m["timing"], m["stats"]
    out.print(f"{m['model']['name']} on {m['target']['text']} ({m['device'].get('name') or m['device'].get('type')}) -> {result.path}", highlight=False)
    noisy = " [yellow](noisy: spread above 10%, rerun on a quiet machine)[/]" if t["noisy"] else ""
    out.print(f"  step time: median {fmt_us(t['median_s'] * 1e6)} +/- {fmt_us(t['iqr_s'] * 1e6 / 2)} (IQR/median {t['spread'] * 100:.0f}%, {len(t['samples_s'])} samples){noisy}", highlight=False)
    out.print(f"  profiler overhead: {m['profiler_overhead']:.2f}x; device time with a module path: {s['module_share'] * 100:.0f}%", highlight=False)
    if not m["numerics"]["ok"]:
        out.print(f"  [bold red]numerics: output has NaN ({m['numerics']['nan_count']}) / Inf ({m['numerics']['inf_count']})[/]")
    if m.get("stack_info", {}).get("compiled_regions") is not None:
        out.print(f"  compiled regions: {m['stack_info']['compiled_regions']}, graph breaks: {m['stack_info'].get('graph_breaks', 0)}")
    if m.get("precision"):
        out.print(f"  precision: {m['precision']['dtype']} ({m['precision']['how']})", highlight=False)
    acts = m.get("activations") or {}
    if acts.get("full_modules"):
        out.print(f"  full module calls saved: {', '.join(acts['full_modules'])}", highlight=False)
    for path, why in (acts.get("full_modules_missing") or {}).items():
        out.print(f"  [yellow]--modules {path}: not saved ({why})[/]", highlight=False)
    for row in s["top_modules"]:
        out.print(f"    {row['module']:<32} {fmt_us(row['device_us'])} ({row['share'] * 100:.1f}%)", highlight=False)


@app.command()
def models() -> None:
    """List the built-in models with parameter counts and input shapes."""
    from porter.capture.models import load_model
    from porter.capture.models.zoo import BUILTINS

    table = Table(title="built-in models (or pass FILE.py:factory / package.module:factory)", title_justify="left")
    for col in ("name", "params", "inputs", "about"):
        table.add_column(col)
    for name, b in BUILTINS.items():
        spec = load_model(name)
        table.add_row(name, f"{spec.param_count:,}", " ".join(str(tuple(s)) for s in spec.input_shapes()), b.about)
    out.print(table)


@app.command()
def targets() -> None:
    """List targets (DEVICE:STACK) and whether each can run on this machine, and if not why."""
    from rich.markup import escape

    from porter.targets import all_targets, get_stack

    table = Table(title="targets on this machine", title_justify="left")
    for col in ("target", "available", "reason / remedy"):
        table.add_column(col, overflow="fold")
    for spec in all_targets():
        a = get_stack(spec.stack).availability(spec.device)
        table.add_row(spec.text, "yes" if a.ok else "no", "" if a.ok else escape(f"{a.reason}; {a.remedy}"))
    out.print(table)


@app.command()
def report(
    diagnosis_dir: Path = typer.Argument(..., help="A directory written by `porter diagnose` (holds diagnosis.json)."),
    fmt: str = typer.Option("all", "--format", help="html (report.html + summary.html), md (report.md + summary.md), json, or all."),
    out_path: Optional[Path] = typer.Option(None, "-o", "--out", help="Output directory (default: DIAGNOSIS_DIR), or a file name (.html/.md/.json) for one format."),
) -> None:
    """Render a diagnosis: report.html (one self-contained file), report.md (for a PR), summary.md and summary.html (one page, plain words).

    Example: porter report diag/ --format html -o qwen.html
    """
    from reports.build import FORMATS, write_reports

    formats = list(FORMATS) if fmt == "all" else [fmt]
    try:
        paths = write_reports(diagnosis_dir, formats, out_path)
    except PorterError as exc:
        fail(exc)
    for p in paths:
        out.print(str(p), highlight=False)


# ---- porter bench / porter regress (porter/bench/) ----
from typer.core import TyperGroup  # noqa: E402


class _BenchGroup(TyperGroup):
    """`porter bench SUITE|MODEL ...` is short for `porter bench run SUITE|MODEL ...`."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


bench_app = typer.Typer(
    cls=_BenchGroup, no_args_is_help=True, rich_markup_mode="rich",
    help="Benchmark models across stacks with a history: `porter bench SUITE.toml|builtin|MODEL --on A --on B`, "
         "then `porter bench report` and `porter regress`.",
)
app.add_typer(bench_app, name="bench")
DB_HELP = "History store: a SQLite file or postgresql://user:pass@host/db (default: $PORTER_BENCH_DB or ~/.local/share/porter/bench.sqlite)."


@bench_app.command("run")
def bench_run(
    what: str = typer.Argument(..., help="SUITE.toml, `builtin` (porter's models on every stack) or one model (built-in name or FILE.py:factory)."),
    on: Optional[list[str]] = typer.Option(None, "--on", help="Target to run on (repeat: --on cpu --on xla); overrides the suite's stacks."),
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
    export: Path = typer.Option(Path("porter-bench-runs"), "--export", help="Folder for the run's Parquet artifact."),
    mode: str = typer.Option("inference", "--mode", help="One model: inference or train."),
    dtype: str = typer.Option("float32", "--dtype", help="One model: float32, float64, bfloat16 or float16."),
    threshold: float = typer.Option(0.05, "--threshold", help="One model: practical threshold for regressions (0.05 = 5%)."),
    budget: float = typer.Option(30.0, "--budget", help="Seconds of timing per case (all targets together), after compiling."),
    min_samples: int = typer.Option(10, "--min-samples", help="Samples per target before the stopping rule applies."),
    max_samples: int = typer.Option(200, "--max-samples", help="Most samples per target."),
    target_ci: float = typer.Option(0.01, "--target-ci", help="Stop once every median's 95% interval is within +/- this fraction."),
    warmup: int = typer.Option(3, "--warmup", help="Untimed steps per target after the first (compiling) one."),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch intra-op threads (default: torch's own)."),
    confirm: bool = typer.Option(False, "--confirm", help="Re-run suspect series (slow in this run only) at once, to confirm or clear them."),
) -> None:
    """Run a benchmark suite (interleaved across targets, adaptive sample count), store it, export it.

    Examples: porter bench builtin --on cpu --on cpu:inductor --on xla --on cpu:ort ;
    porter bench suite.toml ; porter bench mlp --on cpu --on cpu:inductor
    """
    from porter.bench.parquet import export_run
    from porter.bench.store import Store, safe_url
    from porter.bench.suite import BUILTIN_STACKS, builtin_suite, load_suite, single_case, with_stacks

    stacks = tuple(on or ())
    try:
        if what == "builtin":
            suite = builtin_suite(stacks or BUILTIN_STACKS)
        elif what.endswith(".toml"):
            suite = with_stacks(load_suite(Path(what)), stacks)
        else:
            suite = single_case(what, stacks or ("cpu",), mode=mode, dtype=dtype, threshold=threshold)
        store = Store(db)  # a bad suite or store fails here, before torch loads
        from porter.bench.runner import RunnerOptions, run_suite

        opts = RunnerOptions(warmup=warmup, min_samples=min_samples, max_samples=max_samples, target_ci=target_ci,
                             budget_s=budget, threads=threads)
        run = run_suite(suite, opts, progress=lambda msg: err.print(f"porter: {msg}", highlight=False, markup=False))
        store.write_run(run)
        path = export_run(run, export)
        rerun = None
        if confirm:
            from porter.bench.confirm import confirm_suspects

            rerun = confirm_suspects(suite, run, store, opts, progress=lambda msg: err.print(f"porter: {msg}", highlight=False, markup=False))
            if rerun is not None:
                export_run(rerun, export)
    except PorterError as exc:
        fail(exc)
    table = Table(title=f"porter bench {suite.name}: run {run.run_id[:12]}", title_justify="left")
    for col in ("case", "target", "median", "95% interval", "samples", "note"):
        table.add_column(col, overflow="fold")
    for r in run.results:
        if r.status != "ok":
            table.add_row(r.case, r.target, "-", "-", "-", f"failed: {r.error}")
            continue
        lo, hi = r.ci_s
        table.add_row(r.case, r.target, fmt_us(r.median_s * 1e6), f"{fmt_us(lo * 1e6)} - {fmt_us(hi * 1e6)}",
                      f"{len(r.samples_s)} x {r.number}", "unstable (never alerts)" if r.unstable else "")
    out.print(table)
    out.print(f"stored in {safe_url(store.url)}; artifact {path}", highlight=False, markup=False, soft_wrap=True)
    if confirm:
        out.print(f"re-ran {len(rerun.results)} suspect series as run {rerun.run_id[:12]}: see `porter regress`" if rerun
                  else "no suspect series to re-run", highlight=False, markup=False)


@bench_app.command("report")
def bench_report(
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
    out_dir: Path = typer.Option(Path("bench-report"), "-o", "--out", help="Folder for bench.html and bench.md."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Target the ratios are taken to (default: each case's first)."),
) -> None:
    """Render the history: per case a table of stacks, per series a trend chart (bench.html, bench.md)."""
    from porter.bench.report import write_report
    from porter.bench.store import Store

    try:
        paths = write_report(Store(db), out_dir, baseline)
    except PorterError as exc:
        fail(exc)
    for p in paths:
        out.print(str(p), highlight=False)


@bench_app.command("import")
def bench_import(
    files: list[Path] = typer.Argument(..., help="Parquet files written by `porter bench` (--export)."),
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Load exported runs into a store (runs already there are left alone)."""
    from porter.bench.parquet import read_run
    from porter.bench.store import Store

    try:
        store = Store(db)
        for f in files:
            run = read_run(f)
            added = store.write_run(run)
            out.print(f"{f}: run {run.run_id[:12]} {'imported' if added else 'already in the store'}",
                      highlight=False, soft_wrap=True)
    except PorterError as exc:
        fail(exc)


@app.command()
def regress(
    db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts as JSON."),
) -> None:
    """Judge each benchmark series' newest run against its history; exit 1 on a confirmed regression.

    A regression must be significant (Mann-Whitney U, Holm-corrected), beyond the practical
    threshold (bootstrap interval of the ratio of medians) and seen in two consecutive runs.
    """
    import json

    from porter.bench.regress import regress as judge
    from porter.bench.store import Store

    try:
        report = judge(Store(db).histories())
    except PorterError as exc:
        fail(exc)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n")
    else:
        for v in report.verdicts:
            style = "bold red" if v.status == "regression" else "yellow" if v.status in ("suspect", "failed") else "dim"
            out.print(f"[{style}]{v.status:>18}[/]  {escape_markup(v.series)}  {escape_markup(v.reason)}", soft_wrap=True)
        out.print(f"{len(report.regressions)} confirmed regression(s) in {len(report.verdicts)} series", highlight=False)
    if report.regressions:
        raise typer.Exit(1)


def escape_markup(text: str) -> str:
    from rich.markup import escape

    return escape(text)
STATUS_STYLE = {"native": "green", "decomposed": "cyan", "host_fallback": "yellow", "unsupported": "red",
                "numerics_mismatch": "magenta"}


def _ops_table(m) -> Table:
    from rich.markup import escape

    stacks = [s for s in m.stacks if s.available]
    table = Table(title=f"porter ops: {m.model} ({len(m.rows)} op variations, {m.seconds:.0f} s)", title_justify="left")
    for col in ("op", "dtypes", "shapes", "calls"):
        table.add_column(col, overflow="fold")
    for s in stacks:
        table.add_column(s.target, overflow="fold")
    for r in m.rows:
        cells = []
        for s in stacks:
            c = r.cells.get(s.target)
            if c is None:
                cells.append("")
                continue
            v = c.confirmed or c.predicted
            text = f"[{STATUS_STYLE.get(v.status, '')}]{escape(v.label())}[/]"
            if c.agrees is False:
                text += f" [dim](predicted {escape(c.predicted.status)})[/]"
            cells.append(text)
        table.add_row(escape(r.op), ",".join(r.dtypes), r.shape_class, str(r.calls), *cells)
    return table


@app.command()
def ops(
    model: Optional[str] = typer.Argument(None, help="Built-in model, FILE.py:factory or package.module:factory (default: transformer); or `diff` followed by two ops.json files."),
    more: Optional[list[str]] = typer.Argument(None, help="With `diff`: A.json B.json."),
    on: list[str] = typer.Option(["xla", "cpu:inductor", "cpu:ort"], "--on", help="Target to check (repeat): xla, cpu:inductor, cpu:ort."),
    all_core_aten: bool = typer.Option(False, "--all-core-aten", help="Every core ATen op instead of MODEL's, predicted from each stack's registries."),
    out_dir: Path = typer.Option(Path("ops"), "-o", "--out", help="Directory for ops.json, ops.md and ops.html."),
    catalogue: Optional[Path] = typer.Option(None, "--catalogue", help="Fix catalogue TOML merged over the built-in one."),
) -> None:
    """The model's portability matrix: each op's status per stack (native, decomposed, host_fallback,
    unsupported, numerics_mismatch), predicted from the stack's registries, confirmed by running
    each op alone on its recorded inputs, and the cost of each gap.

    Examples: porter ops transformer --on xla --on cpu:inductor --on cpu:ort -o ops/ ;
    porter ops --all-core-aten --on xla --on cpu:inductor ; porter ops diff old/ops.json new/ops.json
    """
    from porter.ops.build import ops_for_core_aten, ops_for_model

    try:
        if model == "diff":
            _ops_diff(more or [])
            return
        if more or (model and all_core_aten):
            raise PorterError(f"unexpected arguments {' '.join(filter(None, [model if all_core_aten else None, *(more or [])]))}",
                              hint="porter ops MODEL --on STACK ... or porter ops --all-core-aten --on STACK ...")
        with err.status("porter ops", spinner="dots") as status:
            if all_core_aten:
                m = ops_for_core_aten(on, catalogue=catalogue, progress=status.update)
            else:
                m = ops_for_model(model or "transformer", on, catalogue=catalogue, progress=status.update)
        import shlex

        from reports.ops_page import write_ops_pages

        m.command = "porter " + shlex.join(sys.argv[1:])
        dest = m.write(out_dir / "ops.json")
        pages = write_ops_pages(m.to_json(), out_dir)
    except PorterError as exc:
        fail(exc)
    if not all_core_aten:
        out.print(_ops_table(m))
    for s in m.stacks:
        if not s.available:
            out.print(f"{s.target}: {s.why}", highlight=False, markup=False, soft_wrap=True)
            continue
        agree, judged = m.agreement(s.target)
        counts = ", ".join(f"{k} {v}" for k, v in m.counts(s.target).items() if v)
        said = f"; prediction = confirmation for {agree}/{judged}" if judged else " (predicted)"
        out.print(f"{s.target}: {counts}{said}", highlight=False, markup=False)
    out.print(f"wrote {dest}, {', '.join(str(p) for p in pages)}", highlight=False, markup=False, soft_wrap=True)


def _ops_diff(files: list[str]) -> None:
    from porter.ops.diff import diff_matrices, version_changes
    from porter.ops.matrix import read_matrix

    if len(files) != 2:
        raise PorterError("porter ops diff takes two ops.json files", hint="porter ops diff A.json B.json")
    a, b = read_matrix(Path(files[0])), read_matrix(Path(files[1]))
    for name, (va, vb) in version_changes(a, b).items():
        out.print(f"{name}: {va} -> {vb}", highlight=False, markup=False)
    changes = diff_matrices(a, b)
    if not changes:
        out.print("no status changed", highlight=False, markup=False)
        return
    table = Table(title=f"{len(changes)} status changes", title_justify="left")
    for col in ("op variation", "stack", "before", "after", "change"):
        table.add_column(col, overflow="fold")
    for c in changes:
        table.add_row(c.key, c.target, c.before, c.after, c.direction)
    out.print(table)


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
    numpy is imported, which spins before it sleeps (~0.05 s of CPU on two cores, a tenth of
    `porter ingest` of a 20k-event trace). One thread for them, unless the user chose."""
    if runs_no_model(argv):
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def only_the_command_run(argv: list[str]) -> None:
    """Register only the command this line runs: typer builds a click command, options and
    all, for every registered one before it parses (~7 ms of a 0.3 s `porter ingest`).
    `porter --help`, a misspelt command and sub-apps keep the whole set."""
    words = [w for w in argv if not w.startswith("--debug")]
    names = {(c.name or c.callback.__name__): c for c in app.registered_commands if c.callback is not None}
    if words and words[0] in names:
        app.registered_commands = [names[words[0]]]
        app.registered_groups = []


def main() -> None:
    import gc

    one_blas_thread(sys.argv[1:])
    registered = app.registered_commands, app.registered_groups
    only_the_command_run(sys.argv[1:])
    gc.disable()  # until the command's heavy imports are in (imports_settled, or options() for other commands)
    try:
        app()
    except PorterError as exc:  # raised outside a command's own handling
        print_error(exc)
        sys.exit(exc.exit_code)
    finally:
        app.registered_commands, app.registered_groups = registered  # a second main() in the process sees all


def run() -> None:
    """The `porter` program (console script and `python -m porter`): main(), then, for a
    command that only read traces or bundles, an exit without the interpreter's teardown.
    Everything is written, closed and flushed by then; freeing the ~1M objects of pandas,
    pyarrow and the analysis one by one only costs time (~0.03-0.05 s of CPU). Commands that
    ran a model exit normally: their stacks' atexit hooks (profilers, compile caches) run; so
    does a process under a profiler or tracer (cProfile, coverage), which writes at exit."""
    code: int | str | None = 0
    try:
        main()
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


if __name__ == "__main__":
    run()
