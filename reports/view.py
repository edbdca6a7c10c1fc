"""ReportModel -> what the templates show: charts, plain-words summary, derived totals.

Kept apart from the adapter (reports.build) and the templates, so wording and chart
choices can change without touching how diagnosis.json is read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reports import charts
from reports.model import Fix, ReportModel, TimeRow
from reports.fields import NO_MODULE
from porter.core.units import fmt_days, fmt_pct, fmt_ratio, fmt_us

TOP_MODULES = 15
WATERFALL_STEPS = 8
TOP_FIXES = 3


@dataclass(frozen=True)
class Point:
    """One plain-words statement of the leadership summary."""

    heading: str
    text: str


CLASS_WORDS = {
    "matmul": "matrix multiplies", "conv": "convolutions", "attention": "attention", "norm": "normalisation",
    "softmax": "softmax", "elementwise": "elementwise math", "reduction": "reductions",
    "embedding": "embedding lookups", "copy": "memory copies and casts", "memset": "memory fills",
    "collective": "communication between devices", "communication": "communication between devices",
    "optimizer": "optimizer updates", "sync": "synchronisation", "other": "other work",
    "compiled": "torch.compile regions (against the eager ops they replace)",
}


def class_words(op_class: str) -> str:
    """An op class in words a non-specialist reads ('matmul' -> 'matrix multiplies')."""
    return CLASS_WORDS.get(op_class, op_class)


def _differences(m: ReportModel, n: int = 2) -> str:
    """Where the target is slower and where faster, by op class, in plain words (gross when a
    class hides losses behind a net win, or wins behind a net loss)."""
    total = m.source.total_us or 1.0
    def amount(r: TimeRow, loss: bool) -> float:
        gross = r.gross_loss_us if loss else r.gross_win_us
        return gross if gross is not None else r.gap_us
    slower = sorted((r for r in m.by_class if amount(r, True) > 0.01 * total), key=lambda r: -amount(r, True))[:n]
    faster = sorted((r for r in m.by_class if amount(r, False) < -0.01 * total), key=lambda r: amount(r, False))[:n]
    parts = []
    if slower:
        parts.append("slower on " + " and ".join(f"{class_words(r.key)} (+{fmt_us(amount(r, True))})" for r in slower))
    if faster:
        parts.append("faster on " + " and ".join(f"{class_words(r.key)} ({fmt_us(amount(r, False))})" for r in faster))
    if not parts:
        return ""
    gross = any(abs(amount(r, loss) - r.gap_us) > 1e-6 * total
                for rows, loss in ((slower, True), (faster, False)) for r in rows)
    note = (" Each amount sums the op shapes that got slower (or faster) in that class; the net per class "
            "is in the op-class table.") if gross else ""
    return "The target is " + ", and ".join(parts) + "." + note


def speed_phrase(ratio: float | None) -> str:
    """The end-to-end ratio in words, as the same number the tables show (never its inverse)."""
    if ratio is None or ratio != ratio:
        return "could not be compared"
    verdict = "at parity" if abs(ratio - 1) < 0.02 else "slower" if ratio > 1 else "faster"
    return f"takes {fmt_ratio(ratio)} the time ({verdict})"


def side_titles(m: ReportModel) -> tuple[str, str]:
    """What to call each side in a title: the device, plus the stack when both run on the same device."""
    src, tgt = m.source, m.target
    if src.device_name == tgt.device_name:
        return f"{src.device_name} ({src.stack})", f"{tgt.device_name} ({tgt.stack})"
    return src.device_name, tgt.device_name


def summary_points(m: ReportModel) -> list[Point]:
    """Where the port stands, what remains, what it costs, what it recovers: no kernel names."""
    src, tgt = m.source, m.target
    spread = ""
    if m.ratio.lo is not None and m.ratio.hi is not None:
        spread = f" ({m.ratio.kind or 'measured spread'} {fmt_ratio(m.ratio.lo)} to {fmt_ratio(m.ratio.hi)})"
    where = f"Against {src.device_name} ({src.stack}), {m.model} on {tgt.device_name} ({tgt.stack}) "
    if m.profiled_ratio is not None:  # live: the headline is unprofiled; the device times are the profiled steps'
        stands = (where + f"{speed_phrase(m.ratio.value)} per forward, timed unprofiled and alternately{spread}. "
                  f"The profiled steps ({fmt_us(tgt.total_us)} against {fmt_us(src.total_us)} of device time) "
                  "say where the time goes, not how much.")
    else:
        stands = (where + f"{speed_phrase(m.ratio.value)}: {fmt_us(tgt.total_us)} against {fmt_us(src.total_us)} of "
                  f"device time{spread}."
                  + (f" In wall-clock time per step it {speed_phrase(m.wall_ratio)}." if m.wall_ratio is not None else ""))
    if m.ratio_advice:
        stands += f" Too uncertain to plan on: {m.ratio_advice}."
    points = [Point("Where the port stands", stands)]
    diff = _differences(m)
    if diff:
        points.append(Point("Where it differs", diff))
    if m.accuracy is None:
        why = ("this diagnosis compared recorded profiles only, with no model outputs to check" if m.mode == "trace"
               else "this diagnosis did not compare the model's outputs")
        points.append(Point("Accuracy", f"Not measured: {why}."))
    else:
        bad = [r for r in m.accuracy.rows if r.introduces]
        gaps = len(m.accuracy.not_compared)
        extra = (f" {len(bad)} of {len(m.accuracy.rows)} model parts introduce error beyond tolerance"
                 + (f"; {gaps} not fully compared (listed in the report), so this is a lower bound." if gaps else ".")
                 if m.accuracy.rows else "")
        extra += "".join(f" {p}" for p in m.accuracy.op_paths[:1])
        points.append(Point("Accuracy", f"{m.accuracy.verdict[:1].upper()}{m.accuracy.verdict[1:]}.{extra}"))
    fixes = m.time_fixes
    if fixes:
        chosen = m.counted_fixes()
        listed = "; ".join(f"#{f.rank} {f.title} ({fix_gain(f)}, {fmt_days(*f.effort_days)})" for f in chosen)
        others = len(fixes) - len(chosen)
        rest = (f" {others} more apply as alternatives or headroom, not summed (listed in the fix plan)."
                if others else "")
        ranked = f"{len(fixes)} ranked time fix{'es' if len(fixes) != 1 else ''}"
        points.append(Point("What remains", (f"{ranked}; the plan sums {plan_ranks(m)}: {listed}."
                                             if chosen else f"{ranked}, none closing a measured gap.")
                            + rest))
        points.append(Point("What it costs", provisional_prefix(m) + (
            f"About {fmt_days(*m.effort_days)} of engineering for the plan ({plan_ranks(m)}): the sum of its fixes' "
            "effort ranges, from the fix catalogue's tiers." if chosen else "Nothing planned: no fix closes a measured gap.")))
    else:
        points.append(Point("What remains", "No fixes were ranked for this pair."))
    points.append(Point("What it recovers", recovers_text(m)))
    if m.coverage is not None:
        points.append(
            Point(
                "How sure",
                f"{fmt_pct(m.coverage, 0)} of the target's time was matched to the same work on the source"
                + (f" ({fmt_pct(m.source_coverage, 0)} of the source's)" if m.source_coverage is not None else "")
                + "; the rest is listed under portability notes and is not attributed to any fix."
                + outside_text(m)
                + split_text(m),
            )
        )
    return points


def outside_text(m: ReportModel) -> str:
    """The runtime's work outside every module with no counterpart (guard checks, graph wrapper,
    transfers): part of the unmatched rest beside the coverage figure, said with its share by kind."""
    parts = []
    for side, v in m.outside_share.items():
        if v <= 0:
            continue
        kinds = ", ".join(f"{k} {fmt_pct(s, 1)}" for k, s in sorted((m.outside_kinds.get(side) or {}).items(),
                                                                     key=lambda kv: -kv[1]))
        parts.append(f"{fmt_pct(v, 1)} of the {side}'s" + (f" ({kinds})" if kinds else ""))
    rt = m.runtime_step_us
    # The root's row leaves the rankings only when it holds the runtime alone; otherwise it stays
    # ranked with the model's own ops there, and the runtime's kinds inside it are ranked too.
    ranked = ("no module ranking counts it" if any(r.runtime for r in m.by_module)
              else "the root's row, ranked with the model's own ops there, holds its kinds outside the modules")
    like = (f" Compared like for like, each side's runtime per step (the kinds outside every module and the "
            f"time between ops, an eager model's Python and dispatch) is {fmt_us(rt['source'])} on the source "
            f"and {fmt_us(rt['target'])} on the target; {ranked}."
            if {"source", "target"} <= set(rt) else "")
    if not parts:
        return like
    return (f" Of that rest, the stack's runtime outside every module, with no counterpart on the other side, "
            f"is attributed to no fix of a module: {' and '.join(parts)} time." + like)


def split_text(m: ReportModel) -> str:
    """How much time fused kernels holding several modules' work placed on those modules, and on
    what basis: the other side's measured times for the same op calls, or an estimate by op cost
    where nothing paired (porter.analysis.fused_shares, split_fused)."""
    measured = [f"{fmt_pct(v, 1)} of the {side}'s" for side, v in m.measured_split_share.items() if v > 0]
    estimated = [f"{fmt_pct(v, 1)} of the {side}'s" for side, v in m.split_share.items() if v > 0]
    if not measured and not estimated:
        return ""
    text = " Fused kernels that hold several modules' work were split among them"
    if measured:
        text += f" by the other side's measured time for the same op calls ({' and '.join(measured)} time)"
    if estimated:
        text += (" and" if measured else "") + f" by estimated op cost where nothing paired ({' and '.join(estimated)} time)"
    return text + "."


def plain_fix(f: Fix) -> str:
    """A fix for the leadership summary: the catalogue's title and the kind of work it is on,
    no op or module named."""
    classes = [class_words(c.strip()) for c in f.category.split(",") if c.strip()]
    return (f.plain_title or f.title) + (f" (on {' and '.join(classes)})" if classes else "")


def plan_ranks(m: ReportModel) -> str:
    """The ranks the plan sums, as the fix tables number them ('fixes #1, #2 and #4')."""
    ranks = [f"#{r}" for r in (m.plan.ranks if m.plan else ())]
    if not ranks:
        return "no fixes"
    return ("fix " if len(ranks) == 1 else "fixes ") + (ranks[0] if len(ranks) == 1 else ", ".join(ranks[:-1]) + " and " + ranks[-1])


def provisional_prefix(m: ReportModel) -> str:
    """Said before any plan figure while the headline is too uncertain to plan on."""
    why = (m.plan.provisional if m.plan else None) or m.ratio_advice
    return "Provisional (the headline is too uncertain to plan on, see above): " if why else ""


def fix_gain(f: Fix) -> str:
    """What one time fix recovers, split as a reviewer checks it against the groups."""
    if f.closes_us is None and f.recoverable_us is None:
        return "time unknown (no cost model for these ops)"
    text = f"closes {fmt_us(f.closes_us or 0.0)} of the measured gap"
    if (f.beyond_us or 0.0) > 0:
        text += f", {fmt_us(f.beyond_us)} more beyond parity"
    return text


def recovers_text(m: ReportModel) -> str:
    """What the plan buys, as time and as the ratio that results; headroom said apart."""
    if not m.time_fixes:
        return "Nothing yet: no time fix has been ranked."
    if not m.counted_fixes():
        return "Nothing toward parity: the ranked fixes are headroom only, beyond the source's time."
    beyond = (f" A further {fmt_us(m.beyond_parity_us)} lies beyond parity (headroom to the target's own ceiling), "
              "not counted." if m.beyond_parity_us > 0 else "")
    return (provisional_prefix(m)
            + f"About {fmt_us(m.recoverable_us)} per run if the plan's fixes ({plan_ranks(m)}) land, closing measured "
            f"gaps to the source, bringing the target to about {fmt_ratio(m.projected_ratio)} the source's time "
            f"(parity is 1.00x).{beyond}")


def fix_total_note(m: ReportModel) -> str:
    """How the fix plan's totals are counted, so that a reviewer can redo them."""
    return ("Each fix closes at most its groups' measured gap to the source (Closes); what it would win past the "
            "source's time is headroom to the target's own ceiling (Beyond parity), never counted in a total. "
            f"The plan sums {plan_ranks(m)}: fixes that share groups with a better-ranked plan fix are alternatives "
            "(marked), and headroom-only fixes close no gap; the totals are those fixes' sums.")


def parity_text(m: ReportModel) -> str:
    """What it takes to reach parity, in one or two sentences."""
    excess = m.target.total_us - m.source.total_us
    rec = m.recoverable_us
    if excess <= 0:
        more = (f"; the plan ({plan_ranks(m)}) would close a further {fmt_us(rec)} of the gaps where it is slower"
                if m.counted_fixes() else "")
        return provisional_prefix(m) + f"The target is already at or ahead of parity in total device time{more}."
    share = (f"{fmt_pct(rec / excess, 0)} of that" if rec <= excess else
             "more than that: the target's wins elsewhere offset part of its losses")
    text = (
        f"Parity needs {fmt_us(excess)} less target time per run. The plan ({plan_ranks(m)}) closes about {fmt_us(rec)} "
        f"of measured gaps ({share}), bringing the target to about {fmt_ratio(m.projected_ratio)} the source's time."
    )
    if rec < excess * 0.98:
        text += f" The remaining {fmt_us(excess - rec)} has no fix identified yet."
    return provisional_prefix(m) + text


def _largest(rows: list[TimeRow], n: int) -> list[TimeRow]:
    return sorted(rows, key=lambda r: max(r.source_us, r.target_us), reverse=True)[:n]


def waterfall_steps(m: ReportModel) -> list[tuple[str, float]]:
    """Per-class gaps (largest first) plus the remainder, summing to target - source time."""
    rows = sorted(m.by_class, key=lambda r: abs(r.gap_us), reverse=True)
    shown = WATERFALL_STEPS if len(rows) > WATERFALL_STEPS + 1 else len(rows)  # never "1 other classes"
    steps = [(r.key, r.gap_us) for r in rows[:shown]]
    rest = sum(r.gap_us for r in rows[shown:])
    if rows[shown:]:
        steps.append((f"{len(rows) - shown} other classes", rest))
    residual = (m.target.total_us - m.source.total_us) - sum(d for _, d in steps)
    if abs(residual) > 1e-6 * max(m.target.total_us, 1.0):
        steps.append(("not in any class (unmatched)", residual))
    return steps


def where_rows(m: ReportModel) -> tuple[str, list[TimeRow]]:
    """The module table a reader compares first: kinds (instances summed) when that folds rows."""
    if m.by_module_kind and len(m.by_module_kind) < len(m.by_module):
        return "module kind", m.by_module_kind
    return "module", m.by_module


def _ranked(rows: list[TimeRow]) -> bool:
    """--confirm ran: every row carries the times the rankings read, per step and alone where it
    sized the gap (porter.pipeline.confirmation.ranked_gaps)."""
    return bool(rows) and all(r.ranked_source_us is not None and r.ranked_target_us is not None for r in rows)


def where_label(m: ReportModel) -> str:
    """What the largest losses and wins are ranked by, in words (losses_and_wins)."""
    what, rows = where_rows(m)
    return what + (", per step, alone where confirmed" if _ranked(rows) else "")


def losses_and_wins(m: ReportModel, n: int = 3) -> tuple[list[TimeRow], list[TimeRow]]:
    """The n largest losses (target slower) and n largest wins (target faster) by module (kind),
    of the rows beyond noise (a live pair's: porter.analysis.gap_noise, --confirm)."""
    _, rows = where_rows(m)
    rows = [r for r in rows if not r.within_noise and not r.runtime]  # the runtime's row is no module
    if _ranked(rows):
        rows = [replace(r, source_us=r.ranked_source_us, target_us=r.ranked_target_us) for r in rows]
    losses = sorted((r for r in rows if r.gap_us > 0), key=lambda r: r.gap_us, reverse=True)[:n]
    wins = sorted((r for r in rows if r.gap_us < 0), key=lambda r: r.gap_us)[:n]
    return losses, wins


PLAIN_NAME_CHARS = 36  # a module kind this short is shown whole on the leadership page


def plain_name(key: str, parts: int = 2) -> str:
    """A module path's last `parts` named scopes, what a reader recognises, written as every other
    view writes the kind ('blocks/*/attn' stays as it is; a longer path reads '.../Qwen2MLP/Linear')."""
    if len(key) <= PLAIN_NAME_CHARS and key.strip("/*"):
        return key.strip("/") or NO_MODULE
    scopes = [p for p in key.split("/") if p]
    named = [i for i, p in enumerate(scopes) if p != "*"]
    if not named:
        return NO_MODULE
    start = named[-parts] if len(named) >= parts else named[0]
    return ("\u2026/" if start > 0 else "") + "/".join(scopes[start:])


def not_measured(m: ReportModel) -> list[str]:
    """What this diagnosis did not measure, in words, for the leadership page."""
    out = []
    if m.accuracy is None:
        out.append("Accuracy: " + ("recorded traces hold no model outputs." if m.mode == "trace"
                                   else "the model's outputs were not compared."))
    if m.ratio.lo is None:
        out.append("The spread of the end-to-end ratio: each side has one profiled step, so no interval.")
    if m.wall_ratio is None:
        out.append("Wall-clock time: only device time from the profilers was compared.")
    if m.coverage is not None and m.coverage < 0.995:
        out.append(f"{fmt_pct(1 - m.coverage)} of the target's time found no partner on the source "
                   "and is attributed to no fix.")
    if m.time_fixes:
        out.append("What the fixes recover is an estimate from the roofline and the source's time, not a measurement.")
    return out


def build_charts(m: ReportModel) -> dict[str, str]:
    src, tgt = f"source: {m.source.device_name}", f"target: {m.target.device_name}"
    out = {}
    cls = _largest(m.by_class, 20)
    out["by_class"] = charts.grouped_hbar(
        [r.key for r in cls], [(src, [r.source_us for r in cls]), (tgt, [r.target_us for r in cls])],
        title="Device time by op class, source vs target", fmt=fmt_us,
    )
    folded = bool(m.by_module_kind) and len(m.by_module_kind) < len(m.by_module)
    mods = _largest(m.by_module_kind if folded else m.by_module, TOP_MODULES)
    what = "module kind, instances summed" if folded else "module"
    out["by_module"] = charts.grouped_hbar(
        [r.key or NO_MODULE for r in mods], [(src, [r.source_us for r in mods]), (tgt, [r.target_us for r in mods])],
        title=f"Device time by {what} (largest {len(mods)}), source vs target", fmt=fmt_us,
    )
    out["waterfall"] = charts.waterfall(
        ("source total", m.source.total_us),
        waterfall_steps(m),
        ("target total", m.target.total_us),
        title="From source time to target time: gap per op class", fmt=fmt_us,
    )
    if m.accuracy is not None and m.accuracy.rows:
        tols = [r.tolerance for r in m.accuracy.rows if r.tolerance is not None]
        out["accuracy"] = charts.line_chart(
            [r.module for r in m.accuracy.rows],
            [("local error", [r.local for r in m.accuracy.rows]), ("propagated error", [r.propagated for r in m.accuracy.rows])],
            title=f"Per-module error ({m.accuracy.metric}) along the model depth",
            y_label=m.accuracy.metric,
            threshold=("tolerance", max(tols)) if tols else None,
        )
    return out
