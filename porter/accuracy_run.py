"""Per-module (and per-op) accuracy of a diagnosis: what porter.analysis.accuracy compares, gathered.

Memory stays a few activations whatever the model's depth; nothing is capped or skipped
silently (every module not compared is listed with its reason).

* propagated error: each bundle keeps a sketch of every module's output (exact norms, max
  |x|, NaN/Inf counts, and elements at fixed-seed positions that correspond on both
  sides, porter.targets.sketch); the sampled relative L2 carries its standard error. The
  model output is compared in full.
* local error, live (both stacks here, ``live=True``): one eager forward on the CPU records
  each module's actual call (positional and keyword tensors, other arguments, output
  pytree) and, as each module finishes, the target stack runs that module alone on exactly
  that call (Stack.run_call); the two outputs are compared and dropped.
* local error, bundles captured apart: the sketches locate the first module whose
  propagated error exceeds tolerance (the suspect); ``porter capture ... --modules SUSPECT``
  saves full calls for it on both hosts, and each side's output is checked against the
  module replayed in float32 eager on the CPU on that side's own recorded input.
* down to the op: inside each module that introduces error, porter.accuracy_ops replays its
  aten ops one at a time on the target.
* optional fp64 oracle: the model in float64, eager on the CPU, sketched at the same
  positions; each module and the output get porter.analysis.accuracy.oracle_verdict.

The block it returns is diagnosis.json's `accuracy` (docs/diagnosis.md).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import torch

from porter.accuracy_ops import record_ops, replay_ops
from porter.analysis.accuracy import (
    INTRODUCES_SHARE, TOLERANCES, ErrorMetrics, NAN_METRICS, Sketches, compare_sketches, error_metrics, first_over,
    introducers, load_sketches, oracle_verdict, tolerance_for,
)
from porter.analysis.opcost import canonical_dtype
from porter.bundle import ACTIVATIONS, Bundle, has_activations
from porter.capture.options import OUTPUT_KEY
from porter.targets import get_stack
from porter.targets.base import first_float_tensor, module_hooks, module_path, tensor_leaves
from porter.targets.sketch import call_key, torch_sketch

OUTPUT = ""  # the model's output is the root module's output
TOP = 3  # findings lines, and modules replayed op by op
NOT_CALLED = "never called"  # containers and unused modules: nothing ran, so nothing to compare




def model_dtype(b: Bundle) -> str:
    model = b.manifest.get("model")
    raw = model.get("dtype", "") if isinstance(model, dict) else ""
    return canonical_dtype(str(raw)) or "fp32"


def module_table(model: Any) -> dict[str, torch.nn.Module]:
    """Porter module path -> submodule, in the model's definition order (root excluded)."""
    return {module_path(n): m for n, m in model.module.named_modules() if n}


@contextlib.contextmanager
def hooks_suspended(root: torch.nn.Module) -> Iterator[None]:
    """No forward hooks in root's subtree for the duration: a module replayed (or compiled by
    itself) must not fire the recording hooks of the forward it was called from."""
    saved = []
    for m in root.modules():
        saved.append((m, m._forward_hooks, m._forward_pre_hooks))
        m._forward_hooks, m._forward_pre_hooks = collections.OrderedDict(), collections.OrderedDict()
    try:
        yield
    finally:
        for m, post, pre in saved:
            m._forward_hooks, m._forward_pre_hooks = post, pre


def tree_metrics(reference: Any, actual: Any) -> ErrorMetrics:
    """Error metrics over every floating tensor leaf of two output pytrees (same structure)."""
    ref = [t for t in tensor_leaves(reference) if t.is_floating_point()]
    got = [t for t in tensor_leaves(actual) if t.is_floating_point()]
    if len(ref) != len(got) or any(r.shape != g.shape for r, g in zip(ref, got)):
        raise ValueError(f"output structure differs: {[tuple(r.shape) for r in ref]} vs {[tuple(g.shape) for g in got]}")
    if not ref:
        return NAN_METRICS
    return error_metrics(torch.cat([r.detach().reshape(-1).double() for r in ref]),
                         torch.cat([g.detach().reshape(-1).double().cpu() for g in got]))


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


@dataclass
class LocalRun:
    """Local errors of the modules run alone, and what the op-level replay found."""

    how: str
    metrics: dict[str, ErrorMetrics] = field(default_factory=dict)
    not_run: dict[str, str] = field(default_factory=dict)  # module -> why no local error
    op_rows: list[dict[str, Any]] = field(default_factory=list)
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)  # module -> first op / skipped
    compile_log: list[str] = field(default_factory=list)


def _target_stack(model: Any, target: Bundle) -> tuple[Any, str, str]:
    """(stack, device, '') when the target's stack can run here, else (None, '', why not)."""
    tgt = target.manifest.get("target") or {}
    if not isinstance(tgt, dict) or not tgt.get("stack"):
        return None, "", "the target bundle does not name the stack it ran on"
    if model.fingerprint != (target.manifest.get("model") or {}).get("fingerprint"):
        return None, "", "the model given is not the model the target ran (fingerprints differ)"
    stack, device = get_stack(str(tgt["stack"])), str(tgt.get("device") or "auto")
    ok = stack.availability(device)
    if not ok.ok:
        return None, "", f"{stack.name} is not available here: {ok.reason}"
    return stack, device, ""


def _explained(path: str, errs: dict[str, float], tol: float) -> bool:
    """A descendant over tolerance carries at least INTRODUCES_SHARE of this module's error."""
    prefix = f"{path}/"
    return any(e > tol and e >= INTRODUCES_SHARE * errs[path] for m, e in errs.items() if m.startswith(prefix))


def _ops_for(local: LocalRun, path: str, mod: torch.nn.Module, args: Any, kwargs: Any, stack: Any, device: str,
             tol: float) -> None:
    if len(local.ops) >= TOP:
        local.ops[path] = {"first_op": None, "skipped": f"op-level replay is done for the first {TOP} modules only"}
        return
    with hooks_suspended(mod):
        calls = record_ops(mod, args, kwargs)
    found = replay_ops(path, calls, stack, device, tol)
    local.op_rows += found["rows"]
    local.ops[path] = {"first_op": found["first_op"], "skipped": found["skipped"], "ops": len(found["rows"])}


def live_local(model: Any, target: Bundle, tol: float, progress: Callable[[str], None]) -> LocalRun:
    """Every called module alone on the target, fed its actual recorded call, compared as it
    finishes and dropped; modules over tolerance (not explained by a child) replayed op by op."""
    stack, device, why = _target_stack(model, target)
    if stack is None:
        return LocalRun(how=why)
    if stack.no_module_runs:
        return LocalRun(how=f"{stack.name}: {stack.no_module_runs}")
    tgt_text = (target.manifest.get("target") or {}).get("text") or stack.name
    local = LocalRun(how=f"each module alone on {tgt_text}, fed its call recorded from a float32 eager CPU forward")
    root = model.module.to("cpu").eval()
    mods = module_table(model)
    errs: dict[str, float] = {}
    progress(f"accuracy: {len(mods)} modules one by one on {tgt_text} (shadow mode, compared as they finish)")
    log = getattr(stack, "compile_log", None)
    if isinstance(log, list):
        log.clear()

    def on_call(path: str, args: Any, kwargs: Any, output: Any) -> None:
        if path in local.metrics or path in local.not_run:
            return  # a shared module: its first call is compared
        if first_float_tensor(output) is None:
            local.not_run[path] = "its output holds no floating-point tensor"
            return
        mod = mods[path]
        try:
            with hooks_suspended(mod):
                got = stack.run_call(mod, args, kwargs, device)
            m = tree_metrics(output, got)
        except Exception as exc:  # noqa: BLE001 - a module the target cannot run alone is listed, not fatal
            local.not_run[path] = f"running it alone on {stack.name} failed: {_one_line(exc)}"
            return
        local.metrics[path] = m
        errs[path] = m.rel_l2
        if m.rel_l2 > tol and not _explained(path, errs, tol):
            progress(f"accuracy: {path} is over tolerance; replaying its ops on {stack.name}")
            _ops_for(local, path, mod, args, kwargs, stack, device, tol)

    with torch.no_grad(), module_hooks(root, on_call=on_call):
        root(*model.example_inputs)
    for path, mod in mods.items():
        if path not in local.metrics and path not in local.not_run:
            local.not_run[path] = ("a container (ModuleList/ModuleDict) that is never called"
                                   if isinstance(mod, (torch.nn.ModuleList, torch.nn.ModuleDict)) else "never called by the forward")
    if isinstance(log, list):
        local.compile_log = list(log)
    return local


def _saved_calls(b: Bundle) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    f = b.path / ACTIVATIONS / "modules.safetensors"
    return dict(load_file(str(f))) if f.is_file() else {}


def _leaves(calls: dict[str, torch.Tensor], path: str, side: str) -> list[torch.Tensor]:
    out, i = [], 0
    while call_key(path, side, i) in calls:
        out.append(calls[call_key(path, side, i)])
        i += 1
    return out


def suspect_local(model: Any, source: Bundle, target: Bundle, suspects: list[str], tol: float,
                  progress: Callable[[str], None]) -> LocalRun:
    """Local error of the suspects whose full calls both bundles saved (capture --modules).

    Each side's saved output is checked against the module replayed in float32 eager on the
    CPU on that side's own saved input; the call's structure (keyword names, non-tensor
    arguments) comes from an eager forward of the model here, its tensors from the bundle.
    The target's error is the module's local error; the source's is kept beside it."""
    src_calls, tgt_calls = _saved_calls(source), _saved_calls(target)
    saved = [p for p in suspects if _leaves(src_calls, p, "out") and _leaves(tgt_calls, p, "out")]
    local = LocalRun(how="suspects only: each side's saved output against the module replayed in float32 eager on "
                         "the CPU on that side's own saved input")
    for p in suspects:
        if p not in saved:
            local.not_run[p] = "suspect without full tensors in both bundles: capture both with --modules " + p
    if not saved:
        return local
    progress(f"accuracy: replaying {len(saved)} suspect module(s) on their saved inputs")
    root = model.module.to("cpu").eval()
    mods = module_table(model)
    shapes: dict[str, Any] = {}

    def on_call(path: str, args: Any, kwargs: Any, output: Any) -> None:
        if path in saved and path not in shapes:
            shapes[path] = torch.utils._pytree.tree_flatten((args, kwargs))

    with torch.no_grad(), module_hooks(root, on_call=on_call):
        root(*model.example_inputs)
    stack, device, _ = _target_stack(model, target)
    for path in saved:
        if path not in shapes:
            local.not_run[path] = "never called by the forward here"
            continue
        flat, spec = shapes[path]
        try:
            errs = {}
            for side, calls in (("source", src_calls), ("target", tgt_calls)):
                it = iter(_leaves(calls, path, "in"))
                args, kwargs = torch.utils._pytree.tree_unflatten(
                    [next(it) if isinstance(x, torch.Tensor) else x for x in flat], spec)
                with torch.no_grad(), hooks_suspended(mods[path]):
                    ref = mods[path](*args, **kwargs)
                errs[side] = tree_metrics(ref, _leaves(calls, path, "out"))
                if side == "source":
                    src_args = (args, kwargs)
        except Exception as exc:  # noqa: BLE001 - a replay that fails is listed, not fatal
            local.not_run[path] = f"replaying the saved call failed: {_one_line(exc)}"
            continue
        local.metrics[path] = errs["target"]
        if errs["target"].rel_l2 > tol and stack is not None:
            _ops_for(local, path, mods[path], *src_args, stack, device, tol)
        elif errs["target"].rel_l2 > tol:
            local.ops[path] = {"first_op": None, "skipped": "the target's stack is not available here to replay single ops"}
    return local


def _full_output(b: Bundle) -> torch.Tensor | None:
    from safetensors.torch import load_file

    f = b.path / ACTIVATIONS / "outputs.safetensors"
    return load_file(str(f)).get(OUTPUT_KEY) if f.is_file() else None


def fp64_sketches(model: Any) -> tuple[dict[str, np.ndarray], torch.Tensor | None]:
    """Sampled outputs of every module (same positions as the bundles' sketches) and the full
    model output of a float64 eager CPU run on the same inputs."""
    ref = copy.deepcopy(model.module).to("cpu").double().eval()
    samples: dict[str, np.ndarray] = {}

    def keep(path: str, args: Any, kwargs: Any, output: Any) -> None:
        t = first_float_tensor(output)
        if t is not None and path not in samples:
            samples[path] = torch_sketch(t)[1]

    inputs = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in model.example_inputs)
    with torch.no_grad(), module_hooks(ref, on_call=keep):
        final = first_float_tensor(ref(*inputs))
    return samples, final


def _oracle(df: pd.DataFrame, src: Sketches, tgt: Sketches, outputs: tuple[Any, Any], model: Any,
            dtype: str) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    ref_samples, ref_out = fp64_sketches(model)
    cols: dict[str, list[Any]] = {"oracle_source_error": [], "oracle_target_error": [], "oracle_bound": [], "oracle_passed": []}
    overall = None
    for module in df["module"]:
        v = None
        if module == OUTPUT and ref_out is not None and outputs[0] is not None and outputs[1] is not None:
            v = oracle_verdict(outputs[0], outputs[1], ref_out, dtype=dtype)
        elif module in ref_samples and module in src.samples and module in tgt.samples:
            v = oracle_verdict(src.samples[module], tgt.samples[module], ref_samples[module], dtype=dtype)
        cols["oracle_source_error"].append(v.source_error if v else math.nan)
        cols["oracle_target_error"].append(v.target_error if v else math.nan)
        cols["oracle_bound"].append(v.bound if v else math.nan)
        cols["oracle_passed"].append(v.passed if v else None)
        if v and module == OUTPUT:
            overall = {"passed": v.passed, "target_error": v.target_error, "source_error": v.source_error,
                       "bound": v.bound, "multiplier": v.multiplier, "reference": "the model in float64, eager on the CPU",
                       "rule": "err(target, fp64) <= multiplier * err(source, fp64) + tolerance / 10 (relative L2; "
                               "per module over the sketches' sampled elements, at the output over every element)"}
    return df.assign(**cols), overall


def _sci(x: float) -> str:
    return "n/a" if x is None or x != x else f"{x:.2e}"


def findings(df: pd.DataFrame, dtype: str, oracle: dict | None, local: LocalRun, not_compared: dict[str, str],
             suspects: list[str], capture_hint: str) -> list[str]:
    """The accuracy lines worth a reader's first glance, most important first. A search with
    gaps never says that no module introduces error: it says among how many it looked."""
    lines = []
    tol = tolerance_for(dtype)
    out = df[df["module"] == OUTPUT]
    if len(out):
        e = float(out["propagated_rel_l2"].iloc[0])
        lines.append(f"model output: relative L2 {e:.2e} against the source ({'within' if e <= tol else 'OUTSIDE'} "
                     f"the {dtype} tolerance {tol:.0e})")
    bad = df[df["introduces_error"]].assign(x=lambda d: d["local_rel_l2"] / d["tolerance"]).sort_values("x", ascending=False)
    for r in bad.head(TOP).itertuples():
        line = (f"{r.module or '(model)'} introduces error: local {_sci(r.local_rel_l2)} = {r.x:.0f}x tolerance "
                f"(propagated {_sci(r.propagated_rel_l2)})")
        op = (local.ops.get(r.module) or {}).get("first_op")
        if op:
            ins = ", ".join(f"{i['dtype']}{i['shape']}" + (f" in [{i['min']:.3g}, {i['max']:.3g}]" if "min" in i else "")
                            for i in op["inputs"][:3])
            line += (f"; op: model → {r.module} → #{op['index']} {op['op']}({ins}): error {_sci(op['chained_rel_l2'])} "
                     f"carried, {_sci(op['local_rel_l2'])} alone")
        elif r.module in local.ops and local.ops[r.module].get("skipped"):
            line += f"; op not located: {local.ops[r.module]['skipped']}"
        lines.append(line)
    measured = int(df["local_rel_l2"].notna().sum())
    gaps = len(not_compared) + len(local.not_run)
    if bad.empty and measured:
        worst = df.loc[df["local_rel_l2"].idxmax()]
        scope = "no module" if not gaps else f"no module among the {measured} with a local error"
        lines.append(f"{scope} introduces error; largest local error {worst['local_rel_l2']:.2e} in "
                     f"{worst['module'] or '(model)'}")
    if suspects:
        lines.append(f"propagated error first exceeds tolerance at {suspects[0]} (sampled, see propagated_rel_l2_se)"
                     + (f"; for its local error and op: {capture_hint}" if capture_hint else ""))
    if oracle:
        lines.append(f"fp64 oracle: target error {oracle['target_error']:.2e}, source error {oracle['source_error']:.2e}, "
                     f"bound {oracle['bound']:.2e}: {'pass' if oracle['passed'] else 'FAIL'}")
    if not measured:
        lines.append(f"local error not measured: {local.how}")
    if not_compared:
        first = next(iter(not_compared))
        lines.append(f"{len(not_compared)} module(s) not compared, e.g. {first}: {not_compared[first]} "
                     "(all in accuracy.not_compared)")
    if local.not_run:
        first = next(iter(local.not_run))
        lines.append(f"{len(local.not_run)} module(s) without a local error, e.g. {first}: {local.not_run[first]} "
                     "(all in accuracy.local.not_run)")
    return lines


def _local_cols(df: pd.DataFrame, local: LocalRun) -> pd.DataFrame:
    for k in NAN_METRICS.__dict__:
        df[f"local_{k}"] = [getattr(local.metrics.get(m, NAN_METRICS), k) for m in df["module"]]
    return df


def accuracy_block(source: Bundle, target: Bundle, model: Any | None = None, oracle: str | None = None,
                   progress: Callable[[str], None] = lambda msg: None, live: bool = False) -> dict[str, Any] | None:
    """diagnosis.json's `accuracy` block; None when a side saved no activations (trace mode).

    live: both bundles were captured by this diagnose, so the target's stack is here and
    each module's local error is measured in a streaming shadow run; otherwise the sketches
    point at suspects and local error needs their full calls (capture --modules)."""
    src_sk, tgt_sk = (load_sketches(source.path), load_sketches(target.path)) if has_activations(source) and has_activations(target) else (None, None)
    if src_sk is None or tgt_sk is None:
        return None
    dtype = max(model_dtype(source), model_dtype(target), key=tolerance_for)  # tolerance follows the coarser side
    tol = tolerance_for(dtype)
    prop, not_compared = compare_sketches(src_sk, tgt_sk)
    for side, b in (("source", source), ("target", target)):
        for m, why in ((b.manifest.get("activations") or {}).get("not_recorded") or {}).items():
            not_compared.setdefault(m, f"{side}: {why}")
    not_called = {m: why for m, why in not_compared.items() if NOT_CALLED in why}
    not_compared = {m: why for m, why in not_compared.items() if m not in not_called}
    outputs = (_full_output(source), _full_output(target))
    whole = None
    if outputs[0] is not None and outputs[1] is not None and outputs[0].shape == outputs[1].shape:
        whole = error_metrics(outputs[0], outputs[1])
        prop = pd.concat([prop, pd.DataFrame([{"module": OUTPUT, "propagated_rel_l2": whole.rel_l2, "propagated_rel_l2_se": 0.0,
                                               "sampled": int(outputs[0].numel()), "numel": int(outputs[0].numel())}])],
                         ignore_index=True)
    native = (target.manifest.get("activations") or {}).get("native_module_outputs", True)
    if not native and len(prop):  # the target saved eager module outputs: only its model output is its own
        inner = prop["module"] != OUTPUT
        prop.loc[inner, ["propagated_rel_l2", "propagated_rel_l2_se"]] = math.nan
    inner_prop = prop[prop["module"] != OUTPUT] if len(prop) else prop
    first = first_over(inner_prop, tol) if len(inner_prop) else None
    suspects = [first] if first else []
    tgt_text = (target.manifest.get("target") or {}).get("text", "TARGET")
    src_text = (source.manifest.get("target") or {}).get("text", "SOURCE")
    capture_hint = ""
    if model is None:
        local = LocalRun(how="no MODEL given: modules cannot be run alone")
    elif live:
        local = live_local(model, target, tol, progress)
    else:
        local = suspect_local(model, source, target, suspects, tol, progress)
        if suspects and not local.metrics:
            name = (source.manifest.get("model") or {}).get("source") or "MODEL"
            capture_hint = (f"porter capture {name} --on {src_text} --modules {suspects[0]} and the same --on {tgt_text}, "
                            "then diagnose the two bundles")
    if live and local.metrics and whole is not None:  # the whole model on the target, fed the source's input, is the target run
        local.metrics[OUTPUT] = whole
    for m in [m for m, why in local.not_run.items() if NOT_CALLED in why]:
        not_called.setdefault(m, local.not_run.pop(m))
    df = _local_cols(prop.reset_index(drop=True), local)
    df["tolerance"] = tol
    df["introduces_error"] = introducers(df, tol) if len(df) else pd.Series(dtype=bool)
    verdict = None
    if oracle == "fp64" and model is not None:
        progress("accuracy: float64 oracle run on the CPU")
        df, verdict = _oracle(df, src_sk, tgt_sk, outputs, model, dtype)
    t = TOLERANCES.get(dtype, TOLERANCES["fp32"])
    ops_found = {m: {"op": o["first_op"]["op"], "index": o["first_op"]["index"], "inputs": o["first_op"]["inputs"],
                     "chained_rel_l2": o["first_op"]["chained_rel_l2"], "local_rel_l2": o["first_op"]["local_rel_l2"],
                     "verdict": o["first_op"].get("verdict", "")} if o.get("first_op") else {"op": None, "why": o.get("skipped") or "no op over tolerance"}
                 for m, o in local.ops.items()}
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
        "modules_compared": int(len(df)),
        "not_compared": dict(sorted(not_compared.items())),
        "not_called": dict(sorted(not_called.items())),
        "suspects": suspects,
        "local": {"how": local.how, "ran": int(df["local_rel_l2"].notna().sum()) if len(df) else 0,
                  "not_run": dict(sorted(local.not_run.items())), "compile_log_lines": len(local.compile_log)},
        "modules": df.to_dict(orient="records"),
        "ops": ops_found,
        "op_rows": local.op_rows,
        "oracle": verdict,
        "findings": findings(df, dtype, verdict, local, not_compared, suspects, capture_hint),
        "_compile_log": local.compile_log,
    }
