"""`porter export`: a diagnosis (both runs) or one bundle or trace as a Perfetto timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from porter.cli.console import fail, out, read_progress
from porter.cli.process import MAX_INFLATE_HELP, imports_settled, set_max_inflate
from porter.core.errors import PorterError


def export(
    source: Path = typer.Argument(..., help="A `porter diagnose` directory (both runs), a bundle directory or a trace file (one run)."),
    perfetto: bool = typer.Option(True, "--perfetto", help="Write a Perfetto trace (.pftrace; open it at ui.perfetto.dev). The only format today, and the default."),
    out_path: Optional[Path] = typer.Option(None, "-o", "--out", help="The .pftrace to write (default for a diagnosis: DIR/pair.pftrace; a bundle or trace needs -o)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force a reader for a trace file."),
    max_inflate: Optional[float] = typer.Option(None, "--max-inflate", help=MAX_INFLATE_HELP),
) -> None:
    """Put runs on one timeline: each side a process, its host ops and each device stream a track,
    every matched group linked source -> target by a flow, the 10 largest gaps on their own track.

    Examples: porter export diag/ --perfetto (writes diag/pair.pftrace) ;
    porter export bundles/h100_Qwen --perfetto -o h100.pftrace
    """
    from porter.pipeline.timeline import PAIR_TIMELINE, check_destination

    try:
        diagnosis = (source / "diagnosis.json").is_file()
        if not source.exists():
            raise PorterError("no such file or directory", path=source,
                              hint="give a `porter diagnose` directory, a bundle directory or a trace file")
        if out_path is None and not diagnosis:
            raise PorterError("a bundle or trace has no folder of porter's to write into", path=source,
                              hint="name the file: -o run.pftrace")
        dest = check_destination(out_path if out_path is not None else source / PAIR_TIMELINE)
    except PorterError as exc:
        fail(exc)
    imports_settled()
    set_max_inflate(max_inflate)
    from porter.bundles.ingest import open_any
    from porter.pipeline.timeline import export_bundle, export_diagnosis

    try:
        if diagnosis:
            summary = export_diagnosis(source, dest)
        else:
            with read_progress():
                bundle = open_any(source, fmt)
            summary = export_bundle(bundle.ops, bundle.kernels, bundle.manifest, bundle.label, dest)
    except PorterError as exc:
        fail(exc)
    flows = f", {summary.flows} matched groups linked" if diagnosis else ""
    out.print(f"wrote {summary.path} ({summary.bytes / 1e6:.1f} MB: {summary.sides} run{'s' if summary.sides != 1 else ''}, "
              f"{summary.tracks} tracks, {summary.slices} slices{flows}); open it at https://ui.perfetto.dev",
              highlight=False, markup=False, soft_wrap=True)
