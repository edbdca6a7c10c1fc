"""`porter ingest` and `porter show`: trace commands, which never load a model stack."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from porter.cli.console import Table, Text, fail, out, print_error, print_warnings, read_progress, shown
from porter.cli.process import MAX_INFLATE_HELP, imports_settled, set_max_inflate
from porter.core.atomic import OutputError
from porter.core.errors import PorterError
from porter.core.suggest import did_you_mean
from porter.core.units import DISPLAY_CHARS, elide, fmt_us

ENGINE_HELP = ("Where a job directory's ranks are read: local (a process pool on this machine, the default), "
               "serial, or ray (a local Ray instance, or the cluster at --address).")
ADDRESS_HELP = "--engine ray: the address of a running Ray cluster to join (default: start one here)."


def ingest(
    traces: list[Path] = typer.Argument(..., help="Trace files: Kineto JSON(.gz), XPlane .xplane.pb, rocprofv3 JSON, ONNX Runtime profile JSON, Nsight Systems SQLite export, rocpd database (.rpd, rocprofv3 .db)."),
    out_dir: Path = typer.Option(Path("bundles"), "-o", "--out", help="Directory to write one bundle per trace into."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force a reader (kineto, xplane, rocprofv3, onnxruntime, nsys, rocpd) instead of detecting it."),
    max_inflate: Optional[float] = typer.Option(None, "--max-inflate", help=MAX_INFLATE_HELP),
    engine: str = typer.Option("local", "--engine", help=ENGINE_HELP),
    address: Optional[str] = typer.Option(None, "--address", help=ADDRESS_HELP),
) -> None:
    """Read traces into bundles (manifest.json + ops.parquet + kernels.parquet + raw/). A
    directory of one job's rank traces becomes one job bundle (a bundle per rank).

    Examples: porter ingest h100.json.gz mi300x.json.gz -o bundles/ ; porter ingest job_dir/ -o bundles/
    """
    import pyarrow  # noqa: F401 - writes the tables; imported before the collector comes back on

    from porter.bundles.bundle import load_manifest
    from porter.bundles.ingest import ingest as ingest_one

    imports_settled()
    set_max_inflate(max_inflate)
    failed, written = 0, set()
    for trace in traces:
        if trace.is_dir():
            failed += _ingest_job(trace, out_dir, fmt, engine, address)
            continue
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


def _ingest_job(directory: Path, out_dir: Path, fmt: Optional[str], engine: str, address: Optional[str]) -> int:
    """One job directory -> one job bundle; 1 when it failed (said in one line), else 0."""
    from porter.pipeline.job import ingest_job

    try:
        with read_progress():
            dest, job = ingest_job(directory, out_dir, fmt, engine=engine, address=address)
    except OutputError as exc:
        fail(exc)
    except PorterError as exc:
        print_error(exc)
        return 1
    out.print_parts(f"{shown(directory)} -> {shown(dest)}  ",
                    (f"job of {job.world_size} ranks ({job.backend or 'backend unknown'}), rank from "
                     f"{', '.join(job.manifest()['ranks_from'])}: one bundle per rank", "dim"))
    return 0


NUMBER_COLUMNS_WIDTH = 46  # what `porter show`'s number columns and borders take of the terminal


def _key_cell(key: str, by: str, width: int) -> str:
    """A row's name for a table cell: module paths shortened from the middle, others wrap;
    a name past DISPLAY_CHARS elided with a marker (a 200 MB kernel name made rich lay out
    200 MB of cell: a MemoryError after 83 s)."""
    from reports.terminal import abbreviate

    if by in ("module", "module-kind"):
        return abbreviate(key, width)
    return elide(key, min(DISPLAY_CHARS, max(2 * width, 60)))  # a demangled C++ kernel name: two lines, not twenty


def show(
    target: Path = typer.Argument(..., help="A bundle directory, a raw trace file, or a `porter diagnose` directory (both sides)."),
    by: str = typer.Option("op", "--by", help="Group device time by: op (framework ops; a kernel no op launched as 'kernel: NAME'), op-shape (op + input shapes + dtypes), module, module-kind (instance numbers folded: blocks/*/attn), class or kernel; or, for a job directory or job bundle, rank."),
    top: int = typer.Option(15, "--top", "-n", help="Rows to print."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force a reader for a raw trace."),
    max_inflate: Optional[float] = typer.Option(None, "--max-inflate", help=MAX_INFLATE_HELP),
    engine: str = typer.Option("local", "--engine", help=ENGINE_HELP),
    address: Optional[str] = typer.Option(None, "--address", help=ADDRESS_HELP),
) -> None:
    """Print where device time goes, grouped by op, op and shapes, module, module kind, op class or kernel.

    Examples: porter show bundles/h100_Qwen --by module --top 20 ;
    porter show diag/ --by op-shape (both sides of a diagnosis) ;
    porter show job_dir/ --by rank (per rank: step, compute, communication, exposed communication, idle; the straggler)
    """
    from porter.bundles.ingest import open_any
    from porter.analysis.views import GROUPINGS, time_by

    imports_settled()
    set_max_inflate(max_inflate)
    from porter.bundles.job import is_job

    if by == "rank" or is_job(target) or (target.is_dir() and not (target / "manifest.json").is_file()
                                          and not (target / "diagnosis.json").is_file()):
        return show_job(target, by, top, fmt, engine, address)
    if by not in GROUPINGS:
        fail(PorterError(f"--by must be one of {', '.join(GROUPINGS)}, rank, not {by!r}",
                         hint=did_you_mean(by, (*GROUPINGS, "rank")) or None))
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


def show_job(target: Path, by: str, top: int, fmt: Optional[str], engine: str, address: Optional[str]) -> None:
    """A job directory or job bundle, per rank."""
    from porter.cli.job_tables import print_job
    from porter.pipeline.job import view_job

    if by not in ("rank", "op"):  # op: the default, said by no one
        fail(PorterError(f"a job directory shows --by rank, not {by!r}", path=target,
                         hint="or show one rank's trace or bundle"))
    try:
        with read_progress():
            job, view = view_job(target, fmt, engine=engine, address=address)
    except PorterError as exc:
        fail(exc)
    print_job(target, job, view, top)


def show_diagnosis(diag: Path, by: str, top: int) -> None:
    """Both sides of a diagnosis per module, class or op shape, largest absolute gap first."""
    import json

    from rich.markup import escape

    from reports.terminal import op_shape_name

    block = {"op-shape": "by_op_shape", "module": "by_module", "module-kind": "by_module_kind", "class": "by_class"}.get(by)
    if block is None:
        fail(PorterError(f"a diagnosis directory shows --by op-shape, module, module-kind or class, not {by!r}", path=diag,
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
        table.add_row(escape(shown(_key_cell(key, by, name_w))), count, fmt_us(r.get("source_us")), fmt_us(r.get("target_us")),
                      f"[{colour}]{'+' if gap > 0 else ''}{fmt_us(gap)}[/]", "-" if ratio is None else f"{ratio:.2f}x")
    out.print(table)
    if len(rows) > top:
        out.print(f"[dim]... {len(rows) - top} more rows (--top to see more)[/]")
