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
from porter.atomic import atomic_write_bytes
from porter.analysis.align import Alignment, align, unmatched
from porter.analysis.attribute import EndToEnd, Spread, end_to_end, group_table, rollup, with_module_kind
from porter.bundle import RAW, Bundle, has_activations, is_bundle, staging, write_manifest, write_tables
from porter.errors import BundleError, PorterError
from porter.analysis.fixes import Catalogue
from porter.analysis.fixplan import catalogue_from, fix_groups, fused_attention_modules, ranked_fix_records
from porter.analysis.groupcost import group_facts
from porter.analysis.roofline import group_roofline, roofline_block, side_ceilings

DIAGNOSIS = "diagnosis.json"
FORMAT = "porter.diagnosis/1"
SIDES = ("source", "target")
# Live captures inside diagnose: fewer profiled steps and timed repeats than `porter capture`,
# so the default model diagnoses from cpu to xla in under a minute on two cores.
LIVE_OPTIONS = {"steps": 3, "warmup": 1, "repeats": 10}
NOISY = 0.10  # IQR/median of step times above which the summary warns
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


# ---------------------------------------------------------------- analysis

def analyse(source: Bundle, target: Bundle, *, catalogue: Catalogue | None = None,
            accuracy: dict[str, Any] | None = None) -> Diagnosis:
    """Align, attribute, roofline and rank fixes (no I/O). accuracy: porter.accuracy_run's block."""
    t0 = time.perf_counter()
    al = align(source.ops, target.ops, source.kernels, target.kernels)
    t1 = time.perf_counter()
    e2e = end_to_end(al, source.ops, target.ops, wall_spread(source.manifest), wall_spread(target.manifest))
    d = Diagnosis(
        source=source, target=target, alignment=al, e2e=e2e,
        groups=group_table(al),
        by_module=rollup(al, al.source_ops, al.target_ops, "module"),
        by_module_kind=rollup(al, with_module_kind(al.source_ops), with_module_kind(al.target_ops), "module_kind"),
        by_class=rollup(al, source.ops, target.ops, "op_class"),
        by_framework_op=rollup(al, al.source_ops, al.target_ops, "framework_op"),
        unmatched={"source": unmatched(al, al.source_ops, "source"), "target": unmatched(al, al.target_ops, "target")},
    )
    d.seconds.update(align=t1 - t0, attribute=time.perf_counter() - t1)
    perf_model(d, catalogue or catalogue_from(None), accuracy)  # times cost and rank
    return d


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
    t1 = time.perf_counter()
    acc = pd.DataFrame(accuracy["modules"]) if accuracy and accuracy.get("modules") else None
    groups = fix_groups(
        d.groups, facts["source"], facts["target"], table,
        source_device_type=str((d.source.manifest.get("device") or {}).get("type", "")),
        target_device_type=str((d.target.manifest.get("device") or {}).get("type", "")),
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


def _side_summary(b: Bundle, role: str, al: Alignment, steps: Spread) -> dict[str, Any]:
    m = b.manifest
    times = al.source_times if role == "source" else al.target_times
    return {
        "bundle": role,
        "input": str(b.path),
        "label": b.label,
        "profiler": m.get("profiler"),
        "device": m.get("device", {}),
        "framework_versions": m.get("framework_versions", {}),
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
        },
        "end_to_end": d.e2e.to_dict(),
        "groups": _records(g),
        "by_module": _records(d.by_module),
        "by_module_kind": _records(d.by_module_kind),
        "by_class": _records(d.by_class),
        "by_framework_op": _records(d.by_framework_op),
        "unmatched": {side: _records(df) for side, df in d.unmatched.items()},
        "roofline": d.extras.get("roofline"),
        "accuracy": d.extras.get("accuracy"),
        "fixes": d.extras.get("fixes"),
        "warnings": d.extras.get("warnings", []),
        "command": d.extras.get("command"),
        "seconds": d.seconds,
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
        shutil.copy2(b.path, tmp / RAW / b.path.name)
        manifest = {k: v for k, v in b.manifest.items() if k != "meta"}
        write_manifest(tmp, manifest)


def diagnose(source: Bundle, target: Bundle, out_dir: str | Path, *, model: Any = None,
             force: bool = False, oracle: str | None = None, catalogue: Catalogue | None = None,
             report: bool = True, progress: Progress = lambda msg: None, command: str | None = None,
             seconds: dict[str, float] | None = None) -> tuple[Diagnosis, Path]:
    """Analyse two bundles, then write DIR/source, DIR/target and DIR/diagnosis.json (and,
    with report, DIR/report.html and report.md).

    model: the porter.capture.models.ModelSpec that was run (live accuracy needs it), else None.
    seconds: time already spent reading or capturing the inputs, kept in diagnosis.json.
    """
    out = Path(out_dir)
    t0 = time.perf_counter()
    warnings: list[str] = []
    check_same_model(source, target, force)
    acc = None
    if has_activations(source) and has_activations(target):  # live captures: torch is needed
        from porter.accuracy_run import accuracy_block

        acc = accuracy_block(source, target, model, oracle, progress)
    if oracle and (acc is None or model is None):
        warnings.append(f"--oracle {oracle} needs a MODEL and runs with saved activations (live capture); not run")
    t_acc = time.perf_counter() - t0
    progress("aligning and attributing")
    d = analyse(source, target, catalogue=catalogue, accuracy=acc)
    d.extras.update(warnings=warnings, command=command)
    d.seconds.update(seconds or {})
    d.seconds["accuracy"] = t_acc
    progress("writing diagnosis.json and the two bundles")
    t1 = time.perf_counter()
    keep_bundle(source, out / "source")
    keep_bundle(target, out / "target")
    dest = out / DIAGNOSIS
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


def diagnose_specs(source: str | Path, target: str | Path, out_dir: str | Path, *, model: str | None = None,
                   catalogue: str | Path | None = None, capture_options: Any = None,
                   progress: Progress = lambda msg: None, **kwargs: Any) -> tuple[Diagnosis, Path]:
    """What the CLI does: resolve each side (bundle, trace, or target to capture now) once,
    through porter.inputs, then diagnose the two bundles. kwargs go to diagnose().

    capture_options: porter.capture.options.CaptureOptions for live sides (default LIVE_OPTIONS).
    """
    from porter.capture.options import CaptureOptions
    from porter.inputs import resolve_pair

    cat = catalogue_from(catalogue)  # a bad catalogue fails before minutes of capture
    t0 = time.perf_counter()
    with resolve_pair(source, target, out_dir, model=model,
                      options=capture_options or CaptureOptions(**LIVE_OPTIONS), progress=progress) as pair:
        read = time.perf_counter() - t0
        return diagnose(pair.source, pair.target, out_dir, model=pair.model, catalogue=cat,
                        progress=progress, seconds={"read": read}, **kwargs)


# ---------------------------------------------------------------- terminal summary

def _us(us: float) -> str:
    if us != us:
        return "-"
    a = abs(us)
    return f"{us / 1e6:.2f} s" if a >= 1e6 else f"{us / 1e3:.2f} ms" if a >= 1e3 else f"{us:.1f} us"


def _cut(text: str, n: int) -> str:
    """Keep the end of a long module path (the innermost scopes say most)."""
    return text if len(text) <= n else "..." + text[-(n - 3):]


def roofline_lines(roof: dict[str, Any] | None) -> list[str]:
    if not roof:
        return []
    t = roof["totals"]
    tgt = roof["ceilings"]["target"]
    if not tgt["known"]:
        return ["roofline: target device not in porter/data/devices.toml and no measured ceilings"]
    return [f"roofline ({'measured' if tgt.get('measured') else 'datasheet'} ceilings): "
            f"up to {_us(t['recoverable_us'])} recoverable, {_us(t['demonstrated_us'])} shown reachable by the source"]


def fix_lines(fixes: list[dict[str, Any]], width: int, top: int = 3) -> list[str]:
    """The top fixes: title; estimated saving (or severity), effort, confidence; where."""
    from reports.build import fix_where

    if not fixes:
        return ["fixes: no catalogue fix applies to these gaps"]
    lines = [f"top fixes ({len(fixes)} apply; fixes for the same ops are alternatives):"]
    for i, f in enumerate(fixes[:top], 1):
        lo, hi = f["days"]
        gain = (f"saves up to {_us(f['recoverable_us'])}" if f["kind"] == "perf"
                else f"accuracy: local error {f['severity']:.3g}x tolerance")
        lines.append(f"  {i}. {f['title']}"[:width])
        lines.append(f"     {gain}; {lo:g}-{hi:g} engineer-days; {f['confidence']} confidence"[:width])
        lines.append("     at " + _cut(fix_where(f), width - 8))
    return lines


def accuracy_lines(acc: dict[str, Any] | None, width: int) -> list[str]:
    import textwrap

    if not acc:
        return ["accuracy: not compared (no saved tensors; a live diagnose of a MODEL compares them)"]
    lines = [f"accuracy ({acc['dtype']}, {acc['metric']}, tolerance {acc['tolerance']:.0e}):"]
    for text in acc.get("findings", []):
        lines += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="    ")
    return lines


def summary_lines(d: Diagnosis, width: int = 100, top: int = 5) -> list[str]:
    """A plain-text summary that fits `width` columns."""
    e, cov = d.e2e, d.coverage()
    dev = lambda b: b.manifest.get("device", {}).get("name") or b.manifest.get("device", {}).get("type", "?")  # noqa: E731
    lines = [
        _cut(f"{d.source.label} ({dev(d.source)}) -> {d.target.label} ({dev(d.target)})", width),
        f"end to end: target/source x{e.ratio:.3f} ({e.basis.replace('_', ' ')})",
        "  per step: " + ", ".join(
            f"{role} {_us(sp.median)} +-{sp.rel_spread * 100:.0f}% (n={sp.n})" if has else f"{role}: no step markers"
            for role, sp, has in (("source", e.source, e.source_has_steps), ("target", e.target, e.target_has_steps))),
    ]
    noisy = max(e.source.rel_spread, e.target.rel_spread)
    if noisy > NOISY:
        lines.append(f"  noisy: step times spread {noisy * 100:.0f}% (IQR/median); small gaps are not trustworthy")
    if e.wall_ratio is not None:
        lines.append(f"wall time: x{e.wall_ratio:.3f} (source {e.source_wall.median * 1e3:.2f} ms, "
                     f"target {e.target_wall.median * 1e3:.2f} ms per step)")
    lines.append(f"whole trace: {_us(e.source_total_us)} -> {_us(e.target_total_us)} "
                 f"({d.alignment.source_times.basis})")
    lines.append(f"coverage: {cov['source'] * 100:.2f}% of source, {cov['target'] * 100:.2f}% of target time "
                 f"in {len(d.groups)} matched groups")
    name_w = max(20, width - 40)
    base = e.source_total_us or float("nan")
    tables = [("module", d.by_module)]
    if len(d.by_module_kind) < len(d.by_module):
        tables.append(("module kind (instances summed)", d.by_module_kind))
    for title, table in tables:
        lines.append(f"top time gaps by {title}, target slower first:")
        slow = table[table["delta_us"] > 0].head(top)
        for r in slow.itertuples():
            lines.append(f"  {'+' + _us(r.delta_us):>11} {r.delta_us / base * 100:5.1f}% of source  "
                         f"x{r.ratio:<6.2f} {_cut(r.key or '(no module)', name_w)}")
        if slow.empty:
            lines.append("  (none is slower on the target)")
    lines += roofline_lines(d.extras.get("roofline"))
    lines += fix_lines(d.extras.get("fixes") or [], width)
    lines += accuracy_lines(d.extras.get("accuracy"), width)
    lines += [f"warning: {w}" for w in d.extras.get("warnings", [])]
    return [line[:width] for line in lines]
