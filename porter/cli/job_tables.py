"""`porter show DIR --by rank` and `porter ingest DIR`'s terminal output: a job's tables."""

from __future__ import annotations

from pathlib import Path

from porter.analysis.jobview import JobView
from porter.cli.console import Table, Text, out, shown
from porter.core.jobranks import JobRanks
from porter.core.units import fmt_us


def _gb(nbytes: float) -> str:
    if nbytes != nbytes:  # NaN: no shapes recorded
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes:.0f} B"


def print_job(path: Path, job: JobRanks, view: JobView, top: int) -> None:
    """Per-rank time (compute + exposed communication + idle = step), the collectives, the straggler."""
    title = (f"{shown(str(path))}: {job.world_size} ranks ({job.backend or 'backend unknown'}), "
             f"steps {', '.join(map(str, job.steps)) or '-'}; ms; compute + exposed + idle = step")
    t = Table(title=Text(title), title_justify="left", expand=False)
    for col in ("rank", "step", "compute", "comm", "exposed", "idle", "waited", "clock us"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in view.ranks:
        mark = "*" if view.straggler and view.straggler.rank == r.rank else ""
        t.add_row(f"{r.rank}{mark}", *(f"{v / 1e3:.3f}" for v in (r.step_us, r.compute_us, r.communication_us,
                                                                   r.exposed_us, r.idle_us, r.wait_us)),
                  f"{r.clock_offset_us:+.1f}")
    out.print(t)
    c = Table(title=f"collectives every rank recorded ({len(view.collectives)}), in order; busbw in GB/s", title_justify="left",
              expand=False)
    for col in ("collective", "bytes", "algo", "last", "waited", "transfer", "busbw"):
        c.add_column(col, justify="right", no_wrap=True)
    for k in view.collectives[:top]:
        c.add_row(f"{k.kind}#{k.kind_seq}", _gb(k.bytes), f"{k.algorithm or '-'}/{k.protocol or '-'}", str(k.last_rank),
                  fmt_us(k.wait_us), fmt_us(k.transfer_us), "-" if k.bus_gbps is None else f"{k.bus_gbps:.2f}")
    out.print(c)
    if len(view.collectives) > top:
        out.print(f"[dim]... {len(view.collectives) - top} more collectives (--top to see more)[/]")
    s = view.straggler
    if s is not None:
        out.print(Text(shown(f"straggler (*): rank {s.rank}: the others waited {fmt_us(s.wait_us)} on average for it at "
                             f"{s.kind}#{s.kind_seq} ({fmt_us(s.caused_us)} over the step); it fell behind in "
                             f"{s.op} (+{fmt_us(s.op_excess_us)} over the other ranks' median)")))
    cl = view.clock
    out.print(f"[dim]clocks aligned on {cl.anchors} collective ends to rank {cl.reference}'s "
              f"(largest offset {fmt_us(max(cl.raw_skew_us.values(), default=0.0))}, residual {fmt_us(cl.residual_us)})[/]")
    for f in view.findings:
        out.print(Text(shown(f"note: {f}"), style="yellow"))
