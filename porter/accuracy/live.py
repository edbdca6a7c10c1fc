"""Per-module (and per-op) accuracy of a diagnosis: what porter.analysis.accuracy compares, gathered.

Memory stays a few activations whatever the model's depth; nothing is capped or skipped
silently (every module not compared is listed with its reason).

* propagated error (porter.accuracy.sketches): each bundle keeps a sketch of every module's
  output; the sampled relative L2 carries its standard error. The model output is compared in full.
* local error, live (both stacks here, ``live=True``; porter.accuracy.shadow): each module
  alone on the target stack, fed its actual call recorded from an eager CPU forward.
* local error, bundles captured apart (porter.accuracy.suspects): the sketches locate the
  first module whose propagated error exceeds tolerance (the suspect); ``porter capture ...
  --modules SUSPECT`` saves full calls for it on both hosts, each replayed here.
* down to the op: inside each module that introduces error, porter.accuracy.replay replays its
  aten ops one at a time on the target (porter.accuracy.local.ops_for).
* optional fp64 oracle: the model in float64, eager on the CPU, sketched at the same
  positions; each module and the output get porter.analysis.accuracy.oracle_verdict.
* precision ports (the target ran cast to another dtype, ``--dtype``): the target's module
  runs alone in that dtype, tolerances follow the coarser dtype, and each module (and the
  op named) is judged against float64 and against what its dtype implies
  (porter.accuracy.precision).

The block it returns is diagnosis.json's `accuracy` (docs/diagnosis.md); its findings lines
come from porter.accuracy.findings.
"""

from __future__ import annotations

from typing import Any, Callable

import pandas as pd

from porter.accuracy.findings import findings, precision_findings
from porter.accuracy.local import NOT_CALLED, OUTPUT, LocalRun, Port, hooks_suspended, precision_port, record_verdict, run_dtype
from porter.accuracy.precision import innermost_beyond, module_verdict
from porter.accuracy.rewrite import rewrite_local
from porter.accuracy.shadow import live_local
from porter.accuracy.sketches import oracle_columns, propagated
from porter.accuracy.suspects import suspect_local
from porter.analysis.accuracy import (
    INTRODUCES_SHARE, NAN_METRICS, ORACLE_MULTIPLIER, TOLERANCES, first_over, introducers, load_sketches, renamed_sketches,
    tolerance_for,
)
from porter.bundles.bundle import Bundle, has_activations


REWRITE_OP_KEYS = ("call", "source_op", "where", "matched_values")  # a rewrite's op (porter.accuracy.rewrite)
OP_VERDICT_KEYS = ("dtype_verdict", "dtype_implied_rel_l2", "dtype_bound", "fp64_source_rel_l2", "fp64_target_rel_l2",
                   "closer_to_fp64", "dtype_words")


def _verdict_cols(df: pd.DataFrame, local: LocalRun) -> tuple[pd.DataFrame, set[str]]:
    """Per module: the precision verdict's columns, and beyond_dtype (innermost modules whose
    error is more than the dtype implies)."""
    keys = ("dtype_implied_rel_l2", "dtype_bound", "dtype_verdict", "fp64_source_rel_l2", "fp64_target_rel_l2",
            "closer_to_fp64")
    rows = [local.verdicts[m].row() if m in local.verdicts else {} for m in df["module"]]
    for k in keys:
        df[k] = [r.get(k) for r in rows]
    beyond = innermost_beyond(list(df["module"]), local.verdicts, INTRODUCES_SHARE)
    df["beyond_dtype"] = df["module"].isin(beyond)
    return df, beyond


def _precision_block(source: Bundle, target: Bundle, port: Port | None, local: LocalRun, beyond: set[str]) -> dict[str, Any] | None:
    if port is None:
        return None
    t = TOLERANCES.get(port.dtype, TOLERANCES["fp32"])
    return {"source_dtype": run_dtype(source), "target_dtype": run_dtype(target), "dtype": port.dtype,
            "autocast": port.autocast or None,
            "how": ((target.manifest.get("precision") or {}).get("how") or "the target bundle records another dtype than the source"),
            "tolerance": t.rel_l2, "tolerance_reason": t.reason,
            "judged": port.judged,
            "rule": (f"a module or op is within what {port.dtype} implies when its error against float64 is at most "
                     f"{ORACLE_MULTIPLIER.get(port.dtype, 2.0):g} x the error of computing it exactly on inputs, weights "
                     f"and output rounded to {port.dtype}, plus tolerance/10; above that, more than the dtype implies. "
                     "closer_to_fp64 names the side nearer the float64 run") if port.judged else
                    "not judged: no MODEL in the source's dtype to run in float64 here",
            "judged_modules": len(local.verdicts), "beyond_dtype": sorted(beyond),
            "more_than_dtype": sorted(m for m, v in local.verdicts.items() if not v.within),
            "no_verdict": dict(sorted(local.no_verdict.items()))}


def _local_cols(df: pd.DataFrame, local: LocalRun) -> pd.DataFrame:
    for k in NAN_METRICS.__dict__:
        df[f"local_{k}"] = [getattr(local.metrics.get(m, NAN_METRICS), k) for m in df["module"]]
    return df


def _rewrite_hint(source: Bundle, target: Bundle) -> str:
    names = [(b.manifest.get("model") or {}).get("source") or role for b, role in ((source, "MODEL"), (target, "REWRITE"))]
    return (f"porter diagnose {names[0]} --from {source.path} --to {target.path} --target-model {names[1]} "
            "(both factories run here)")


def _local_errors(source: Bundle, target: Bundle, model: Any | None, live: bool, suspects: list[str], tol: float,
                  port: Port | None, outputs: tuple[Any, Any], progress: Callable[[str], None],
                  mapping: dict[str, str] | None = None, target_model: Any | None = None) -> tuple[LocalRun, str]:
    """The local errors and, when the suspects' full calls are missing, the capture that saves
    them: none without a MODEL; live, every module (and, for a judged precision port, the
    whole model against float64); a rewrite (mapping), the suspects run here as the source's
    module and the rewrite's (target_model); else the suspects' saved calls."""
    if mapping:
        if model is None or target_model is None:
            return LocalRun(how="a rewrite: its modules run alone with MODEL and --target-model"), \
                (_rewrite_hint(source, target) if suspects else "")
        return rewrite_local(model, target_model, mapping, suspects, tol, progress), ""
    if model is None:
        return LocalRun(how="no MODEL given: modules cannot be run alone"), ""
    if getattr(model, "program", None) is not None:
        return LocalRun(how="a JAX program: its modules are compared by their outputs (propagated), not run alone yet"), ""
    if live:
        local = live_local(model, target, tol, progress, port)
        if port is not None and port.judged and local.metrics and outputs[0] is not None and outputs[1] is not None:
            progress("accuracy: the model in float64 on the CPU (precision oracle)")
            root = model.module
            with hooks_suspended(root):
                record_verdict(local, OUTPUT, lambda: module_verdict(root, model.example_inputs, {}, outputs[0], outputs[1],
                                                                     port.dtype, first_only=True))
        return local, ""
    local = suspect_local(model, source, target, suspects, tol, progress, port)
    if not suspects or local.metrics:
        return local, ""
    tgt_text = (target.manifest.get("target") or {}).get("text", "TARGET")
    src_text = (source.manifest.get("target") or {}).get("text", "SOURCE")
    name = (source.manifest.get("model") or {}).get("source") or "MODEL"
    rec = target.manifest.get("precision") or {}
    flag = f" --autocast {rec['autocast']}" if rec.get("autocast") else f" --dtype {rec['dtype']}" if rec.get("dtype") else ""
    return local, (f"porter capture {name} --on {src_text} --modules {suspects[0]} and the same --on {tgt_text}{flag}, "
                   "then diagnose the two bundles")


def _ops_found(local: LocalRun) -> dict[str, dict[str, Any]]:
    """Per module replayed op by op: the first op over tolerance (with its dtype verdict), or why none."""
    return {m: {"op": o["first_op"]["op"], "index": o["first_op"]["index"], "inputs": o["first_op"]["inputs"],
                "chained_rel_l2": o["first_op"]["chained_rel_l2"], "local_rel_l2": o["first_op"]["local_rel_l2"],
                "verdict": o["first_op"].get("verdict", ""),
                **{k: o["first_op"][k] for k in OP_VERDICT_KEYS + REWRITE_OP_KEYS if k in o["first_op"]}}
            if o.get("first_op") else {"op": None, "why": o.get("skipped") or "no op over tolerance"}
            for m, o in local.ops.items()}


def _rules(dtype: str, source: Bundle, target: Bundle, native: bool) -> dict[str, Any]:
    """The block's opening keys: the metric, the tolerances and how each error was measured."""
    t = TOLERANCES.get(dtype, TOLERANCES["fp32"])
    return {
        "metric": "relative L2",
        "dtype": dtype,
        "tolerance": t.rel_l2,
        "tolerance_reason": f"{dtype}: relative L2 {t.rel_l2:.0e} ({t.reason})",
        "tolerances": {k: {"rel_l2": v.rel_l2, "reason": v.reason} for k, v in TOLERANCES.items()},
        "rule": "a module introduces error when its local error is above tolerance, at least half its propagated "
                "error, and not explained by a module inside it",
        "source_activations": (source.manifest.get("activations") or {}).get("source", ""),
        "target_activations": (target.manifest.get("activations") or {}).get("source", ""),
        "propagated": ("per module, sampled (sketches: exact norms, max |x|, NaN/Inf; relative L2 from fixed-seed "
                       "element samples with its standard error); the model output in full" if native else
                       "at the model output only: the target's per-module outputs are not its own numerics "
                       "(see target_activations); local error is measured per module"),
    }


def accuracy_block(source: Bundle, target: Bundle, model: Any | None = None, oracle: str | None = None,
                   progress: Callable[[str], None] = lambda msg: None, live: bool = False,
                   target_model: Any | None = None) -> dict[str, Any] | None:
    """diagnosis.json's `accuracy` block; None when a side saved no activations (trace mode).

    live: both bundles were captured by this diagnose, so the target's stack is here and
    each module's local error is measured in a streaming shadow run; otherwise the sketches
    point at suspects and local error needs their full calls (capture --modules).
    target_model: the rewrite the target ran (its modules paired with model's by parameters)."""
    src_sk, tgt_sk = (load_sketches(source.path), load_sketches(target.path)) if has_activations(source) and has_activations(target) else (None, None)
    if src_sk is None or tgt_sk is None:
        return None
    mapping = (target.manifest.get("module_map") or {}).get("mapping") or {}
    if mapping:  # a rewrite's modules, in the source's names (porter.pipeline.diagnose.paired_by_parameters)
        tgt_sk = renamed_sketches(tgt_sk, mapping)
    dtype = max(run_dtype(source), run_dtype(target), key=tolerance_for)  # tolerance follows the coarser side
    tol = tolerance_for(dtype)
    port = precision_port(source, target, model, dtype)
    p = propagated(source, target, src_sk, tgt_sk)
    prop, not_compared, not_called, outputs = p.frame, p.not_compared, p.not_called, p.outputs
    inner_prop = prop[prop["module"] != OUTPUT] if len(prop) else prop
    first = first_over(inner_prop, tol) if len(inner_prop) else None
    suspects = [first] if first else []
    local, capture_hint = _local_errors(source, target, model, live, suspects, tol, port, outputs, progress,
                                        mapping, target_model)
    if live and local.metrics and p.whole is not None:  # the whole model on the target, fed the source's input, is the target run
        local.metrics[OUTPUT] = p.whole
    for m in [m for m, why in local.not_run.items() if NOT_CALLED in why]:
        not_called.setdefault(m, local.not_run.pop(m))
    df = _local_cols(prop.reset_index(drop=True), local)
    df["tolerance"] = tol
    df["introduces_error"] = introducers(df, tol) if len(df) else pd.Series(dtype=bool)
    rewrite_ops = {m: o["first_op"]["call"] for m, o in local.ops.items() if (o.get("first_op") or {}).get("call")}
    if rewrite_ops:  # a rewrite's op named: the fix plan's rewrite_differs (porter.analysis.fixes)
        df["rewrite_op"] = df["module"].map(rewrite_ops)
    beyond: set[str] = set()
    if port is not None and port.judged:
        df, beyond = _verdict_cols(df, local)
    verdict = None
    if oracle == "fp64" and model is not None:
        progress("accuracy: float64 oracle run on the CPU")
        df, verdict = oracle_columns(df, src_sk, tgt_sk, outputs, model, dtype)
    return {
        **_rules(dtype, source, target, p.native),
        "modules_compared": int(len(df)),
        "not_compared": dict(sorted(not_compared.items())),
        "not_called": dict(sorted(not_called.items())),
        "suspects": suspects,
        "local": {"how": local.how, "ran": int(df["local_rel_l2"].notna().sum()) if len(df) else 0,
                  "not_run": dict(sorted(local.not_run.items())), "compile_log_lines": len(local.compile_log)},
        "modules": df.to_dict(orient="records"),
        "ops": _ops_found(local),
        "op_rows": local.op_rows,
        "oracle": verdict,
        "precision": _precision_block(source, target, port, local, beyond),
        "findings": (precision_findings(df, port, local, beyond) if port is not None and port.judged else [])
                    + findings(df, dtype, verdict, local, not_compared, suspects, capture_hint,
                               {s: t for t, s in mapping.items()}),
        "_compile_log": local.compile_log,
    }
