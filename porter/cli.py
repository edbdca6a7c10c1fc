"""The `porter` command line: parses options, calls one library function per command,
prints. Logic lives in the modules it calls, so everything here is scriptable from Python."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import typer

from porter.errors import PorterError
from porter.units import fmt_us

app = typer.Typer(
    name="porter",
    help=(
        "Find where time and accuracy are lost when a model moves between accelerators "
        "(CUDA -> TPU, CUDA -> ROCm, eager -> compiled), and what to fix first.\n\n"
        "Start with `porter show TRACE` on any profiler trace, or `porter ingest` to keep a bundle."
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

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*objects, **kwargs)

    def status(self, *args: Any, **kwargs: Any) -> Any:
        return self.console.status(*args, **kwargs)

    @property
    def width(self) -> int:
        return int(self.console.width)

    @property
    def is_terminal(self) -> bool:
        return bool(self.console.is_terminal)


out = LazyConsole()
err = LazyConsole(stderr=True)


def Table(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - rich's class, imported when a table is printed
    from rich.table import Table as RichTable

    return RichTable(*args, **kwargs)


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

        yield progress
        bar.update(task, completed=len(stages))


def fail(exc: PorterError) -> None:
    err.print(f"[bold red]porter: error:[/] {exc.one_line()}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


@app.command()
def ingest(
    traces: list[Path] = typer.Argument(..., help="Trace files: Kineto JSON(.gz), XPlane .xplane.pb, rocprofv3 JSON, ONNX Runtime profile JSON."),
    out_dir: Path = typer.Option(Path("bundles"), "-o", "--out", help="Directory to write one bundle per trace into."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force a reader (kineto, xplane, rocprofv3, onnxruntime) instead of detecting it."),
) -> None:
    """Read traces into bundles (manifest.json + ops.parquet + kernels.parquet + raw/).

    Example: porter ingest h100.json.gz mi300x.json.gz -o bundles/
    """
    from porter.bundle import load_bundle
    from porter.ingest import ingest as ingest_one

    failed = 0
    for trace in traces:
        try:
            dest = ingest_one(trace, out_dir, fmt)
        except PorterError as exc:
            err.print(f"[bold red]porter: error:[/] {exc.one_line()}", highlight=False, soft_wrap=True)
            failed += 1
            continue
        b = load_bundle(dest)
        s = b.manifest["stats"]
        out.print(
            f"{trace} -> {dest}  [dim]{b.manifest['profiler']}, {b.manifest['device']['name'] or b.manifest['device']['type']}: "
            f"{s['ops']} ops, {s['kernels']} kernels, {fmt_us(s['device_us_total'])} device time, read in {s['read_seconds']:.2f} s[/]",
            highlight=False,
        )
    if failed:
        raise typer.Exit(2)


@app.command()
def show(
    target: Path = typer.Argument(..., help="A bundle directory or a raw trace file."),
    by: str = typer.Option("op", "--by", help="Group device time by: op, module, class or kernel."),
    top: int = typer.Option(15, "--top", "-n", help="Rows to print."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force a reader for a raw trace."),
) -> None:
    """Print where device time goes, grouped by op, module, op class or kernel.

    Example: porter show bundles/h100_Qwen --by module --top 20
    """
    from porter.ingest import open_any
    from porter.analysis.views import GROUPINGS, time_by

    if by not in GROUPINGS:
        fail(PorterError(f"--by must be one of {', '.join(GROUPINGS)}, not {by!r}"))
    try:
        bundle = open_any(target, fmt)
    except PorterError as exc:
        fail(exc)
    table_df = time_by(bundle.ops, bundle.kernels, by)
    total = float(table_df["device_us"].sum())
    dev = bundle.manifest.get("device", {})
    title = f"{bundle.label}: {dev.get('name') or dev.get('type', '?')} - {fmt_us(total)} device time, {len(bundle.ops)} ops, {len(bundle.kernels)} kernels"
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column(by, overflow="ellipsis", max_width=max(30, out.width - 50), no_wrap=True)
    table.add_column("device", justify="right")
    table.add_column("share", justify="right")
    table.add_column("count", justify="right")
    if by != "kernel":
        table.add_column("host", justify="right")
    for row in table_df.head(top).itertuples():
        cells = [str(row.key), fmt_us(row.device_us), f"{row.share * 100:.1f}%", str(row.count)]
        if by != "kernel":
            cells.append(fmt_us(row.host_us))
        table.add_row(*cells)
    out.print(table)
    rest = len(table_df) - top
    if rest > 0:
        out.print(f"[dim]... {rest} more rows (--top to see more)[/]")


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
    no_report: bool = typer.Option(False, "--no-report", help="Write only diagnosis.json, not report.html, report.md and summary.md."),
    steps: int = typer.Option(3, "--steps", help="Live capture: profiled forwards per side."),
    warmup: int = typer.Option(1, "--warmup", help="Live capture: unrecorded forwards before timing and profiling."),
    repeats: int = typer.Option(10, "--repeats", help="Live capture: timed (unprofiled) forwards per side."),
) -> None:
    """Align two runs, attribute time and accuracy loss per op and module, rank fixes.

    Examples: porter diagnose transformer --from cpu --to xla -o diag/ ;
    porter diagnose --from h100.json.gz --to mi300x.json.gz -o diag/
    """
    import shlex

    from porter.capture.options import CaptureOptions
    from porter.diagnose import diagnose_specs, summary_lines

    if oracle not in (None, "fp64"):
        fail(PorterError(f"--oracle must be fp64, not {oracle!r}"))
    opts = CaptureOptions(steps=steps, warmup=warmup, repeats=repeats)
    command = "porter " + shlex.join(sys.argv[1:]) if sys.argv[1:] else None
    try:
        with stage_progress("diagnosing", DIAGNOSE_STAGES) as progress:
            d, dest = diagnose_specs(src, tgt, out_dir, model=model, force=force, oracle=oracle, catalogue=catalogue,
                                     report=not no_report, capture_options=opts, progress=progress, command=command)
    except PorterError as exc:
        fail(exc)
    if as_json:
        sys.stdout.write(dest.read_text())
        return
    for line in summary_lines(d, width=min(100, out.width)):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    out.print(f"wrote {dest}", highlight=False, markup=False, soft_wrap=True)
    if not no_report:
        out.print("  and report.html (open in a browser), report.md, summary.md beside it", highlight=False, markup=False)


@app.command()
def capture(
    model: str = typer.Argument("transformer", help="Built-in model name (see `porter models`), FILE.py:factory or package.module:factory."),
    on: str = typer.Option("cpu", "--on", help="Target DEVICE[:STACK], e.g. cpu, cpu:inductor, cuda, tpu, xla, cpu:ort (see `porter targets`)."),
    out_dir: Optional[Path] = typer.Option(None, "-o", "--out", help="Bundle directory to write (default: captures/MODEL@TARGET)."),
    steps: int = typer.Option(5, "--steps", help="Profiled forwards."),
    warmup: int = typer.Option(2, "--warmup", help="Unrecorded forwards before timing and before profiling."),
    repeats: int = typer.Option(20, "--repeats", help="Timed (unprofiled) forwards."),
    no_activations: bool = typer.Option(False, "--no-activations", help="Skip saving per-module activations."),
    activation_cap_mb: int = typer.Option(256, "--activation-cap-mb", help="Stop saving activations beyond this size (MB)."),
) -> None:
    """Run MODEL on a target under the target's own profiler and write a capture bundle.

    Example: porter capture transformer --on cpu:inductor -o captures/tf_inductor
    """
    from porter.capture.options import CaptureOptions
    from porter.capture.run import capture as run_capture

    dest = out_dir or Path("captures") / f"{Path(model).stem if ':' in model else model}@{on.replace(':', '_')}"
    opts = CaptureOptions(steps=steps, warmup=warmup, repeats=repeats, activations=not no_activations,
                          activation_cap_bytes=activation_cap_mb * 1024 * 1024)
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
    fmt: str = typer.Option("all", "--format", help="html, md (report.md + summary.md), json, or all."),
    out_path: Optional[Path] = typer.Option(None, "-o", "--out", help="Output directory (default: DIAGNOSIS_DIR), or a file name (.html/.md/.json) for one format."),
) -> None:
    """Render a diagnosis: report.html (one self-contained file), report.md (for a PR), summary.md (one page, plain words).

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


def main() -> None:
    try:
        app()
    except PorterError as exc:  # raised outside a command's own handling
        err.print(f"porter: error: {exc.one_line()}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
