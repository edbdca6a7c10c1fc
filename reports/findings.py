"""diagnosis.json's accuracy and fix plan -> the ReportModel's Accuracy and Fix rows (the
part of the adapter in reports.build that reads porter.accuracy's and porter.analysis.fixrank's
blocks; the field names live here and nowhere else)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from porter.core.units import fmt_sci
from reports.fields import _f, _get
from reports.model import Accuracy, AccuracyRow, ConfirmedRow, Fix, Plan, TriedRow


def _accuracy_rows(rows: Iterable[dict]) -> list[AccuracyRow]:
    """compare_modules records (propagated_rel_l2, local_rel_l2, tolerance, introduces_error)."""
    out = []
    for r in rows or []:
        out.append(AccuracyRow(
            module=str(r.get("module") or "(model output)"),
            local=_f(_get(r, "local_rel_l2", "local")),
            propagated=_f(_get(r, "propagated_rel_l2", "propagated")),
            tolerance=_f(r.get("tolerance")),
            introduces=bool(_get(r, "introduces_error", "introduces", default=False)),
        ))
    return out


def _accuracy(d: Any) -> Accuracy | None:
    """The accuracy block: per-module rows, plus the fp64 oracle verdict when one ran."""
    if not d:
        return None
    rows = _accuracy_rows(d if isinstance(d, list) else _get(d, "modules", "per_module", default=[]))
    info = d if isinstance(d, dict) else {}
    oracle = info.get("oracle") or {}
    tols = [r.tolerance for r in rows if r.tolerance is not None]
    dtype = str(info.get("dtype") or "")
    if oracle:
        passed = bool(oracle.get("passed"))
        verdict = (f"{'within' if passed else 'outside'} the fp64-oracle bound: target error {_f(oracle.get('target_error')) or 0:.2e} "
                   f"vs bound {_f(oracle.get('bound')) or 0:.2e} ({_f(oracle.get('multiplier')) or 0:g} x the source's error + tolerance/10)")
    elif rows and rows[0].propagated is not None and tols:
        out_row = next((r for r in rows if r.module in ("", "(model output)")), rows[-1])
        passed = bool(out_row.propagated is not None and out_row.tolerance is not None and out_row.propagated <= out_row.tolerance)
        verdict = f"{'within' if passed else 'outside'} tolerance at the model output (relative L2 {fmt_sci(out_row.propagated)})"
    else:
        passed, verdict = None, str(info.get("verdict") or "not judged")
    note = str(_get(info, "tolerance_reason", "tolerance_note", default="") or "")
    if tols and not note:
        note = f"Tolerance: relative L2 {max(tols):.0e}" + (f" for {dtype}" if dtype else "") + "."
    return Accuracy(metric="relative L2", verdict=verdict, passed=passed, tolerance_note=note, rows=rows,
                    op_paths=_op_paths(info.get("ops") or {}), not_compared=_gaps(info),
                    precision=_precision(info.get("precision") or {}))


def _precision(p: dict) -> list[str]:
    """A precision port's sentences: the dtypes and tolerance, the rule, the modules beyond the dtype."""
    if not p:
        return []
    d = p.get("dtype", "")
    out = [f"Precision port: the source ran {p.get('source_dtype')}, the target {p.get('target_dtype')} "
           f"({p.get('how', '')}); tolerance relative L2 {_f(p.get('tolerance')) or 0:.0e} ({p.get('tolerance_reason', '')}).",
           str(p.get("rule", ""))]
    beyond = list(p.get("beyond_dtype") or [])
    if beyond:
        out.append(f"Losing more than {d} implies: {', '.join(m or '(model)' for m in beyond)}.")
    elif p.get("judged"):
        gaps = len(p.get("no_verdict") or {})
        out.append(f"No module loses more than {d} implies ({p.get('judged_modules', 0)} judged against float64"
                   + (f"; {gaps} without a verdict" if gaps else "") + ").")
    return out


def _op_paths(ops: dict) -> list[str]:
    """model > module > op, for each module whose ops were replayed one by one."""
    out = []
    for module, o in ops.items():
        if o.get("op"):
            ins = ", ".join(f"{i.get('dtype', '')}{i.get('shape', '')}" for i in (o.get("inputs") or [])[:3])
            out.append(f"model → {module} → #{o.get('index')} {o['op']}({ins}): error {fmt_sci(_f(o.get('chained_rel_l2')))} "
                       f"carried to it, {fmt_sci(_f(o.get('local_rel_l2')))} alone. {o.get('verdict', '')}"
                       + (f" ({o['dtype_words']})" if o.get("dtype_words") else ""))
        else:
            out.append(f"model → {module}: op not located ({o.get('why', '')})")
    return out


def _gaps(info: dict) -> list[tuple[str, str]]:
    """Modules with no comparison, then modules without a local error, each with why."""
    local = info.get("local") or {}
    return ([(m, str(w)) for m, w in (info.get("not_compared") or {}).items()]
            + [(m, f"no local error: {w}") for m, w in (local.get("not_run") or {}).items()])


def fix_where(r: dict) -> str:
    """Where a fix applies: its heaviest op and module, and how many more there are."""
    ops, mods = list(r.get("ops") or []), list(r.get("modules") or [])
    if not ops and not mods:
        return str(r.get("where") or "")
    text = " in ".join(x for x in (ops[0] if ops else "", mods[0] if mods else "") if x)
    more = max(len(ops), len(mods)) - 1
    return text + (f" (+{more} more)" if more > 0 else "")


def _fixes(rows: Iterable[dict]) -> list[Fix]:
    """porter.analysis.fixes.fixes_frame records, in rank order (time fixes first, then accuracy)."""
    out = []
    for r in rows or []:
        days = _get(r, "days", "effort_days", default=[0, 0])
        lo, hi = (days, days) if isinstance(days, (int, float)) else (days[0], days[-1])
        kind = str(r.get("kind") or "perf")
        confidence = str(r.get("confidence") or "")
        if r.get("evidence"):
            confidence += f" ({'; '.join(map(str, r['evidence']))})"
        out.append(Fix(
            title=str(_get(r, "title", "fix_id", "id", default="")),
            where=fix_where(r),
            why=str(r.get("why") or ""),
            first_step=str(r.get("first_step") or ""),
            effort_days=(float(lo), float(hi)),
            recoverable_us=_f(r.get("recoverable_us")) if kind != "accuracy" else None,
            confidence=confidence,
            kind="accuracy" if kind == "accuracy" else "time",
            category=", ".join(map(str, r.get("op_classes") or [])),
            group_ids=tuple(str(g) for g in r.get("group_ids") or ()),
            rank=int(r.get("rank") or 0),
            closes_us=_f(r.get("closes_gap_us")) if kind != "accuracy" else None,
            beyond_us=_f(r.get("beyond_parity_us")) if kind != "accuracy" else None,
            headroom=r.get("opportunity") == "headroom",
            in_plan=bool(r.get("in_plan")),
            alternative_to=tuple(int(x) for x in r.get("alternative_to") or ()),
            plain_title=str(r.get("catalogue_title") or _get(r, "title", "fix_id", "id", default="")),
        ))
    return out


def plan_of(block: dict | None) -> Plan | None:
    """diagnosis.json `plan` (porter.analysis.plan); None when the file has none."""
    if not isinstance(block, dict):
        return None
    days = block.get("days") or [0.0, 0.0]
    return Plan(ranks=tuple(int(r) for r in block.get("fixes") or ()), total_us=_f(block.get("total_us")) or 0.0,
                beyond_us=_f(block.get("beyond_parity_us")) or 0.0, days=(float(days[0]), float(days[-1])),
                provisional=str(block["provisional"]) if block.get("provisional") else None)


VERDICT_WORDS = {"confirmed alone": "confirmed", "not reproduced alone": "within noise alone",
                 "not sized alone": "not sized alone (its interval is wider than the gap)"}


def confirmed_verdict(r: dict) -> str:
    """A few words on a suspect re-timed alone: did the alone timing bear the profiled gap out?
    The row's evidence (porter.pipeline.confirmation) says it; a diagnosis.json written before
    rows carried one is judged by sign and interval alone."""
    if r.get("error"):
        return f"not replayed: {r['error']}"
    if r.get("evidence"):
        return VERDICT_WORDS.get(str(r["evidence"]), str(r["evidence"]))
    if not r.get("significant"):
        return "within noise alone"
    same = (_f(r.get("profiled_gap_us")) or 0.0) * (_f(r.get("gap_us")) or 0.0) > 0
    return "confirmed" if same else "opposite sign alone"


def confirmed_name(r: dict) -> str:
    """A re-timed module's name; one timed whole says so (its gap is its modules' and its own)."""
    name = str(r.get("module") or "")
    return f"{name} (whole, with the {r['inside']} modules inside)" if r.get("inside") else name


def confirmed_rows(block: dict | None) -> list[ConfirmedRow]:
    """diagnosis.json `confirmed.modules`, in the diagnosis's order (largest profiled gap first)."""
    return [ConfirmedRow(module=confirmed_name(r), profiled_gap_us=_f(r.get("profiled_gap_us")),
                         profiled_low_us=_f(r.get("profiled_low_us")), profiled_high_us=_f(r.get("profiled_high_us")),
                         alone_gap_us=_f(r.get("gap_us")), alone_low_us=_f(r.get("gap_low_us")),
                         alone_high_us=_f(r.get("gap_high_us")), verdict=confirmed_verdict(r))
            for r in (block or {}).get("modules") or []]


def tried_rows(block: dict | None) -> list[TriedRow]:
    """diagnosis.json `tried.candidates` (diagnose --tune), in the order they were tried."""
    rows = []
    for r in (block or {}).get("candidates") or []:
        rec = r.get("recovered_us") or {}
        lo, hi = (list(rec.get("ci95") or []) + [None, None])[:2]
        rows.append(TriedRow(recipe=str(r.get("recipe") or ""), fix_id=str(r.get("fix_id") or ""),
                             estimated_us=_f(r.get("estimated_us")), recovered_us=_f(rec.get("value")),
                             low_us=_f(lo), high_us=_f(hi), rel_l2=_f(r.get("rel_l2")), kept=bool(r.get("kept")),
                             why=str(r.get("why") or r.get("status") or "")))
    return rows


def tried_best(block: dict | None) -> str:
    """The best combination the tune kept, as one line ("" when none)."""
    best = (block or {}).get("best") or {}
    m = best.get("measured") or {}
    if not best.get("recipes") or _f(m.get("ratio")) is None:
        return ""
    lo, hi = (list(m.get("ci95") or []) + [None, None])[:2]
    span = f" [{_f(lo):.3f}, {_f(hi):.3f}]" if _f(lo) is not None and _f(hi) is not None else ""
    return f"{' + '.join(map(str, best['recipes']))}: x{_f(m['ratio']):.3f}{span} of the source, measured"
