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
* down to the op: inside each module that introduces error, porter.accuracy.replay replays its
  aten ops one at a time on the target.
* optional fp64 oracle: the model in float64, eager on the CPU, sketched at the same
  positions; each module and the output get porter.analysis.accuracy.oracle_verdict.
* precision ports (the target ran cast to another dtype, ``--dtype``): the target's module
  runs alone in that dtype, tolerances follow the coarser dtype, and each module (and the
  op named) is judged against float64 and against what its dtype implies
  (porter.accuracy.precision).

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

from porter.accuracy.replay import record_ops, replay_ops
from porter.accuracy.precision import PrecisionVerdict, innermost_beyond, module_verdict, op_verdict
from porter.analysis.accuracy import (
    INTRODUCES_SHARE, ORACLE_MULTIPLIER, TOLERANCES, ErrorMetrics, NAN_METRICS, Sketches, compare_sketches, error_metrics, first_over,
    introducers, load_sketches, oracle_verdict, tolerance_for,
)
from porter.analysis.opcost import canonical_dtype
from porter.bundles.bundle import ACTIVATIONS, Bundle, has_activations
from porter.capture.options import OUTPUT_KEY
from porter.capture.precision import DTYPES, cast_tree, with_autocast
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


def run_dtype(b: Bundle) -> str:
    """The dtype a side computed in: its autocast dtype (--autocast), else its model's dtype."""
    return str((b.manifest.get("precision") or {}).get("autocast") or "") or model_dtype(b)


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
    verdicts: dict[str, PrecisionVerdict] = field(default_factory=dict)  # precision ports: module -> verdict
    no_verdict: dict[str, str] = field(default_factory=dict)  # precision ports: module -> why no verdict


@dataclass(frozen=True)
class Port:
    """A precision port: the dtype tolerances and verdicts follow, and the torch dtype the
    target's modules and ops run in (None when the target runs the model's own dtype)."""

    dtype: str
    cast_to: torch.dtype | None = None
    autocast: str = ""  # an autocast port: the dtype torch.autocast lowers to ("" = a cast port)
    device_type: str = "cpu"  # torch.autocast's device_type for the target's local runs

    @property
    def judged(self) -> bool:
        return self.cast_to is not None or bool(self.autocast)

    def ops_context(self) -> Any:
        """Where the op-level replay runs: under the target's autocast, or as is."""
        return torch.autocast(device_type=self.device_type, dtype=DTYPES[self.autocast]) if self.autocast else contextlib.nullcontext()


def _verdict(local: LocalRun, path: str, run: Callable[[], PrecisionVerdict | None]) -> None:
    try:
        v = run()
    except Exception as exc:  # noqa: BLE001 - a module that will not run in float64 is listed, not fatal
        local.no_verdict[path] = f"float64 run failed: {_one_line(exc)}"
        return
    if v is None:
        local.no_verdict[path] = "outputs do not line up (no floating-point leaves, or shapes differ)"
    else:
        local.verdicts[path] = v


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
             tol: float, port: Port | None = None, arrived: tuple[Any, Any] | None = None) -> None:
    if len(local.ops) >= TOP:
        local.ops[path] = {"first_op": None, "skipped": f"op-level replay is done for the first {TOP} modules only"}
        return
    with hooks_suspended(mod):
        calls = record_ops(mod, args, kwargs)
    with port.ops_context() if port else contextlib.nullcontext():
        seed = ({id(a): b for a, b in zip(tensor_leaves((args, kwargs)), tensor_leaves(arrived)) if a is not b}
                if arrived is not None else None)
        found = replay_ops(path, calls, stack, device, tol, cast_to=port.cast_to if port else None, arrived=seed)
    first, call = found["first_op"], found.get("first_call")
    if port is not None and port.judged and first is not None and call is not None and found.get("first_output") is not None:
        try:
            v = op_verdict(call.op, call.args, call.kwargs, call.output, found["first_output"], port.dtype)
            if v is not None:
                first.update(v.row(), dtype_words=v.words(), verdict=_op_words(v))
        except Exception as exc:  # noqa: BLE001 - an op that will not run in float64 keeps its row without a verdict
            first["dtype_words"] = f"no dtype verdict: float64 run failed: {_one_line(exc)}"
    local.op_rows += found["rows"]
    local.ops[path] = {"first_op": first, "skipped": found["skipped"], "ops": len(found["rows"])}


def input_dtypes(root: torch.nn.Module, inputs: tuple[Any, ...]) -> dict[str, list[torch.dtype]]:
    """Per module path, the dtypes of the tensor leaves of its first call in one forward of root
    (an autocast forward hands a module bf16 where the float32 source handed float32)."""
    seen: dict[str, list[torch.dtype]] = {}

    def keep(path: str, args: Any, kwargs: Any, output: Any) -> None:
        seen.setdefault(path, [t.dtype for t in tensor_leaves((args, kwargs))])

    with torch.no_grad(), module_hooks(root, on_call=keep):
        root(*inputs)
    return seen


def as_dtypes(call: tuple[Any, Any], dtypes: list[torch.dtype]) -> tuple[Any, Any]:
    """(args, kwargs) with each floating tensor leaf cast to the dtype given for it (in leaf order)."""
    flat, spec = torch.utils._pytree.tree_flatten(call)
    it = iter(dtypes)
    out = []
    for x in flat:
        if isinstance(x, torch.Tensor):
            dt = next(it, x.dtype)
            out.append(x.to(dt) if x.is_floating_point() and dt.is_floating_point else x)
        else:
            out.append(x)
    return torch.utils._pytree.tree_unflatten(out, spec)


def _op_words(v: PrecisionVerdict) -> str:
    if v.within:
        return (f"as exact as {v.dtype} allows on the values it is handed (computed exactly on them rounded to "
                f"{v.dtype}, it loses as much): the formulation around it needs more than {v.dtype} holds; "
                "rewrite it or keep this part in float32")
    return (f"the op itself loses more than {v.dtype} implies on the target: its kernel or accumulation is less "
            f"precise than {v.dtype} storage")


def live_local(model: Any, target: Bundle, tol: float, progress: Callable[[str], None], port: Port | None = None) -> LocalRun:
    """Every called module alone on the target, fed its actual recorded call, compared as it
    finishes and dropped; modules over tolerance (not explained by a child) replayed op by op.
    A precision port runs each module's copy in port.cast_to on the call cast to it, and
    judges each module against float64 and its dtype (porter.accuracy.precision)."""
    stack, device, why = _target_stack(model, target)
    if stack is None:
        return LocalRun(how=why)
    if stack.no_module_runs:
        return LocalRun(how=f"{stack.name}: {stack.no_module_runs}")
    tgt_text = (target.manifest.get("target") or {}).get("text") or stack.name
    local = LocalRun(how=f"each module alone on {tgt_text}, fed its call recorded from a float32 eager CPU forward")
    root = model.module.to("cpu").eval()
    mods = module_table(model)
    cast_to = port.cast_to if port is not None else None
    # a precision port: the target's copy of the model in its dtype, or with every forward under
    # its autocast (made before any hook is installed)
    run_mods = mods
    arrives: dict[str, list[torch.dtype]] = {}  # an autocast port: the dtypes each module's arguments arrive in
    if cast_to is not None:
        run_mods = {module_path(n): m for n, m in copy.deepcopy(root).to(cast_to).named_modules() if n}
        local.how += f", cast to {port.dtype} (weights and floating arguments) for the target"
    elif port is not None and port.autocast:
        auto = with_autocast(copy.deepcopy(root), port.autocast, port.device_type, every=True)
        run_mods = {module_path(n): m for n, m in auto.named_modules() if n}
        arrives = input_dtypes(auto, model.example_inputs)
        local.how += (f", each under torch.autocast({port.device_type!r}, {port.autocast}) on the target, its floating "
                      "arguments in the dtypes an autocast forward hands it")
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
        run_args, run_kwargs = (cast_tree(args, cast_to), cast_tree(kwargs, cast_to)) if cast_to is not None else (args, kwargs)
        if path in arrives:
            run_args, run_kwargs = as_dtypes((args, kwargs), arrives[path])
        try:
            with hooks_suspended(run_mods[path]):
                got = stack.run_call(run_mods[path], run_args, run_kwargs, device)
            m = tree_metrics(output, got)
        except Exception as exc:  # noqa: BLE001 - a module the target cannot run alone is listed, not fatal
            local.not_run[path] = f"running it alone on {stack.name} failed: {_one_line(exc)}"
            return
        local.metrics[path] = m
        errs[path] = m.rel_l2
        if port is not None and port.judged:
            with hooks_suspended(mod):
                _verdict(local, path, lambda: module_verdict(mod, args, kwargs, output, got, port.dtype))
        if m.rel_l2 > tol and not _explained(path, errs, tol):
            progress(f"accuracy: {path} is over tolerance; replaying its ops on {stack.name}")
            _ops_for(local, path, mod, args, kwargs, stack, device, tol, port,
                     (run_args, run_kwargs) if path in arrives else None)

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
                  progress: Callable[[str], None], port: Port | None = None) -> LocalRun:
    """Local error of the suspects whose full calls both bundles saved (capture --modules).

    Each side's saved output is checked against the module replayed in float32 eager on the
    CPU on that side's own saved input; the call's structure (keyword names, non-tensor
    arguments) comes from an eager forward of the model here, its tensors from the bundle.
    The target's error is the module's local error; the source's is kept beside it. A side
    saved in another dtype (a precision port) is replayed on its input promoted to the
    model's dtype, and the target's output is judged against float64 and its dtype, the
    float32 replay standing in for the source (porter.accuracy.precision)."""
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
                args, kwargs = cast_tree(args, model.dtype), cast_tree(kwargs, model.dtype)
                with torch.no_grad(), hooks_suspended(mods[path]):
                    ref = mods[path](*args, **kwargs)
                errs[side] = tree_metrics(ref, _leaves(calls, path, "out"))
                if side == "source":
                    src_args = (args, kwargs)
            if port is not None and port.judged:
                with hooks_suspended(mods[path]):
                    _verdict(local, path, lambda: module_verdict(mods[path], args, kwargs, ref,
                                                                 _leaves(tgt_calls, path, "out"), port.dtype))
        except Exception as exc:  # noqa: BLE001 - a replay that fails is listed, not fatal
            local.not_run[path] = f"replaying the saved call failed: {_one_line(exc)}"
            continue
        local.metrics[path] = errs["target"]
        if errs["target"].rel_l2 > tol and stack is not None:
            _ops_for(local, path, mods[path], *src_args, stack, device, tol, port)
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


OP_VERDICT_KEYS = ("dtype_verdict", "dtype_implied_rel_l2", "dtype_bound", "fp64_source_rel_l2", "fp64_target_rel_l2",
                   "closer_to_fp64", "dtype_words")


def precision_port(source: Bundle, target: Bundle, model: Any | None, dtype: str) -> Port | None:
    """The port when the two sides ran different dtypes (None otherwise). The target's modules
    run cast only when the MODEL given here is in another dtype than the target ran."""
    src, tgt = run_dtype(source), run_dtype(target)
    if src == tgt:
        return None
    rec = target.manifest.get("precision") or {}
    if rec.get("autocast"):
        return Port(dtype, None, str(rec["autocast"]) if model is not None else "", str(rec.get("autocast_device") or "cpu"))
    cast = DTYPES.get(tgt) if model is not None and DTYPES.get(tgt) not in (None, model.dtype) else None
    return Port(dtype, cast)


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


def precision_findings(df: pd.DataFrame, port: Port, local: LocalRun, beyond: set[str]) -> list[str]:
    """The precision port's lines: the dtype and its tolerance, then each module beyond what
    the dtype implies (with the op named), or the statement that none is."""
    t = TOLERANCES.get(port.dtype, TOLERANCES["fp32"])
    runs = f"under torch.autocast to {port.autocast}" if port.autocast else port.dtype
    lines = [f"precision port: the target runs {runs}; tolerance relative L2 {t.rel_l2:.0e} ({t.reason}); "
             f"{len(local.verdicts)} modules judged against float64"]
    out = local.verdicts.get(OUTPUT)
    if out is not None:
        lines.append(f"model output: {out.words()}")
    for m in sorted(beyond, key=lambda m: -local.verdicts[m].target_error)[:TOP]:
        line = f"{m or '(model)'}: {local.verdicts[m].words()}"
        op = (local.ops.get(m) or {}).get("first_op")
        if op:
            line += (f"; op: model → {m} → #{op['index']} {op['op']}: {op.get('dtype_words') or 'no dtype verdict'}; "
                     f"{op.get('verdict', '')}")
        lines.append(line)
    if not beyond and local.verdicts:
        worst = max(local.verdicts.items(), key=lambda kv: kv[1].target_error / max(kv[1].bound, 1e-300))
        scope = "no module" if not local.no_verdict else f"no module among the {len(local.verdicts)} judged"
        lines.append(f"{scope} loses more than {port.dtype} implies; closest to its bound: {worst[0] or '(model)'} "
                     f"({worst[1].target_error:.2e} against bound {worst[1].bound:.2e})")
    if local.no_verdict:
        first = next(iter(local.no_verdict))
        lines.append(f"{len(local.no_verdict)} module(s) without a dtype verdict, e.g. {first}: {local.no_verdict[first]}")
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
    dtype = max(run_dtype(source), run_dtype(target), key=tolerance_for)  # tolerance follows the coarser side
    tol = tolerance_for(dtype)
    port = precision_port(source, target, model, dtype)
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
        local = live_local(model, target, tol, progress, port)
        if port is not None and port.judged and local.metrics and outputs[0] is not None and outputs[1] is not None:
            progress("accuracy: the model in float64 on the CPU (precision oracle)")
            root = model.module
            with hooks_suspended(root):
                _verdict(local, OUTPUT, lambda: module_verdict(root, model.example_inputs, {}, outputs[0], outputs[1],
                                                               port.dtype, first_only=True))
    else:
        local = suspect_local(model, source, target, suspects, tol, progress, port)
        if suspects and not local.metrics:
            name = (source.manifest.get("model") or {}).get("source") or "MODEL"
            rec = target.manifest.get("precision") or {}
            flag = f" --autocast {rec['autocast']}" if rec.get("autocast") else f" --dtype {rec['dtype']}" if rec.get("dtype") else ""
            capture_hint = (f"porter capture {name} --on {src_text} --modules {suspects[0]} and the same --on {tgt_text}{flag}, "
                            "then diagnose the two bundles")
    if live and local.metrics and whole is not None:  # the whole model on the target, fed the source's input, is the target run
        local.metrics[OUTPUT] = whole
    for m in [m for m, why in local.not_run.items() if NOT_CALLED in why]:
        not_called.setdefault(m, local.not_run.pop(m))
    df = _local_cols(prop.reset_index(drop=True), local)
    df["tolerance"] = tol
    df["introduces_error"] = introducers(df, tol) if len(df) else pd.Series(dtype=bool)
    beyond: set[str] = set()
    if port is not None and port.judged:
        df, beyond = _verdict_cols(df, local)
    verdict = None
    if oracle == "fp64" and model is not None:
        progress("accuracy: float64 oracle run on the CPU")
        df, verdict = _oracle(df, src_sk, tgt_sk, outputs, model, dtype)
    t = TOLERANCES.get(dtype, TOLERANCES["fp32"])
    ops_found = {m: {"op": o["first_op"]["op"], "index": o["first_op"]["index"], "inputs": o["first_op"]["inputs"],
                     "chained_rel_l2": o["first_op"]["chained_rel_l2"], "local_rel_l2": o["first_op"]["local_rel_l2"],
                     "verdict": o["first_op"].get("verdict", ""),
                     **{k: o["first_op"][k] for k in OP_VERDICT_KEYS if k in o["first_op"]}}
                 if o.get("first_op") else {"op": None, "why": o.get("skipped") or "no op over tolerance"}
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
        "precision": _precision_block(source, target, port, local, beyond),
        "findings": (precision_findings(df, port, local, beyond) if port is not None and port.judged else [])
                    + findings(df, dtype, verdict, local, not_compared, suspects, capture_hint),
        "_compile_log": local.compile_log,
    }
