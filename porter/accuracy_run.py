"""Per-module accuracy of a live diagnosis: what porter.analysis.accuracy compares, gathered.

* propagated error: the target capture's saved module outputs against the source's
  (both bundles' activations/, keyed by module path; the model output under "");
* local error (shadow mode): every module run alone on the target stack
  (Stack.run_module), fed the input the source run recorded for it;
* optional fp64 oracle: the model in float64, eager on the CPU, same inputs; each module
  and the output get porter.analysis.accuracy.oracle_verdict.

The block it returns is diagnosis.json's `accuracy` (docs/diagnosis.md).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import pandas as pd
import torch

from porter.analysis.accuracy import TOLERANCES, compare_modules, load_activations, oracle_verdict, shadow_run, tolerance_for
from porter.bundle import Bundle, has_activations
from porter.capture.options import INPUT_KEY, OUTPUT_KEY
from porter.analysis.opcost import canonical_dtype
from porter.targets import get_stack
from porter.targets.base import first_tensor, module_hooks, module_path

OUTPUT = ""  # the model's output is the root module's output
TOP = 3


def _keyed(tensors: dict[str, Any]) -> dict[str, Any]:
    """Module path -> tensor, the model output under "" and the model input left out."""
    return {(OUTPUT if k == OUTPUT_KEY else k): v for k, v in tensors.items() if k != INPUT_KEY}


def model_dtype(b: Bundle) -> str:
    model = b.manifest.get("model")
    raw = model.get("dtype", "") if isinstance(model, dict) else ""
    return canonical_dtype(str(raw)) or "fp32"


def module_table(model: Any) -> dict[str, torch.nn.Module]:
    """Porter module path -> submodule, in the model's definition order (root excluded)."""
    return {module_path(n): m for n, m in model.module.named_modules() if n}


def local_outputs(model: Any, target: Bundle, inputs: dict[str, Any],
                  progress: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, str], str]:
    """Each module alone on the target's stack: (outputs, failures, why not run at all or '')."""
    tgt = target.manifest.get("target") or {}
    if not isinstance(tgt, dict) or not tgt.get("stack"):
        return {}, {}, "the target bundle does not name the stack it ran on"
    if model.fingerprint != (target.manifest.get("model") or {}).get("fingerprint"):
        return {}, {}, "the model given is not the model the target ran (fingerprints differ)"
    stack, device = get_stack(str(tgt["stack"])), str(tgt.get("device") or "auto")
    if stack.no_module_runs:
        return {}, {}, f"{stack.name}: {stack.no_module_runs}"
    ok = stack.availability(device)
    if not ok.ok:
        return {}, {}, f"{stack.name} is not available here: {ok.reason}"
    progress(f"accuracy: {len(inputs)} modules one by one on {tgt.get('text') or stack.name} (shadow mode)")
    run = shadow_run(module_table(model), inputs, lambda m, x: stack.run_module(m, (x,), device))
    return run.outputs, run.failures, ""


def fp64_outputs(model: Any) -> dict[str, torch.Tensor]:
    """Every module's output (and the model's under "") of a float64 eager CPU run, same inputs."""
    ref = copy.deepcopy(model.module).to("cpu").double().eval()
    outs: dict[str, torch.Tensor] = {}

    def keep(path: str, args: Any, output: Any) -> None:
        t = first_tensor(output)
        if t is not None:
            outs[path] = t.detach().clone()

    inputs = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in model.example_inputs)
    with torch.no_grad(), module_hooks(ref, on_output=keep):
        final = first_tensor(ref(*inputs))
    if final is not None:
        outs[OUTPUT] = final
    return outs


def _oracle(df: pd.DataFrame, src: dict, tgt: dict, ref: dict, dtype: str) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    cols = {"oracle_source_error": [], "oracle_target_error": [], "oracle_bound": [], "oracle_passed": []}
    overall = None
    for module in df["module"]:
        v = oracle_verdict(src[module], tgt[module], ref[module], dtype=dtype) if module in ref else None
        cols["oracle_source_error"].append(v.source_error if v else math.nan)
        cols["oracle_target_error"].append(v.target_error if v else math.nan)
        cols["oracle_bound"].append(v.bound if v else math.nan)
        cols["oracle_passed"].append(v.passed if v else None)
        if v and module == OUTPUT:
            overall = {"passed": v.passed, "target_error": v.target_error, "source_error": v.source_error,
                       "bound": v.bound, "multiplier": v.multiplier, "reference": "the model in float64, eager on the CPU",
                       "rule": "err(target, fp64) <= multiplier * err(source, fp64) + tolerance / 10 (relative L2)"}
    return df.assign(**cols), overall


def _sci(x: float) -> str:
    return "n/a" if x is None or x != x else f"{x:.2e}"


def findings(df: pd.DataFrame, dtype: str, oracle: dict | None, skipped: str, failures: dict[str, str]) -> list[str]:
    """The accuracy lines worth a reader's first glance, most important first."""
    lines = []
    out = df[df["module"] == OUTPUT]
    tol = tolerance_for(dtype)
    if len(out):
        e = float(out["propagated_rel_l2"].iloc[0])
        lines.append(f"model output: relative L2 {e:.2e} against the source ({'within' if e <= tol else 'OUTSIDE'} "
                     f"the {dtype} tolerance {tol:.0e})")
    bad = df[df["introduces_error"]].assign(x=lambda d: d["local_rel_l2"] / d["tolerance"]).sort_values("x", ascending=False)
    for r in bad.head(TOP).itertuples():
        lines.append(f"{r.module or '(model)'} introduces error: local {_sci(r.local_rel_l2)} = {r.x:.0f}x tolerance "
                     f"(propagated {_sci(r.propagated_rel_l2)})")
    if bad.empty and df["local_rel_l2"].notna().any():
        worst = df.loc[df["local_rel_l2"].idxmax()]
        lines.append(f"no module introduces error; largest local error {worst['local_rel_l2']:.2e} in "
                     f"{worst['module'] or '(model)'}")
    if oracle:
        lines.append(f"fp64 oracle: target error {oracle['target_error']:.2e}, source error {oracle['source_error']:.2e}, "
                     f"bound {oracle['bound']:.2e}: {'pass' if oracle['passed'] else 'FAIL'}")
    if skipped:
        lines.append(f"local error not measured: {skipped}")
    if failures:
        lines.append(f"{len(failures)} module(s) could not run alone on the target, e.g. "
                     f"{next(iter(failures))}: {next(iter(failures.values()))}")
    return lines


def accuracy_block(source: Bundle, target: Bundle, model: Any | None = None, oracle: str | None = None,
                   progress: Callable[[str], None] = lambda msg: None) -> dict[str, Any] | None:
    """diagnosis.json's `accuracy` block; None when a side saved no activations (trace mode)."""
    if not (has_activations(source) and has_activations(target)):
        return None
    src_acts, tgt_acts = load_activations(source.path), load_activations(target.path)
    src, tgt = _keyed(src_acts.outputs), _keyed(tgt_acts.outputs)
    dtype = model_dtype(source)
    local: dict[str, Any] | None = None
    failures: dict[str, str] = {}
    skipped = "no MODEL given: modules cannot be run alone" if model is None else ""
    if model is not None:
        local, failures, skipped = local_outputs(model, target, {k: v for k, v in _keyed(src_acts.inputs).items() if k}, progress)
        if not skipped and OUTPUT in tgt:
            local[OUTPUT] = tgt[OUTPUT]  # the whole model on the target, fed the source's input, is the target run
    order = list(module_table(model)) + [OUTPUT] if model is not None else sorted(src, key=lambda k: (k == OUTPUT, k))
    src = {k: src[k] for k in sorted(src, key=lambda k: order.index(k) if k in order else len(order))}
    df = compare_modules(src, tgt, local if local else None, dtype=dtype)
    verdict = None
    if oracle == "fp64" and model is not None:
        progress("accuracy: float64 oracle run on the CPU")
        df, verdict = _oracle(df, src, tgt, fp64_outputs(model), dtype)
    native = (target.manifest.get("activations") or {}).get("native_module_outputs", True)
    if not native:  # the target saved eager module outputs: only its model output is its own
        inner = df["module"] != OUTPUT
        for col in [c for c in df.columns if c.startswith(("propagated_", "oracle_"))]:
            df[col] = df[col].astype(object if col == "oracle_passed" else float)
            df.loc[inner, col] = None if col == "oracle_passed" else math.nan
    tol = TOLERANCES.get(dtype, TOLERANCES["fp32"])
    return {
        "metric": "relative L2",
        "dtype": dtype,
        "tolerance": tol.rel_l2,
        "tolerance_reason": f"{dtype}: relative L2 {tol.rel_l2:.0e} ({tol.reason})",
        "tolerances": {k: {"rel_l2": v.rel_l2, "reason": v.reason} for k, v in TOLERANCES.items()},
        "rule": "a module introduces error when its local error is above tolerance, at least half its propagated "
                "error, and not explained by a module inside it",
        "source_activations": (source.manifest.get("activations") or {}).get("source", ""),
        "target_activations": (target.manifest.get("activations") or {}).get("source", ""),
        "propagated": ("per module" if native else "at the model output only: the target's per-module outputs "
                       "are not its own numerics (see target_activations); local error is measured per module"),
        "local": {"ran": int(df["local_rel_l2"].notna().sum()), "skipped": skipped or None, "failures": failures},
        "modules": df.to_dict(orient="records"),
        "oracle": verdict,
        "findings": findings(df, dtype, verdict, skipped, failures),
    }
