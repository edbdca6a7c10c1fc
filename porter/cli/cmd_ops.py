"""`porter ops`: the model's portability matrix, and `porter ops diff` of two of them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from porter.cli.console import Table, err, fail, out
from porter.core.errors import PorterError


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

    Exit codes of `porter ops diff` (as `porter regress`): 0 = no status got worse; 1 = at least
    one op variation's status got worse on a stack; 2 = a user error (missing or bad ops.json).
    """
    from porter.pipeline.preflight import check_run

    try:
        if model == "diff":
            worse = _ops_diff(more or [])
            if worse:
                raise typer.Exit(1)
            return
        if more or (model and all_core_aten):
            raise PorterError(f"unexpected arguments {' '.join(filter(None, [model if all_core_aten else None, *(more or [])]))}",
                              hint="porter ops MODEL --on STACK ... or porter ops --all-core-aten --on STACK ...")
        check_run(None if all_core_aten else model, on)  # before torch loads
        from porter.ops.build import ops_for_core_aten, ops_for_model

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


def _ops_diff(files: list[str]) -> int:
    """Print the changes; the number that got worse (the exit code's reason)."""
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
        return 0
    table = Table(title=f"{len(changes)} status changes", title_justify="left")
    for col in ("op variation", "stack", "before", "after", "change"):
        table.add_column(col, overflow="fold")
    for c in changes:
        table.add_row(c.key, c.target, c.before, c.after, c.direction)
    out.print(table)
    worse = sum(1 for c in changes if c.direction == "worse")
    if worse:
        out.print(f"{worse} status change{'s' if worse > 1 else ''} worse (exit 1)", highlight=False, markup=False)
    return worse
