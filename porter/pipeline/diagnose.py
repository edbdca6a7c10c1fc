"""`porter diagnose`: two runs in, one diagnosis.json out.

Inputs are read and analysed in memory first; only a complete analysis writes anything:
the two bundles (DIR/source, DIR/target, each replaced atomically), the reports, rendered
from the payload in memory, and then DIR/diagnosis.json, once (porter.pipeline.document).
A failure leaves the previous diagnosis intact. The JSON holds everything a report needs
(docs/diagnosis.md describes it).
"""

from __future__ import annotations

import gc
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from porter.analysis.align import align, unmatched
from porter.analysis.attribute import end_to_end, group_table, rollup, with_module_kind
from porter.analysis.busy import busy_block
from porter.analysis.compiled import has_regions
from porter.analysis.fixes import Catalogue
from porter.analysis.fixplan import catalogue_from, fix_groups, fix_plan, fused_attention_modules
from porter.analysis.fixrank import RankedFix, matched_fixes
from porter.analysis.plan import plan_fixes
from porter.analysis.gap_noise import with_group_gaps, with_key_gaps
from porter.analysis.outside import runtime_step, source_runtime_share
from porter.analysis.groupcost import group_facts
from porter.analysis.headline import headline, ops_step, scaled_to_step
from porter.analysis.opshape import class_gross, op_shape_table
from porter.analysis.paircheck import check_pair
from porter.analysis.roofline import group_roofline, roofline_block, side_ceilings
from porter.core.stacks import stack_of
from porter.bundles.bundle import RAW, Bundle, encode_tables, is_bundle, run_of, staging, write_files, write_manifest
from porter.bundles.ingest import safe_raw_name
from porter.core.atomic import check_output_dir
from porter.core.errors import BundleError, PorterError
from porter.core.samples import Samples
from porter.pipeline.confirmation import apply_confirmed, confirm_block
from porter.runtime.policy import WARMUP
from porter.pipeline.document import DIAGNOSIS, Document, records, to_json, write_json
from porter.pipeline.result import STEP_TABLES, Diagnosis, Pair, model_fingerprint
from porter.pipeline.timeline import PAIR_TIMELINE

__all__ = ["DIAGNOSIS", "LIVE_OPTIONS", "Diagnosis", "Pair", "analyse", "diagnose", "diagnose_specs", "live_pair",
           "refuse_unrelated_pair", "to_json"]

# Live captures inside diagnose: fewer profiled steps and timed repeats than `porter capture`,
# so the default model diagnoses from cpu to xla in under a minute on two cores.
LIVE_OPTIONS = {"steps": 3, "warmup": WARMUP, "repeats": 10}  # warm-up: the measurement policy's
Progress = Callable[[str], None]


# ---------------------------------------------------------------- inputs

def wall_spread(manifest: dict[str, Any]) -> Samples | None:
    """Step wall times (seconds) from a live capture's manifest, None when absent."""
    timing = manifest.get("timing")
    if isinstance(timing, dict) and timing.get("samples_s"):
        return Samples(tuple(float(x) for x in timing["samples_s"]))
    return None


def check_same_model(source: Bundle, target: Bundle, force: bool) -> None:
    fs, ft = model_fingerprint(source.manifest), model_fingerprint(target.manifest)
    if fs and ft and fs != ft and not force:
        raise BundleError(
            f"source and target ran different models (fingerprint {fs[:12]} vs {ft[:12]})",
            path=target.path,
            hint="diagnose two runs of the same model, or pass --force to compare them anyway",
        )


def paired_by_parameters(source: Bundle, target: Bundle) -> tuple[Bundle, dict[str, Any] | None]:
    """A model and its rewrite (another framework's names, the same weights): the target's module
    paths in the source's names when their parameters pair (porter.analysis.modulemap) for at
    least MAPPED_ENOUGH of the modules, and the pairing; else the target as it is, and None."""
    import dataclasses

    from porter.analysis.modulemap import MAPPED_ENOUGH, build_map, renamed, renamed_members

    sigs = [(b.manifest.get("model") or {}).get("module_params") or [] for b in (source, target)]
    if not all(sigs) or {p for p, _ in sigs[0]} == {p for p, _ in sigs[1]}:
        return target, None  # nothing recorded, or the same names: nothing to pair
    m = build_map([tuple(x) for x in sigs[0]], [tuple(x) for x in sigs[1]])
    if m.share < MAPPED_ENOUGH:
        return target, None
    ops = target.ops.copy()
    ops["module"] = [renamed(str(p), m.mapping) for p in ops["module"]]
    if "members" in ops:
        ops["members"] = [renamed_members(str(x), m.mapping) for x in ops["members"]]
    manifest = {**target.manifest, "module_map": m.to_dict(),
                "model": {**(target.manifest.get("model") or {}),
                          "fingerprint": (source.manifest.get("model") or {}).get("fingerprint"),
                          "own_fingerprint": (target.manifest.get("model") or {}).get("fingerprint")}}
    return dataclasses.replace(target, ops=ops, manifest=manifest), m.to_dict()


def refuse_unrelated_pair(d: Diagnosis, force: bool, warnings: list[str]) -> None:
    """Exit 2 (nothing written) when the runs share too little; with force, a banner warning first."""
    check = check_pair(d.alignment)
    same_model = d.pair.same_model  # one model captured on two stacks: low overlap is for the analysis to explain
    d.pair_check = {**check.to_dict(), "same_model_fingerprint": same_model,
                    "forced": bool(force and not check.ok and not same_model)}
    if check.ok or same_model:
        return
    if not force:
        raise PorterError(check.reason, hint="diagnose two runs of the same model, or pass --force to compare them anyway")
    warnings.insert(0, f"COMPARED ANYWAY (--force): {check.reason}; every figure below is doubtful")


# ---------------------------------------------------------------- analysis

def live_pair(source: Bundle, target: Bundle) -> bool:
    """Both sides are porter's own captures of one model: their ops carry the same module tags."""
    return Pair.of(source, target).identity


def measure(source: Bundle, target: Bundle, pair: Pair, catalogue: Catalogue,
            accuracy: dict[str, Any] | None) -> tuple[Diagnosis, list[RankedFix]]:
    """Align, attribute and cost (no I/O); the fixes the groups' symptoms match, not yet ranked."""
    d = attribute(source, target, pair)
    return d, perf_model(d, catalogue, accuracy)  # times cost and rank


def attribute(source: Bundle, target: Bundle, pair: Pair) -> Diagnosis:
    """Align and attribute (no I/O): the time tables and busy time, before any cost or fix."""
    t0 = time.perf_counter()
    al = align(source.ops, target.ops, source.kernels, target.kernels, identity=pair.identity)
    # live pairs: the ops as aligned hold each split fusion's shares (porter.analysis.split_fused)
    class_ops = (al.source_ops, al.target_ops) if pair.identity else (source.ops, target.ops)
    t1 = time.perf_counter()
    e2e = end_to_end(al, source.ops, target.ops, wall_spread(source.manifest), wall_spread(target.manifest))
    groups = group_table(al)
    ids = al.groups.set_index("group_id")[["source_ids", "target_ids"]]
    groups["source_op_ids"] = ids["source_ids"].reindex(groups["group_id"]).to_list()
    groups["target_op_ids"] = ids["target_ids"].reindex(groups["group_id"]).to_list()
    d = Diagnosis(
        source=source, target=target, runs=(run_of(source, "source"), run_of(target, "target")), pair=pair,
        alignment=al, e2e=e2e, groups=groups,
        by_module=rollup(al, al.source_ops, al.target_ops, "module"),
        by_module_kind=rollup(al, with_module_kind(al.source_ops), with_module_kind(al.target_ops), "module_kind"),
        by_class=with_gross(rollup(al, *class_ops, "op_class"), class_gross(al, *class_ops)),
        by_framework_op=rollup(al, al.source_ops, al.target_ops, "framework_op"),
        unmatched={"source": unmatched(al, al.source_ops, "source"), "target": unmatched(al, al.target_ops, "target")},
    )
    d.busy = busy_block(*d.runs)
    d.e2e = d.e2e.with_busy(d.busy)  # streams overlap: the ratio counts busy time, not the kernel sum
    d.seconds.update(align=t1 - t0, attribute=time.perf_counter() - t1)
    return d


def analyse(source: Bundle, target: Bundle, *, catalogue: Catalogue | None = None,
            accuracy: dict[str, Any] | None = None, pair: Pair | None = None) -> Diagnosis:
    """Align, attribute, roofline and rank fixes (no I/O). accuracy: porter.accuracy.live's block.
    pair: decided by the caller that knows how the bundles were obtained, else from their manifests."""
    d, found = measure(source, target, pair or Pair.of(source, target), catalogue or catalogue_from(None), accuracy)
    set_fixes(d, fix_plan(found))
    return d


def set_fixes(d: Diagnosis, fixes: list[dict[str, Any]]) -> None:
    """The ranked fixes into d, each marked in the plan or an alternative, and the plan they
    make (porter.analysis.plan); an uncertain headline makes the plan provisional."""
    d.fixes, plan = plan_fixes(fixes, (d.headline or {}).get("advice"))
    d.plan = plan.to_dict()


def with_gross(by_class: pd.DataFrame, gross: pd.DataFrame) -> pd.DataFrame:
    """The class roll-up with each class's gross loss and gross win beside its net gap."""
    g = gross.reindex(by_class["key"]).fillna(0.0)
    return by_class.assign(gross_loss_us=g["gross_loss_us"].to_numpy(), gross_win_us=g["gross_win_us"].to_numpy())


def perf_model(d: Diagnosis, catalogue: Catalogue, accuracy: dict[str, Any] | None) -> list[RankedFix]:
    """Roofline per group (seconds["cost"]), then the fix catalogue over the groups' symptoms
    (seconds["rank"]): the fixes found, for fix_plan to rank with any others."""
    t0 = time.perf_counter()
    al = d.alignment
    ids = al.groups.set_index("group_id")
    facts = {
        "source": group_facts(ids["source_ids"], al.source_ops, al.source_times.values),
        "target": group_facts(ids["target_ids"], al.target_ops, al.target_times.values),
    }
    src_c, tgt_c = side_ceilings(d.source.manifest), side_ceilings(d.target.manifest)
    table = group_roofline(d.groups, facts["source"], facts["target"], src_c, tgt_c)
    d.roofline = roofline_block(table, d.groups, src_c, tgt_c)
    d.by_op_shape = op_shape_table(al, table)
    t1 = time.perf_counter()
    acc = pd.DataFrame(accuracy["modules"]) if accuracy and accuracy.get("modules") else None
    groups = fix_groups(
        d.groups, facts["source"], facts["target"], table,
        source_device_type=str((d.source.manifest.get("device") or {}).get("type", "")),
        target_device_type=str((d.target.manifest.get("device") or {}).get("type", "")),
        target_stack=stack_of(d.target.manifest, compiles=has_regions(d.target.ops)),
        source_stack=stack_of(d.source.manifest, compiles=has_regions(d.source.ops)),
        fused_modules=fused_attention_modules(al.source_ops, al.target_ops), accuracy=acc,
        outside=tuple(al.stats.get(f"{side}_outside_modules_by_kind_us") or {} for side in ("source", "target")),
        runtime_share=source_runtime_share(runtime) if (runtime := (d.headline or {}).get("runtime")) else None)
    found = matched_fixes(groups, catalogue, src_c.ceilings, tgt_c.ceilings)
    d.accuracy = accuracy
    d.seconds.update(cost=t1 - t0, rank=time.perf_counter() - t1)
    return found


def runtime_row(d: Diagnosis, counted: dict[str, Any]) -> None:
    """Each side's runtime per step, like for like, into the headline (porter.analysis.outside.
    runtime_step); where the root's row holds only the runtime, it is marked `runtime`: the
    module rankings leave it out and the summary compares it on its own line."""
    bm = d.by_module
    root = bm[bm["key"].astype(str) == ""] if "source_step_us" in bm.columns else bm.iloc[0:0]
    at_root = {r: float(root[f"{r}_step_us"].sum()) for r in ("source", "target")} if len(root) else {}
    block = runtime_step(d.alignment.stats, (d.headline or {}).get("sides") or {}, counted, at_root)
    if block is None:
        return
    d.headline["runtime"] = block
    if block["root_is_runtime"]:
        for name in ("by_module", "by_module_kind"):
            t = getattr(d, name)
            if t is not None and len(t) and "key" in t.columns:
                setattr(d, name, t.assign(runtime=t["key"].astype(str).to_numpy() == ""))


def per_step(d: Diagnosis, tables: tuple[str, ...] = STEP_TABLES) -> None:
    """Live pairs: the groups and every roll-up per unprofiled step (the profiler's slowdown
    out, porter.analysis.headline), alike; recorded pairs keep them as they are."""
    for name in tables:
        setattr(d, name, scaled_to_step(getattr(d, name), d.headline or {}))


def gap_noise(d: Diagnosis) -> None:
    """Each module's, module kind's and group's gap interval per profiled step and whether it
    excludes zero (porter.analysis.gap_noise), on the step scale the per-step times use."""
    al, h = d.alignment, d.headline
    d.by_module = with_key_gaps(d.by_module, al, h, "module")
    kinds = (with_module_kind(al.source_ops)["module_kind"].to_numpy(dtype=object),
             with_module_kind(al.target_ops)["module_kind"].to_numpy(dtype=object))
    d.by_module_kind = with_key_gaps(d.by_module_kind, al, h, "module_kind", *kinds)
    d.groups = with_group_gaps(d.groups, al, h)


def portability(d: Diagnosis, model: Any, catalogue: Catalogue | None, progress: Progress) -> list[dict[str, Any]]:
    """The target stack's portability gaps (porter ops) into d, each group flagged with its
    target op's status; returns their fix records, for the plan to rank with the rest."""
    if model is None:
        d.warnings.append("--ops needs a live capture of a MODEL; not run")
        return []
    from porter.analysis.fixes import load_catalogue
    from porter.ops.in_diagnosis import fix_records, op_key, portability_block

    progress("checking each op on the target stack (porter ops)")
    cat = catalogue or load_catalogue()
    block = portability_block(model, d.target.manifest.get("target") or {}, records(d.by_framework_op), cat)
    if block is None:
        return []
    d.portability = block
    status = {op_key(r["op"]): r["status"] for r in block["flagged"]}
    # any target op of the group (a live pair's group is a whole module, named by its heaviest op)
    names = d.alignment.target_ops.set_index("op_id")["framework_op"].fillna("").to_dict()
    hits = [next(((names.get(i, ""), status[op_key(names.get(i, ""))]) for i in ids
                  if op_key(names.get(i, "")) in status), (None, None)) for ids in d.groups["target_op_ids"]]
    d.groups = d.groups.assign(portability_op=[op for op, _ in hits], portability=[st for _, st in hits])
    return fix_records(block["flagged"], cat, 1)


# ---------------------------------------------------------------- output

def keep_bundle(b: Bundle, dest: Path) -> None:
    """Store an input beside the diagnosis as a bundle (copy one, or write a read trace)."""
    if dest.exists() and b.path.resolve() == dest.resolve():
        return
    if is_bundle(b.path):
        with staging(dest) as tmp:
            shutil.copytree(b.path, tmp, dirs_exist_ok=True)
        return
    files = encode_tables(b.ops, b.kernels)  # ready before the staged folder exists
    with staging(dest) as tmp:
        write_files(tmp, files)
        (tmp / RAW).mkdir()
        shutil.copy2(b.path, tmp / RAW / safe_raw_name(b.path))
        manifest = {k: v for k, v in b.manifest.items() if k != "meta"}
        write_manifest(tmp, manifest)


def build(source: Bundle, target: Bundle, out: Path, *, t0: float, model: Any = None, force: bool = False,
          oracle: str | None = None, catalogue: Catalogue | None = None, progress: Progress = lambda msg: None,
          command: str | None = None, seconds: dict[str, float] | None = None, paired_timing: Any = None,
          ops: bool = False, live: bool = False, confirm: int = 0, target_model: Any = None) -> tuple[Diagnosis, Document]:
    """The whole diagnosis and the two bundles on disk; diagnosis.json built, not yet written
    (diagnose() documents the options; t0: when the diagnosis started, for `seconds`)."""
    target, module_map = paired_by_parameters(source, target)
    pair = Pair.of(source, target, here=live)
    warnings: list[str] = []
    check_same_model(source, target, force)
    acc, compile_log = None, []
    program = model is not None and getattr(model, "program", None) is not None
    if pair.here and (program or target_model is not None):
        what = "a JAX program's" if program else "a rewrite's"
        if confirm:
            warnings.append(f"{what} modules are not re-timed alone (--confirm): their gaps are the profiled ones")
        if ops:
            warnings.append(f"--ops checks a PyTorch model's ops on the target stack; not run for {what[:-2]}")
        confirm, ops = 0, False
    if program and oracle:
        warnings.append(f"--oracle {oracle} runs a PyTorch model in float64; not run for a JAX program")
        oracle = None
    if pair.activations:  # live captures: torch is needed
        from porter.accuracy.live import accuracy_block

        acc = accuracy_block(source, target, model, oracle, progress, live=pair.here, target_model=target_model)
        compile_log = acc.pop("_compile_log", []) if acc else []
    if oracle and (acc is None or model is None):
        warnings.append(f"--oracle {oracle} needs a MODEL and runs with saved activations (live capture); not run")
    t_acc = time.perf_counter() - t0
    progress("aligning and attributing")
    cat = catalogue or catalogue_from(None)
    d = attribute(source, target, pair)
    d.module_map = module_map
    refuse_unrelated_pair(d, force, warnings)
    d.warnings, d.command = warnings, command
    d.headline = headline(d.e2e, paired_timing.to_dict() if paired_timing is not None else None,
                          source.manifest, target.manifest, d.busy)
    if pair.identity:  # a live pair's modules and groups: is each gap more than the steps' noise?
        gap_noise(d)
    per_step(d, tuple(t for t in STEP_TABLES if t != "by_op_shape"))  # by_op_shape comes with the cost
    d.confirmed = confirm_block(d, model, confirm, getattr(paired_timing, "clock", "wall") == "cpu", progress)
    if d.confirmed:
        apply_confirmed(d, d.confirmed)  # the summary and the fixes rank confirmed gaps
    if d.headline and (counted := ops_step(d.by_module, d.headline)) is not None:
        d.headline["ops_step"] = counted  # the step table's ratio beside the headline's, and why they differ
        runtime_row(d, counted)
    found = perf_model(d, cat, acc)  # the fixes match only gaps beyond noise (porter.analysis.fixrank)
    per_step(d, ("by_op_shape",))
    set_fixes(d, fix_plan(found, portability(d, model, catalogue, progress) if ops else ()))
    d.seconds.update(seconds or {})
    d.seconds["accuracy"] = t_acc
    progress("writing diagnosis.json and the two bundles")
    t1 = time.perf_counter()
    keep_bundle(source, out / "source")
    keep_bundle(target, out / "target")
    if compile_log:  # the per-module compiles' log lines stay out of the terminal
        write_json(out / "accuracy_compile_log.json", compile_log)
    d.seconds["total"] = 0.0  # its place among the phases; finish() fills it in
    doc = Document(out / DIAGNOSIS, to_json(d), d.seconds)
    d.seconds["write"] = time.perf_counter() - t1  # the bundles and the payload; the file's own write is after
    return d, doc


def finish(doc: Document, report: bool, progress: Progress, t0: float) -> Path:
    """The reports, rendered from the payload in memory, then diagnosis.json with every phase timed.
    Report files an earlier run left in the folder go first, whether or not this one writes its own."""
    from reports.build import remove_reports, write_reports  # rendering only; the analysis does not need it

    total = lambda: time.perf_counter() - t0 + doc.seconds.get("read", 0.0)  # noqa: E731
    remove_reports(doc.path.parent)
    (doc.path.parent / PAIR_TIMELINE).unlink(missing_ok=True)  # an earlier run's timeline; --perfetto writes anew
    if report:
        progress("writing reports")
        t2 = time.perf_counter()
        doc.seconds["total"] = total()  # the reports state the time up to them
        write_reports(doc.path.parent, ("html", "md"), data=doc.parsed())
        doc.seconds["render"] = time.perf_counter() - t2
    doc.seconds["total"] = total()
    return doc.write()


def diagnose(source: Bundle, target: Bundle, out_dir: str | Path, *, model: Any = None,
             force: bool = False, oracle: str | None = None, catalogue: Catalogue | None = None,
             report: bool = True, progress: Progress = lambda msg: None, command: str | None = None,
             seconds: dict[str, float] | None = None, paired_timing: Any = None, ops: bool = False,
             live: bool = False, keep_analysis: bool = True, confirm: int = 0) -> tuple[Diagnosis | None, Path]:
    """Analyse two bundles, then write DIR/source, DIR/target, with report DIR/report.html and
    report.md, and DIR/diagnosis.json (once, last).

    model: the porter.capture.models.ModelSpec that was run (live accuracy needs it), else None.
    seconds: time already spent reading or capturing the inputs, kept in diagnosis.json.
    paired_timing: porter.capture.interleaved.PairedTiming of a live pair (the headline's basis).
    ops: also run `porter ops` for the model on the target stack (live captures) and flag its
    fallback, unsupported, mismatched and heavily decomposed ops (diagnosis.json `portability`).
    live: both bundles were captured by this run (the target's stack is here): every module's
    local error is measured in a streaming shadow run; otherwise only the suspects'.
    keep_analysis: False drops the analysis before the reports render (returned as None): a
    1M-event pair's analysis and its parsed diagnosis.json together would set the peak memory.
    confirm: re-time the N largest module gaps alone on both stacks (live pairs run here;
    porter.pipeline.confirmation); 0 does not.
    """
    t0 = time.perf_counter()
    d, doc = build(source, target, Path(out_dir), t0=t0, model=model, force=force, oracle=oracle, catalogue=catalogue,
                   progress=progress, command=command, seconds=seconds, paired_timing=paired_timing, ops=ops,
                   live=live, confirm=confirm)
    if not keep_analysis:
        d = None
    return d, finish(doc, report, progress, t0)


def diagnose_specs(source: str | Path, target: str | Path, out_dir: str | Path, *, model: str | None = None,
                   target_model: str | None = None,
                   catalogue: str | Path | None = None, capture_options: Any = None, interleave: Any = None,
                   progress: Progress = lambda msg: None, target_dtype: str = "", target_autocast: str = "",
                   report: bool = True, keep_analysis: bool = True, **kwargs: Any) -> tuple[Diagnosis | None, Path]:
    """What the CLI does: resolve each side (bundle, trace, or target to capture now) once,
    through porter.pipeline.inputs, then diagnose the two bundles. kwargs: diagnose()'s force,
    oracle, command, ops, confirm.

    capture_options: porter.capture.options.CaptureOptions for live sides (default LIVE_OPTIONS).
    interleave: porter.capture.interleaved.InterleaveOptions for the live headline's timing.
    target_dtype / target_autocast: a precision port, the target captured in that dtype or under
    torch.autocast to it (porter.capture.precision).
    target_model: the target ran a rewrite of model in another framework (a JAX port): both
    factories run here for the suspects' local errors and ops (porter.accuracy.rewrite).
    keep_analysis: False renders the reports only after the inputs and the analysis are
    dropped (the first item returned is then None): the CLI's peak memory.
    """
    from porter.capture.options import CaptureOptions
    from porter.pipeline.inputs import resolve_pair

    cat = catalogue_from(catalogue)  # a bad catalogue fails before minutes of capture
    check_output_dir(out_dir)  # so does a bad -o
    t0 = time.perf_counter()
    with resolve_pair(source, target, out_dir, model=model, target_model=target_model,
                      options=capture_options or CaptureOptions(**LIVE_OPTIONS), interleave=interleave,
                      target_dtype=target_dtype, target_autocast=target_autocast, progress=progress) as pair:
        t1 = time.perf_counter()
        d, doc = build(pair.source, pair.target, Path(out_dir), t0=t1, model=pair.model, catalogue=cat,
                       progress=progress, seconds={"read": t1 - t0}, paired_timing=pair.paired_timing,
                       live=pair.live, target_model=pair.target_model, **kwargs)
    if not keep_analysis:
        del d, pair  # the inputs and the analysis, before the reports' parsed diagnosis.json
        gc.collect()
        d = None
    return d, finish(doc, report, progress, t1)
