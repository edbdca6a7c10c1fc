"""What the two ways of measuring local error share (porter.accuracy.shadow: every module
live; porter.accuracy.suspects: the suspects' saved calls): the record they fill, the
precision port they run under, a module run alone without the forward's hooks, and the
op-level replay inside a module that introduces error (porter.accuracy.replay).
"""

from __future__ import annotations

import collections
import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from porter.accuracy.precision import PrecisionVerdict, op_verdict
from porter.accuracy.replay import record_ops, replay_ops
from porter.analysis.accuracy import NAN_METRICS, ErrorMetrics, error_metrics
from porter.analysis.opcost import canonical_dtype
from porter.bundles.bundle import Bundle
from porter.capture.precision import DTYPES
from porter.targets import get_stack
from porter.targets.base import module_path, tensor_leaves

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


def one_line(exc: BaseException) -> str:
    """An exception as one short line: a module that fails is listed among many, not fatal."""
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


def precision_port(source: Bundle, target: Bundle, model: Any | None, dtype: str) -> Port | None:
    """The port when the two sides ran different dtypes (None otherwise). The target's modules
    run cast only when the MODEL given here is in another dtype than the target ran."""
    src, tgt = run_dtype(source), run_dtype(target)
    if src == tgt:
        return None
    if model is not None and getattr(model, "program", None) is not None:
        model = None  # a JAX program's modules are not run alone here: the port is not judged
    rec = target.manifest.get("precision") or {}
    if rec.get("autocast"):
        return Port(dtype, None, str(rec["autocast"]) if model is not None else "", str(rec.get("autocast_device") or "cpu"))
    cast = DTYPES.get(tgt) if model is not None and DTYPES.get(tgt) not in (None, model.dtype) else None
    return Port(dtype, cast)


def record_verdict(local: LocalRun, path: str, run: Callable[[], PrecisionVerdict | None]) -> None:
    """The precision verdict run() gives, or why there is none, on local."""
    try:
        v = run()
    except Exception as exc:  # noqa: BLE001 - a module that will not run in float64 is listed, not fatal
        local.no_verdict[path] = f"float64 run failed: {one_line(exc)}"
        return
    if v is None:
        local.no_verdict[path] = "outputs do not line up (no floating-point leaves, or shapes differ)"
    else:
        local.verdicts[path] = v


def target_stack(model: Any, target: Bundle) -> tuple[Any, str, str]:
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


def ops_for(local: LocalRun, path: str, mod: torch.nn.Module, args: Any, kwargs: Any, stack: Any, device: str,
             tol: float, port: Port | None = None, arrived: tuple[Any, Any] | None = None) -> None:
    """A module's aten ops replayed one at a time on the target (in the first TOP modules only:
    each replay costs a forward per op); a judged port's first op over tolerance gets its dtype verdict."""
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
            first["dtype_words"] = f"no dtype verdict: float64 run failed: {one_line(exc)}"
    local.op_rows += found["rows"]
    local.ops[path] = {"first_op": first, "skipped": found["skipped"], "ops": len(found["rows"])}


def _op_words(v: PrecisionVerdict) -> str:
    if v.within:
        return (f"as exact as {v.dtype} allows on the values it is handed (computed exactly on them rounded to "
                f"{v.dtype}, it loses as much): the formulation around it needs more than {v.dtype} holds; "
                "rewrite it or keep this part in float32")
    return (f"the op itself loses more than {v.dtype} implies on the target: its kernel or accumulation is less "
            f"precise than {v.dtype} storage")
