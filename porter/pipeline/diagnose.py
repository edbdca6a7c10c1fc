"""`porter diagnose`: two runs in, one diagnosis.json out.

Inputs are read and analysed in memory first; only a complete analysis writes anything:
the two bundles (DIR/source, DIR/target, each replaced atomically) and then
DIR/diagnosis.json (temp file + rename). A failure leaves the previous diagnosis intact.
The JSON holds everything a report needs (docs/diagnosis.md describes it).
"""

from __future__ import annotations

import datetime as _dt
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson
import pandas as pd

from porter import __version__
from porter.analysis.align import Alignment, align, unmatched
from porter.analysis.attribute import EndToEnd, Spread, end_to_end, group_table, rollup, with_module_kind
from porter.core.atomic import atomic_write_bytes, check_output_dir
from porter.bundles.bundle import RAW, Bundle, has_activations, is_bundle, staging, write_manifest, write_tables
from porter.core.errors import BundleError, PorterError
from porter.bundles.ingest import safe_raw_name
from porter.analysis.fixes import Catalogue
from porter.analysis.fixplan import catalogue_from, fix_groups, fused_attention_modules, ranked_fix_records
from porter.analysis.groupcost import group_facts
from porter.analysis.opshape import class_gross, op_shape_table
from porter.analysis.busy import busy_block
from porter.analysis.headline import headline, scaled_to_step
from porter.analysis.paircheck import check_pair
from porter.analysis.compiled import has_regions
from porter.analysis.stacks import stack_of
from porter.analysis.roofline import group_roofline, roofline_block, side_ceilings

DIAGNOSIS = "diagnosis.json"
FORMAT = "porter.diagnosis/1"
SIDES = ("source", "target")
# Live captures inside diagnose: fewer profiled steps and timed repeats than `porter capture`,
# so the default model diagnoses from cpu to xla in under a minute on two cores.
LIVE_OPTIONS = {"steps": 3, "warmup": 1, "repeats": 10}
Progress = Callable[[str], None]


@dataclass
class Diagnosis:
    """The analysis of one source/target pair, before and after it is written."""

    source: Bundle
    target: Bundle
    alignment: Alignment
    e2e: EndToEnd
    groups: pd.DataFrame
    by_module: pd.DataFrame
    by_module_kind: pd.DataFrame
    by_class: pd.DataFrame
    by_framework_op: pd.DataFrame
    unmatched: dict[str, pd.DataFrame]
    by_op_shape: pd.DataFrame = field(default_factory=pd.DataFrame)  # filled with the roofline in perf_model
    extras: dict[str, Any] = field(default_factory=dict)  # roofline, accuracy, fixes (when available)
    seconds: dict[str, float] = field(default_factory=dict)

    def coverage(self) -> dict[str, float]:
        return self.alignment.coverage()


# ---------------------------------------------------------------- inputs

def model_fingerprint(manifest: dict[str, Any]) -> str | None:
    """The model fingerprint a live capture records, None for a recorded trace."""
    model = manifest.get("model")
    if isinstance(model, dict) and model.get("fingerprint"):
        return str(model["fingerprint"])
    fp = manifest.get("model_fingerprint")
    return str(fp) if fp else None


def wall_spread(manifest: dict[str, Any]) -> Spread | None:
    """Step wall times (seconds) from a live capture's manifest, None when absent."""
    timing = manifest.get("timing")
    if isinstance(timing, dict) and timing.get("samples_s"):
        return Spread(tuple(float(x) for x in timing["samples_s"]))
    return None


def check_same_model(source: Bundle, target: Bundle, force: bool) -> None:
    fs, ft = model_fingerprint(source.manifest), model_fingerprint(target.manifest)
    if fs and ft and fs != ft and not force:
        raise BundleError(
            f"source and target ran different models (fingerprint {fs[:12]} vs {ft[:12]})",
            path=target.path,
            hint="diagnose two runs of the same model, or pass --force to compare them anyway",
        )


def refuse_unrelated_pair(d: Diagnosis, force: bool, warnings: list[str]) -> None:
    """Exit 2 (nothing written) when the runs share too little; with force, a banner warning first."""
    check = check_pair(d.alignment)
    fs, ft = model_fingerprint(d.source.manifest), model_fingerprint(d.target.manifest)
    same_model = bool(fs and fs == ft)  # one model captured on two stacks: low overlap is for the analysis to explain
    d.extras["pair_check"] = {**check.to_dict(), "same_model_fingerprint": same_model,
                              "forced": bool(force and not check.ok and not same_model)}
    if check.ok or same_model:
        return
    if not force:
        raise PorterError(check.reason, hint="diagnose two runs of the same model, or pass --force to compare them anyway")
    warnings.insert(0, f"COMPARED ANYWAY (--force): {check.reason}; every figure below is doubtful")


# ---------------------------------------------------------------- analysis

def live_pair(source: Bundle, target: Bundle) -> bool:
    """Both sides are porter's own captures of one model: their ops carry the same module tags."""
    fs, ft = model_fingerprint(source.manifest), model_fingerprint(target.manifest)
    return bool(fs) and fs == ft and source.manifest.get("kind") == target.manifest.get("kind") == "capture"


def analyse(source: Bundle, target: Bundle, *, catalogue: Catalogue | None = None,
            accuracy: dict[str, Any] | None = None) -> Diagnosis:
    """Align, attribute, roofline and rank fixes (no I/O). accuracy: porter.accuracy.live's block."""
    t0 = time.perf_counter()
    live = live_pair(source, target)
    al = align(source.ops, target.ops, source.kernels, target.kernels, identity=live)
    # live pairs: the ops as aligned hold each split fusion's shares (porter.analysis.split_fused)
    class_ops = (al.source_ops, al.target_ops) if live else (source.ops, target.ops)
    t1 = time.perf_counter()
    e2e = end_to_end(al, source.ops, target.ops, wall_spread(source.manifest), wall_spread(target.manifest))
    d = Diagnosis(
        source=source, target=target, alignment=al, e2e=e2e,
        groups=group_table(al),
        by_module=rollup(al, al.source_ops, al.target_ops, "module"),
        by_module_kind=rollup(al, with_module_kind(al.source_ops), with_module_kind(al.target_ops), "module_kind"),
        by_class=with_gross(rollup(al, *class_ops, "op_class"), class_gross(al, *class_ops)),
        by_framework_op=rollup(al, al.source_ops, al.target_ops, "framework_op"),
        unmatched={"source": unmatched(al, al.source_ops, "source"), "target": unmatched(al, al.target_ops, "target")},
    )
    d.extras["busy"] = busy_block(source.kernels, target.kernels)
    d.e2e = d.e2e.with_busy(d.extras["busy"])  # streams overlap: the ratio counts busy time, not the kernel sum
    d.seconds.update(align=t1 - t0, attribute=time.perf_counter() - t1)
    perf_model(d, catalogue or catalogue_from(None), accuracy)  # times cost and rank
    return d


def with_gross(by_class: pd.DataFrame, gross: pd.DataFrame) -> pd.DataFrame:
    """The class roll-up with each class's gross loss and gross win beside its net gap."""
    g = gross.reindex(by_class["key"]).fillna(0.0)
    return by_class.assign(gross_loss_us=g["gross_loss_us"].to_numpy(), gross_win_us=g["gross_win_us"].to_numpy())


def perf_model(d: Diagnosis, catalogue: Catalogue, accuracy: dict[str, Any] | None) -> None:
    """Roofline per group (seconds["cost"]), then the fix catalogue over the groups' symptoms
    (seconds["rank"]), into d.extras."""
    t0 = time.perf_counter()
    al = d.alignment
    ids = al.groups.set_index("group_id")
    facts = {
        "source": group_facts(ids["source_ids"], al.source_ops, al.source_times.values),
        "target": group_facts(ids["target_ids"], al.target_ops, al.target_times.values),
    }
    src_c, tgt_c = side_ceilings(d.source.manifest), side_ceilings(d.target.manifest)
    table = group_roofline(d.groups, facts["source"], facts["target"], src_c, tgt_c)
    d.extras["roofline"] = roofline_block(table, d.groups, src_c, tgt_c)
    d.by_op_shape = op_shape_table(al, table)
    t1 = time.perf_counter()
    acc = pd.DataFrame(accuracy["modules"]) if accuracy and accuracy.get("modules") else None
    groups = fix_groups(
        d.groups, facts["source"], facts["target"], table,
        source_device_type=str((d.source.manifest.get("device") or {}).get("type", "")),
        target_device_type=str((d.target.manifest.get("device") or {}).get("type", "")),
        target_stack=stack_of(d.target.manifest, compiles=has_regions(d.target.ops)),
        fused_modules=fused_attention_modules(al.source_ops, al.target_ops), accuracy=acc)
    d.extras["fixes"] = ranked_fix_records(groups, catalogue, src_c.ceilings, tgt_c.ceilings)
    d.extras["accuracy"] = accuracy
    d.seconds.update(cost=t1 - t0, rank=time.perf_counter() - t1)


# ---------------------------------------------------------------- output

JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


def _json_default(value: Any) -> Any:
    """What orjson cannot encode itself: other numpy scalars (via .item()), pandas NA."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    if value is pd.NA or value is pd.NaT:
        return None
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts, built from whole columns (DataFrame.to_dict boxes cell by cell);
    NaN and numpy values are left for orjson to write (null, plain numbers)."""
    keys = [str(c) for c in df.columns]
    columns = [df[c].to_list() for c in df.columns]
    return [dict(zip(keys, row)) for row in zip(*columns)]


def _records_json(df: pd.DataFrame, chunk: int = 4096) -> orjson.Fragment:
    """The rows as a JSON array already encoded, a chunk of rows at a time: a 1M-event
    pair has ~80k groups, and their dicts all at once would be ~200 MB beside the analysis."""
    parts = []
    for lo in range(0, len(df), chunk):
        text = orjson.dumps(_records(df.iloc[lo:lo + chunk]), option=JSON_OPTIONS & ~orjson.OPT_APPEND_NEWLINE,
                            default=_json_default)
        parts.append(text[1:-1].rstrip())  # the rows without the brackets
    return orjson.Fragment(b"[" + b",".join(parts) + b"\n]" if parts else b"[]")


def _side_summary(b: Bundle, role: str, al: Alignment, steps: Spread) -> dict[str, Any]:
    m = b.manifest
    times = al.source_times if role == "source" else al.target_times
    return {
        "bundle": role,
        "input": str(b.path),
        "label": b.label,
        "profiler": m.get("profiler"),
        "device": m.get("device", {}),
        "framework_versions": m.get("framework_versions") or m.get("versions") or {},  # live captures: "versions"
        "model": m.get("model"),
        "model_fingerprint": model_fingerprint(m),
        "target": m.get("target"),
        "source_trace": m.get("source"),
        "stats": m.get("stats", {}),
        "time_basis": times.basis,
        "total_us": times.total,
        "steps": steps.n,
        "ops": int(len(b.ops)),
        "kernels": int(len(b.kernels)),
    }


def to_json(d: Diagnosis) -> dict[str, Any]:
    al = d.alignment
    g = d.groups.copy()
    ids = al.groups.set_index("group_id")[["source_ids", "target_ids"]]
    g["source_op_ids"] = ids["source_ids"].reindex(g["group_id"]).to_list()
    g["target_op_ids"] = ids["target_ids"].reindex(g["group_id"]).to_list()
    ev = g.groupby("evidence")[["source_us", "target_us"]].sum()
    head = d.extras.get("headline") or {}
    step = lambda df: scaled_to_step(df, head)  # noqa: E731
    g = step(g)  # live pairs: groups and every roll-up per unprofiled step (profiler slowdown out), alike
    if d.extras.get("portability"):  # flag the op table: the target op's status from porter ops
        from porter.ops.in_diagnosis import op_key

        status = {op_key(r["op"]): r["status"] for r in d.extras["portability"]["flagged"]}
        # any target op of the group (a live pair's group is a whole module, named by its heaviest op)
        names = al.target_ops.set_index("op_id")["framework_op"].fillna("").to_dict()
        hits = [next(((names.get(i, ""), status[op_key(names.get(i, ""))]) for i in ids
                      if op_key(names.get(i, "")) in status), (None, None)) for ids in g["target_op_ids"]]
        g["portability_op"] = [op for op, _ in hits]
        g["portability"] = [st for _, st in hits]
    return {
        "format": FORMAT,
        "porter_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "inputs": {
            "source": _side_summary(d.source, "source", al, d.e2e.source),
            "target": _side_summary(d.target, "target", al, d.e2e.target),
        },
        "alignment": {
            "unit": "all profiled steps at once, ops in (step, start) order; group times are totals over the trace",
            "coverage": d.coverage(),
            "stats": al.stats,
            "time_by_evidence": {k: {"source_us": float(r.source_us), "target_us": float(r.target_us)}
                                 for k, r in ev.iterrows()},
            # live pairs only: each op call per step on both sides, paired by (module, op, call index)
            **({"op_calls": _records(al.op_calls)} if al.op_calls is not None else {}),
        },
        "headline": head or None,
        "pair_check": d.extras.get("pair_check"),
        "end_to_end": d.e2e.to_dict(),
        "busy": d.extras.get("busy"),
        "groups": _records_json(g),
        "by_module": _records(step(d.by_module)),
        "by_module_kind": _records(step(d.by_module_kind)),
        "by_class": _records(step(d.by_class)),
        "by_framework_op": _records(step(d.by_framework_op)),
        "by_op_shape": _records(step(d.by_op_shape)),
        "unmatched": {side: _records(df) for side, df in d.unmatched.items()},
        "roofline": d.extras.get("roofline"),
        "accuracy": d.extras.get("accuracy"),
        "fixes": d.extras.get("fixes"),
        "warnings": d.extras.get("warnings", []),
        "command": d.extras.get("command"),
        "seconds": d.seconds,
        # only diagnose --ops writes it: recorded-pair diagnoses stay as they were
        **({"portability": d.extras["portability"]} if d.extras.get("portability") else {}),
    }


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Encode with orjson (NaN/inf -> null, numpy natively; ~10x the stdlib encoder), then write
    beside the destination and rename: readers see the old file or the new one."""
    atomic_write_bytes(path, orjson.dumps(payload, option=JSON_OPTIONS, default=_json_default))


def keep_bundle(b: Bundle, dest: Path) -> None:
    """Store an input beside the diagnosis as a bundle (copy one, or write a read trace)."""
    if dest.exists() and b.path.resolve() == dest.resolve():
        return
    with staging(dest) as tmp:
        if is_bundle(b.path):
            shutil.copytree(b.path, tmp, dirs_exist_ok=True)
            return
        write_tables(tmp, b.ops, b.kernels)
        (tmp / RAW).mkdir()
        shutil.copy2(b.path, tmp / RAW / safe_raw_name(b.path))
        manifest = {k: v for k, v in b.manifest.items() if k != "meta"}
        write_manifest(tmp, manifest)


def diagnose(source: Bundle, target: Bundle, out_dir: str | Path, *, model: Any = None,
             force: bool = False, oracle: str | None = None, catalogue: Catalogue | None = None,
             report: bool = True, progress: Progress = lambda msg: None, command: str | None = None,
             seconds: dict[str, float] | None = None, paired_timing: Any = None, ops: bool = False,
             live: bool = False) -> tuple[Diagnosis, Path]:
    """Analyse two bundles, then write DIR/source, DIR/target and DIR/diagnosis.json (and,
    with report, DIR/report.html and report.md).

    model: the porter.capture.models.ModelSpec that was run (live accuracy needs it), else None.
    seconds: time already spent reading or capturing the inputs, kept in diagnosis.json.
    paired_timing: porter.capture.interleaved.PairedTiming of a live pair (the headline's basis).
    ops: also run `porter ops` for the model on the target stack (live captures) and flag its
    fallback, unsupported, mismatched and heavily decomposed ops (diagnosis.json `portability`).
    live: both bundles were captured by this run (the target's stack is here): every module's
    local error is measured in a streaming shadow run; otherwise only the suspects'.
    """
    out = Path(out_dir)
    t0 = time.perf_counter()
    warnings: list[str] = []
    check_same_model(source, target, force)
    acc, compile_log = None, []
    if has_activations(source) and has_activations(target):  # live captures: torch is needed
        from porter.accuracy.live import accuracy_block

        acc = accuracy_block(source, target, model, oracle, progress, live=live)
        compile_log = acc.pop("_compile_log", []) if acc else []
    if oracle and (acc is None or model is None):
        warnings.append(f"--oracle {oracle} needs a MODEL and runs with saved activations (live capture); not run")
    t_acc = time.perf_counter() - t0
    progress("aligning and attributing")
    d = analyse(source, target, catalogue=catalogue, accuracy=acc)
    refuse_unrelated_pair(d, force, warnings)
    d.extras.update(warnings=warnings, command=command)
    d.extras["headline"] = headline(d.e2e, paired_timing.to_dict() if paired_timing is not None else None,
                                    source.manifest, target.manifest, d.extras["busy"])
    if ops:
        portability(d, model, catalogue, progress)
    d.seconds.update(seconds or {})
    d.seconds["accuracy"] = t_acc
    progress("writing diagnosis.json and the two bundles")
    t1 = time.perf_counter()
    keep_bundle(source, out / "source")
    keep_bundle(target, out / "target")
    dest = out / DIAGNOSIS
    if compile_log:  # the per-module compiles' log lines stay out of the terminal
        write_json_atomic(out / "accuracy_compile_log.json", compile_log)
    d.seconds["total"] = time.perf_counter() - t0 + d.seconds.get("read", 0.0)  # the reports show this one
    payload = to_json(d)
    write_json_atomic(dest, payload)
    d.seconds["write"] = time.perf_counter() - t1
    if report:
        from reports.build import write_reports  # rendering only; the analysis does not need it

        progress("writing reports")
        t2 = time.perf_counter()
        write_reports(out, ("html", "md"))
        d.seconds["render"] = time.perf_counter() - t2
    d.seconds["total"] = time.perf_counter() - t0 + d.seconds.get("read", 0.0)
    payload["seconds"] = d.seconds
    write_json_atomic(dest, payload)  # again, with the write, render and final total (orjson: ~20 ms)
    return d, dest


def render_reports(dest: Path, progress: Progress = lambda msg: None) -> dict[str, Any]:
    """Write report.html/.md beside DIR/diagnosis.json, then add the render time to its
    `seconds`; returns diagnosis.json as written (parsed once for both). For a caller that
    has dropped the analysis first (the CLI): a 1M-event pair's analysis and its reports'
    parsed diagnosis.json together would set the peak memory."""
    from reports.build import write_reports

    progress("writing reports")
    t0 = time.perf_counter()
    payload = orjson.loads(dest.read_bytes())
    write_reports(dest.parent, ("html", "md"), data=payload)
    seconds = payload.setdefault("seconds", {})
    seconds["render"] = time.perf_counter() - t0
    seconds["total"] = float(seconds.get("total") or 0.0) + seconds["render"]
    write_json_atomic(dest, payload)
    return payload


def portability(d: Diagnosis, model: Any, catalogue: Catalogue | None, progress: Progress) -> None:
    """The target stack's portability gaps (porter ops) into d.extras, and their fixes into the plan."""
    if model is None:
        d.extras.setdefault("warnings", []).append("--ops needs a live capture of a MODEL; not run")
        return
    from porter.analysis.fixes import load_catalogue
    from porter.ops.in_diagnosis import fix_records, portability_block

    progress("checking each op on the target stack (porter ops)")
    cat = catalogue or load_catalogue()
    block = portability_block(model, d.target.manifest.get("target") or {}, _records(d.by_framework_op), cat)
    if block is None:
        return
    d.extras["portability"] = block
    fixes = list(d.extras.get("fixes") or [])
    d.extras["fixes"] = fixes + fix_records(block["flagged"], cat, len(fixes) + 1)


def diagnose_specs(source: str | Path, target: str | Path, out_dir: str | Path, *, model: str | None = None,
                   catalogue: str | Path | None = None, capture_options: Any = None, interleave: Any = None,
                   progress: Progress = lambda msg: None, target_dtype: str = "", target_autocast: str = "",
                   **kwargs: Any) -> tuple[Diagnosis, Path]:
    """What the CLI does: resolve each side (bundle, trace, or target to capture now) once,
    through porter.pipeline.inputs, then diagnose the two bundles. kwargs go to diagnose().

    capture_options: porter.capture.options.CaptureOptions for live sides (default LIVE_OPTIONS).
    interleave: porter.capture.interleaved.InterleaveOptions for the live headline's timing.
    target_dtype / target_autocast: a precision port, the target captured in that dtype or under
    torch.autocast to it (porter.capture.precision).
    """
    from porter.capture.options import CaptureOptions
    from porter.pipeline.inputs import resolve_pair

    cat = catalogue_from(catalogue)  # a bad catalogue fails before minutes of capture
    check_output_dir(out_dir)  # so does a bad -o
    t0 = time.perf_counter()
    with resolve_pair(source, target, out_dir, model=model,
                      options=capture_options or CaptureOptions(**LIVE_OPTIONS), interleave=interleave,
                      target_dtype=target_dtype, target_autocast=target_autocast, progress=progress) as pair:
        read = time.perf_counter() - t0
        return diagnose(pair.source, pair.target, out_dir, model=pair.model, catalogue=cat,
                        progress=progress, seconds={"read": read}, paired_timing=pair.paired_timing,
                        live=pair.live, **kwargs)
