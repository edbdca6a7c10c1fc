"""diagnosis.json -> ReportModel -> report.html, report.md, summary.md, report.json.

load_report_model() (through model_from_diagnosis) is the ONLY code that knows
diagnosis.json's field names (docs/diagnosis.md); everything after it reads the
reports.model dataclasses, so a renamed field is fixed here and nowhere else.
Rendering lives in reports.render; each output file is replaced atomically.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from porter.core.atomic import atomic_write_text
from porter.core.errors import PorterError
from reports.model import Note, OpCallRow, OpShapeRow, PortabilityRow, ReportModel, Side, Estimate, TimeRow
from reports.render import FORMATS, OUTPUTS, check_formats, render_all
from porter.core.units import fmt_days, fmt_pct, fmt_ratio, fmt_us, short_dtypes, short_shapes

DIAGNOSIS = "diagnosis.json"
__all__ = ["DIAGNOSIS", "FORMATS", "load_report_model", "model_from_diagnosis", "remove_reports", "write_reports"]


from reports.fields import NO_MODULE, _f, _get, root_name, within_noise
from reports.findings import _accuracy, _fixes, confirmed_rows, plan_of, tried_best, tried_rows


# ---------------------------------------------------------------- the two runs

def _stack(inp: dict) -> str:
    """The execution stack of one side: a live capture records it; a recorded trace has none."""
    tgt = inp.get("target")
    if isinstance(tgt, dict):
        return str(_get(tgt, "text", "stack", "name", default="") or "live capture")
    if isinstance(tgt, str) and tgt:
        return tgt
    return f"recorded {inp.get('profiler') or 'profiler'} trace"


BASIS = {
    "device_us": "self device time of each op (the kernels attributed to it)",
    "host_self_us": "self host time of each op (the trace has no device activity)",
}


def _timing(inp: dict, e2e: dict, role: str) -> str:
    """How one side's time was measured, in words."""
    basis = str(inp.get("time_basis") or "")
    text = f"{BASIS.get(basis, basis or 'device time')}, from the {inp.get('profiler') or 'profiler'} trace"
    per = e2e.get(f"{role}_per_step_us") or {}
    n = per.get("n")
    if n:
        text += f"; {n} profiled step{'s' if n != 1 else ''}, median {fmt_us(_f(per.get('median')))} per step"
        if n > 1 and _f(per.get("rel_spread")) is not None:
            text += f", IQR {fmt_pct(_f(per.get('rel_spread')), 0)} of the median"
    wall = e2e.get(f"{role}_wall_s") or {}
    if wall.get("n"):
        text += f"; wall clock over {wall['n']} timed steps, median {fmt_us((_f(wall.get('median')) or 0) * 1e6)}"
    return text


def _side(inp: dict, e2e: dict, role: str) -> Side:
    dev = inp.get("device") or {}
    return Side(
        label=str(inp.get("label") or role),
        device_name=str(dev.get("name") or dev.get("type") or "unknown device"),
        device_type=str(dev.get("type") or ""),
        stack=_stack(inp),
        profiler=str(inp.get("profiler") or ""),
        versions={str(k): str(v) for k, v in (inp.get("framework_versions") or {}).items()},
        timing=_timing(inp, e2e, role),
        total_us=_f(e2e.get(f"{role}_total_us")) or _f(inp.get("total_us")) or 0.0,
        steps=int(inp.get("steps") or 0),
    )


def _model_name(src: dict, tgt: dict) -> str:
    """The model's name from a live capture, else what two trace labels share ('h100_Qwen..' / 'mi300x_Qwen..')."""
    model = src.get("model")
    if isinstance(model, dict) and model.get("name"):
        return str(model["name"])
    if isinstance(model, str) and model:
        return model
    a, b = str(src.get("label") or ""), str(tgt.get("label") or "")
    common = os.path.commonprefix([a[::-1], b[::-1]])[::-1].lstrip("_-. ")
    return common if len(common) >= 3 else f"{a} vs {b}"


def _headline_spread(headline: dict | None, e2e: dict) -> Estimate:
    """The headline ratio (diagnosis.json `headline`: on a live pair, unprofiled forwards timed
    alternately) with its 95% interval; without an interval, the per-step spread below."""
    h = headline or {}
    value, (lo, hi) = _f(h.get("ratio")), [_f(x) for x in (h.get("ci95") or (None, None))]
    if value is None:
        return _ratio_spread(e2e)
    if lo is None or hi is None:
        return dataclasses.replace(_ratio_spread(e2e), value=value)
    return Estimate(value=value, lo=lo, hi=hi, samples=h.get("n"), kind="95% interval")


def _ratio_spread(e2e: dict) -> Estimate:
    """Per-step ratio target/source, with bounds from each side's interquartile step times."""
    value = _f(e2e.get("ratio"))
    value = float("nan") if value is None else value
    per = "per_step_busy_us" if e2e.get("ratio_time") == "busy" else "per_step_us"  # the ratio's own basis
    s = [float(x) for x in _get(e2e, f"source_{per}.samples", default=[])]
    t = [float(x) for x in _get(e2e, f"target_{per}.samples", default=[])]
    if len(s) < 2 or len(t) < 2 or min(s) <= 0:
        return Estimate(value=value, samples=min(len(s), len(t)) or None, kind="one step per side" if s and t else "")
    s1, s3 = np.percentile(s, [25, 75])
    t1, t3 = np.percentile(t, [25, 75])
    return Estimate(value=value, lo=float(t1 / s3), hi=float(t3 / s1), samples=min(len(s), len(t)), kind="interquartile steps")


# ---------------------------------------------------------------- time tables

def _time_rows(rows: Iterable[dict], empty: str = NO_MODULE) -> list[TimeRow]:
    """Roll-up rows; a blank key (ops outside any module) gets a name, gross split when present."""
    return [TimeRow(key=str(r.get("key") or empty), source_us=_f(r.get("source_us")) or 0.0,
                    target_us=_f(r.get("target_us")) or 0.0,
                    gross_loss_us=_f(r.get("gross_loss_us")), gross_win_us=_f(r.get("gross_win_us")),
                    within_noise=within_noise(r), runtime=bool(r.get("runtime")),
                    ranked_source_us=_f(r.get("ranked_source_us")), ranked_target_us=_f(r.get("ranked_target_us")))
            for r in rows or []]


def _op_shape_rows(rows: Iterable[dict]) -> list[OpShapeRow]:
    """diagnosis.json by_op_shape (optional: older diagnoses have none), largest |gap| first."""
    out = [OpShapeRow(
        op=str(r.get("framework_op") or "(unnamed)"),
        shapes=short_shapes(str(r.get("input_shapes") or "")),
        dtypes=short_dtypes(str(r.get("dtypes") or "")),
        op_class=str(r.get("op_class") or ""),
        source_count=int(r.get("source_count") or 0), target_count=int(r.get("target_count") or 0),
        source_us=_f(r.get("source_us")) or 0.0, target_us=_f(r.get("target_us")) or 0.0,
        efficiency=_f(r.get("target_efficiency")),
        module_kinds=tuple(str(k) for k in r.get("module_kinds") or ()),
        observed=bool(r.get("target_observed_bound")),
        target_ops=tuple(str(k) for k in r.get("target_ops") or ()),
    ) for r in rows or []]
    return sorted(out, key=lambda r: abs(r.gap_us), reverse=True)


def _op_call_rows(rows: Iterable[dict]) -> list[OpCallRow]:
    """diagnosis.json alignment.op_calls (live pairs only), largest |gap| first."""
    out = [OpCallRow(module=str(r.get("module") or NO_MODULE), op=str(r.get("op") or ""), call=int(r.get("call") or 0),
                     evidence=str(r.get("evidence") or ""), source_us=_f(r.get("source_us")) or 0.0,
                     target_us=_f(r.get("target_us")) or 0.0, estimated_us=_f(r.get("estimated_us")) or 0.0)
           for r in rows or []]
    return sorted(out, key=lambda r: abs(r.gap_us), reverse=True)


def _roofline_by_group(roofline: Any) -> dict[Any, tuple[float, bool]]:
    """group_id -> the target's roofline time for that group, when diagnose computed one, and
    whether it is the observed time (the target beat its ceiling there)."""
    rows = roofline.get("groups") if isinstance(roofline, dict) else roofline
    out: dict[Any, tuple[float, bool]] = {}
    for r in rows or []:
        us = _f(_get(r, "roofline_us", "target_roofline_us")) if isinstance(r, dict) else None
        if us is not None:
            out[r.get("group_id")] = (us, r.get("roofline_basis") == "observed")
    return out


def _group_rows(rows: Iterable[dict], roofline: dict[Any, tuple[float, bool]]) -> list[TimeRow]:
    """Matched groups, named by the source op (and the target's when it differs)."""
    out = []
    for r in rows or []:
        op, top = str(r.get("framework_op") or ""), str(r.get("target_framework_op") or "")
        key = op if not top or top == op else f"{op} \u2192 {top}"
        if r.get("portability"):  # diagnose --ops: the target op fell back, failed or is off numerically
            flagged = str(r.get("portability_op") or "")
            key += f" [{flagged + ': ' if flagged and flagged not in (op, top) else ''}{r['portability']} on target]"
        out.append(TimeRow(
            key=key or "(unnamed)",
            source_us=_f(r.get("source_us")) or 0.0,
            target_us=_f(r.get("target_us")) or 0.0,
            roofline_us=roofline[r.get("group_id")][0] if r.get("group_id") in roofline else None,
            roofline_observed=roofline.get(r.get("group_id"), (None, False))[1],
            op_class=str(r.get("op_class") or ""),
            module=str(r.get("module") or ""),
        ))
    return out


def _notes(unmatched: dict) -> list[Note]:
    out = []
    for side in ("source", "target"):
        for r in unmatched.get(side) or []:
            us = _f(r.get("time_us"))
            share = _f(r.get("share"))
            out.append(Note(
                kind=f"unmatched on {side}",
                name=str(r.get("framework_op") or ""),
                where=str(r.get("module") or ""),
                source_us=us if side == "source" else None,
                target_us=us if side == "target" else None,
                detail=f"{r.get('count', '?')} calls, {r.get('op_class') or 'other'}, {fmt_pct(share)} of the {side}'s time",
            ))
    return out


def _portability(block: dict | None) -> list[PortabilityRow]:
    """diagnosis.json `portability` (diagnose --ops) -> rows for the Portability section."""
    out = []
    for r in (block or {}).get("flagged") or []:
        days = r.get("days") or []
        fix = f"{r.get('fix_title')} [{r.get('tier')}, {fmt_days(*days)}]" if r.get("fix_title") and len(days) == 2 else ""
        out.append(PortabilityRow(
            op=str(r.get("op") or ""), status=str(r.get("status") or ""), label=str(r.get("label") or r.get("status") or ""),
            where=", ".join(m or "(root)" for m in r.get("modules") or []), calls=int(r.get("calls") or 0),
            evidence=str(r.get("evidence") or ""), predicted=str(r.get("predicted") or ""), fix=fix,
            time_share=_f(r.get("time_share")),
        ))
    return out


def _portability_summary(block: dict | None) -> str:
    if not block:
        return ""
    counts = ", ".join(f"{n} {k}" for k, n in (block.get("counts") or {}).items() if n)
    agree, judged = (block.get("agreement") or [0, 0])[:2]
    return (f"porter ops ran each of the model's {block.get('ops_checked', 0)} op variations alone on "
            f"{block.get('target')}: {counts}; the stack's registries predicted {agree} of {judged} correctly.")


# ---------------------------------------------------------------- method

def _method(d: dict, e2e: dict) -> list[tuple[str, str]]:
    al = d.get("alignment") or {}
    cov = al.get("coverage") or {}
    rows = [
        ("Coverage", f"{fmt_pct(_f(cov.get('source')))} of source and {fmt_pct(_f(cov.get('target')))} of target time lies in matched groups"),
        ("Whole-trace time", f"source {fmt_us(_f(e2e.get('source_total_us')))}, target {fmt_us(_f(e2e.get('target_total_us')))} "
                             f"(ratio {fmt_ratio(_f(e2e.get('total_ratio')))}); outside profiled steps: "
                             f"{fmt_us(_f(e2e.get('source_outside_steps_us')))} and {fmt_us(_f(e2e.get('target_outside_steps_us')))}"),
    ]
    if e2e.get("ratio_time") == "busy":
        rows.append(("End-to-end basis", f"device busy time (streams overlap); summed kernel time gives "
                                         f"{fmt_ratio(_f(e2e.get('kernel_sum_ratio')))}"))
    if _f(e2e.get("wall_ratio")) is not None:
        rows.append(("Wall-clock ratio", f"{fmt_ratio(_f(e2e.get('wall_ratio')))} (target / source, median step wall time)"))
    if al.get("unit"):
        rows.append(("Alignment", str(al["unit"])))
    by_ev = al.get("time_by_evidence") or {}
    if by_ev:
        rows.append(("Matched by", "; ".join(f"{k}: {fmt_us(_f(v.get('target_us')))} of target time" for k, v in by_ev.items())))
    for role in ("source", "target"):
        inp = _get(d, f"inputs.{role}", default={})
        tr = inp.get("source_trace") or {}
        if tr:
            rows.append((f"{role.capitalize()} trace", f"{tr.get('name') or tr.get('path')} (sha256 {str(tr.get('sha256', ''))[:16]}…)"))
    roof = d.get("roofline")
    if isinstance(roof, dict) and isinstance(roof.get("ceilings"), dict):
        for role in ("source", "target"):
            c = roof["ceilings"].get(role)
            if isinstance(c, dict):
                rows.append((f"Roofline ceilings ({role})", str(c.get("reason") or json.dumps(c, sort_keys=True))))
        if roof.get("formula"):
            rows.append(("Roofline and recoverable time", str(roof["formula"])))
    acc = d.get("accuracy")
    if isinstance(acc, dict):
        for key, label in (("rule", "Accuracy rule"), ("propagated", "Propagated error"),
                           ("source_activations", "Source tensors"), ("target_activations", "Target tensors")):
            if acc.get(key):
                rows.append((label, str(acc[key])))
        local = acc.get("local") or {}
        if local.get("skipped"):
            rows.append(("Local error", f"not measured: {local['skipped']}"))
    secs = d.get("seconds") or {}
    if secs.get("total") is not None:
        rows.append(("Analysis time", f"{secs['total']:.2f} s (read {secs.get('read', 0):.2f} s, align {secs.get('align', 0):.2f} s)"))
    return rows


def _command(d: dict, src: dict, tgt: dict) -> str:
    """The command that reproduces this diagnosis (diagnose records it, else it is rebuilt from the inputs)."""
    if d.get("command"):
        return str(d["command"])
    def arg(inp: dict) -> str:
        return str(_get(inp, "source_trace.path", "input", default="?"))
    model = src.get("model")
    name = (model.get("name") if isinstance(model, dict) else model) or ""
    if name and src.get("target"):
        return f"porter diagnose {name} --from {_stack(src)} --to {_stack(tgt)} -o DIR"
    return f"porter diagnose --from {arg(src)} --to {arg(tgt)} -o DIR"


# ---------------------------------------------------------------- the adapter

def model_from_diagnosis(d: dict) -> ReportModel:
    """Map a parsed diagnosis.json onto the ReportModel: the field names live here only."""
    src, tgt = _get(d, "inputs.source", default={}), _get(d, "inputs.target", default={})
    e2e = d.get("end_to_end") or {}
    cov = _get(d, "alignment.coverage", default={})
    live = bool(src.get("model"))
    root = root_name(d)  # the blank-keyed row of by_module and by_module_kind
    return ReportModel(
        model=_model_name(src, tgt),
        mode="live" if live else "trace",
        source=_side(src, e2e, "source"),
        target=_side(tgt, e2e, "target"),
        ratio=_headline_spread(d.get("headline"), e2e),
        profiled_ratio=_f(e2e.get("ratio")) if _get(d, "headline.sides", default=None) else None,
        ratio_basis=str(_get(d, "headline.basis", default="") or ""),
        ratio_advice=_get(d, "headline.advice", default=None),
        profiler_overhead={r: float(v) for r in ("source", "target")
                           if (v := _f(_get(d, f"headline.sides.{r}.profiler_overhead", default=None))) is not None},
        wall_ratio=_f(e2e.get("wall_ratio")),
        coverage=_f(cov.get("target")),
        by_class=_time_rows(d.get("by_class"), "other"),
        by_module=_time_rows(d.get("by_module"), root),
        by_module_kind=_time_rows(d.get("by_module_kind"), root),
        by_op_shape=_op_shape_rows(d.get("by_op_shape")),
        op_calls=_op_call_rows(_get(d, "alignment.op_calls", default=None)),
        confirmed=confirmed_rows(d.get("confirmed")),
        top_gaps=_group_rows(d.get("groups"), _roofline_by_group(d.get("roofline"))),
        accuracy=_accuracy(d.get("accuracy")),
        fixes=_fixes(d.get("fixes")),
        plan=plan_of(d.get("plan")),
        tried=tried_rows(d.get("tried")),
        tried_best=tried_best(d.get("tried")),
        notes=_notes(d.get("unmatched") or {}),
        portability=_portability(d.get("portability")),
        portability_summary=_portability_summary(d.get("portability")),
        method=_method(d, e2e),
        command=_command(d, src, tgt),
        created_at=str(d.get("created_at") or ""),
        porter_version=str(d.get("porter_version") or ""),
        warnings=[str(w) for w in d.get("warnings") or []],
        source_coverage=_f(cov.get("source")),
        split_share={side: float(v) for side in ("source", "target")
                     if (v := _get(d, f"alignment.stats.{side}_split_by_estimate_share", default=None)) is not None},
        measured_split_share={side: float(v) for side in ("source", "target")
                              if (v := _get(d, f"alignment.stats.{side}_split_by_measurement_share", default=None))
                              is not None},
        outside_share={side: float(v) for side in ("source", "target")
                       if (v := _get(d, f"alignment.stats.{side}_unmatched_outside_modules_share", default=None))},
        outside_kinds={side: _outside_kinds(d, side) for side in ("source", "target")},
        runtime_step_us=_runtime_step(d),
    )


def _runtime_step(d: dict) -> dict[str, float]:
    """{side: its runtime per unprofiled step, between ops included} (headline.runtime, live pairs)."""
    block = _get(d, "headline.runtime", default=None) or {}
    return {side: float(v) for side in ("source", "target")
            if (v := _f((block.get(side) or {}).get("total_us"))) is not None}


def _outside_kinds(d: dict, side: str) -> dict[str, float]:
    """{what it is: share of the side's time} of the time outside every module."""
    kinds = _get(d, f"alignment.stats.{side}_outside_modules_by_kind_us", default=None) or {}
    total = _f(_get(d, f"alignment.stats.{side}_unmatched_outside_modules_us", default=None)) or 0.0
    share = _f(_get(d, f"alignment.stats.{side}_unmatched_outside_modules_share", default=None)) or 0.0
    return {str(k): share * float(v) / total for k, v in kinds.items() if total > 0 and float(v) > 0}


def _load_json(path: Path) -> Any:
    """orjson (5x the stdlib on a 1M-event pair's diagnosis.json); the stdlib for a file
    with NaN tokens, which only diagnosis.json files written before orjson hold."""
    import orjson

    raw = path.read_bytes()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def load_report_model(diagnosis_dir: Path) -> ReportModel:
    """Read DIR/diagnosis.json into a ReportModel; a user-fixable problem raises PorterError."""
    path = Path(diagnosis_dir) / DIAGNOSIS
    if not path.is_file():
        raise PorterError(f"no {DIAGNOSIS} here", path=diagnosis_dir, hint="run `porter diagnose ... -o DIR` first")
    try:
        data = _load_json(path)
    except (OSError, ValueError) as exc:
        raise PorterError(f"unreadable {DIAGNOSIS} ({exc})", path=path) from None
    if not isinstance(data, dict):
        raise PorterError(f"{DIAGNOSIS} is not a JSON object", path=path)
    return model_from_diagnosis(data)


def remove_reports(folder: Path) -> list[Path]:
    """Delete the report files porter writes (every format's) from folder, and say which: a new
    diagnosis into an old folder must not leave the last run's report.json beside its report.html."""
    gone = []
    for name in dict.fromkeys(n for names in OUTPUTS.values() for n in names):
        path = Path(folder) / name
        if path.is_file() and not path.is_symlink():
            path.unlink()
            gone.append(path)
    return gone


def write_reports(diagnosis_dir: Path, formats: Iterable[str] = ("html", "md"), out: Path | None = None,
                  data: dict[str, Any] | None = None) -> list[Path]:
    """Render diagnosis_dir/diagnosis.json and write each file atomically.

    out: a directory (default: diagnosis_dir), or a file path ending in .html/.md/.json
    when exactly one format is asked for (then only that one file is written).
    data: that diagnosis.json as the caller already parsed it (not changed here), else read.
    """
    formats = list(formats)
    check_formats(formats)
    texts = render_all(model_from_diagnosis(data) if data is not None else load_report_model(diagnosis_dir), formats)
    dest = Path(out) if out is not None else Path(diagnosis_dir)
    if dest.suffix in (".html", ".md", ".json"):
        if len(formats) != 1 or f".{formats[0]}" != dest.suffix:
            raise PorterError("a file name for -o needs exactly one --format of the same kind", path=dest, hint="or give a directory")
        return [atomic_write_text(dest, texts[OUTPUTS[formats[0]][0]])]
    return [atomic_write_text(dest / name, text) for name, text in texts.items()]
