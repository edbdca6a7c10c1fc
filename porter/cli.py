"""The `porter` command line: parses options, calls one library function per command,
prints. Logic lives in the modules it calls, so everything here is scriptable from Python."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from porter.errors import PorterError

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
    rich_markup_mode="rich",
)
out = Console()
err = Console(stderr=True)


def fail(exc: PorterError) -> None:
    err.print(f"[bold red]porter: error:[/] {exc.one_line()}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def fmt_us(us: float) -> str:
    if us != us:  # NaN
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} us"


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
    from porter.views import GROUPINGS, time_by

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
    model: Optional[str] = typer.Argument(None, help="Model to capture when --from/--to name targets (zoo name or pkg.mod:factory)."),
    src: str = typer.Option(..., "--from", help="Source run: a bundle directory, a trace file, or (with MODEL) a target like cpu."),
    tgt: str = typer.Option(..., "--to", help="Target run: a bundle directory, a trace file, or (with MODEL) a target like xla."),
    out_dir: Path = typer.Option(Path("diagnosis"), "-o", "--out", help="Directory for diagnosis.json and the two bundles."),
    oracle: Optional[str] = typer.Option(None, "--oracle", help="Accuracy oracle for live captures: fp64."),
    as_json: bool = typer.Option(False, "--json", help="Print diagnosis.json instead of the summary."),
    force: bool = typer.Option(False, "--force", help="Compare runs of different models anyway."),
    catalogue: Optional[Path] = typer.Option(None, "--catalogue", help="Fix catalogue file replacing the built-in one."),
) -> None:
    """Align two runs, attribute the time gap per op and module, rank fixes.

    Example: porter diagnose --from h100.json.gz --to mi300x.json.gz -o diag/
    """
    from porter.diagnose import diagnose as run_diagnosis
    from porter.diagnose import summary_lines

    if oracle not in (None, "fp64"):
        fail(PorterError(f"--oracle must be fp64, not {oracle!r}"))
    try:
        d, dest = run_diagnosis(src, tgt, out_dir, model=model, force=force,
                                oracle=oracle, catalogue=catalogue)
    except PorterError as exc:
        fail(exc)
    if as_json:
        sys.stdout.write(dest.read_text())
        return
    for line in summary_lines(d, width=min(100, out.width)):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    out.print(f"wrote {dest}", highlight=False, markup=False, soft_wrap=True)


def main() -> None:
    try:
        app()
    except PorterError as exc:  # raised outside a command's own handling
        err.print(f"porter: error: {exc.one_line()}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
