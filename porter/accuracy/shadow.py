"""Local error live (both stacks here): one eager forward on the CPU records each module's
actual call and, as each module finishes, the target stack runs that module alone on exactly
that call (Stack.run_call); the two outputs are compared and dropped, so memory stays a few
activations whatever the model's depth.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch

from porter.accuracy.local import (
    LocalRun, Port, hooks_suspended, module_table, one_line, ops_for, record_verdict, target_stack, tree_metrics,
)
from porter.accuracy.precision import module_verdict
from porter.analysis.accuracy import INTRODUCES_SHARE
from porter.bundles.bundle import Bundle
from porter.capture.precision import cast_tree, with_autocast
from porter.targets.base import first_float_tensor, module_hooks, module_path, tensor_leaves


def _explained(path: str, errs: dict[str, float], tol: float) -> bool:
    """A descendant over tolerance carries at least INTRODUCES_SHARE of this module's error."""
    prefix = f"{path}/"
    return any(e > tol and e >= INTRODUCES_SHARE * errs[path] for m, e in errs.items() if m.startswith(prefix))


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


def _target_copies(root: torch.nn.Module, mods: dict[str, torch.nn.Module], inputs: tuple[Any, ...],
                   port: Port | None, local: LocalRun) -> tuple[dict[str, torch.nn.Module], dict[str, list[torch.dtype]]]:
    """The modules the target runs, and (an autocast port) the dtypes each module's arguments
    arrive in. A precision port gets the target's copy of the model in its dtype, or with every
    forward under its autocast, made before any hook is installed; local.how says which."""
    if port is not None and port.cast_to is not None:
        local.how += f", cast to {port.dtype} (weights and floating arguments) for the target"
        return {module_path(n): m for n, m in copy.deepcopy(root).to(port.cast_to).named_modules() if n}, {}
    if port is not None and port.autocast:
        auto = with_autocast(copy.deepcopy(root), port.autocast, port.device_type, every=True)
        local.how += (f", each under torch.autocast({port.device_type!r}, {port.autocast}) on the target, its floating "
                      "arguments in the dtypes an autocast forward hands it")
        return {module_path(n): m for n, m in auto.named_modules() if n}, input_dtypes(auto, inputs)
    return mods, {}


def live_local(model: Any, target: Bundle, tol: float, progress: Callable[[str], None], port: Port | None = None) -> LocalRun:
    """Every called module alone on the target, fed its actual recorded call, compared as it
    finishes and dropped; modules over tolerance (not explained by a child) replayed op by op.
    A precision port runs each module's copy in port.cast_to on the call cast to it, and
    judges each module against float64 and its dtype (porter.accuracy.precision)."""
    stack, device, why = target_stack(model, target)
    if stack is None:
        return LocalRun(how=why)
    if stack.no_module_runs:
        return LocalRun(how=f"{stack.name}: {stack.no_module_runs}")
    tgt_text = (target.manifest.get("target") or {}).get("text") or stack.name
    local = LocalRun(how=f"each module alone on {tgt_text}, fed its call recorded from a float32 eager CPU forward")
    root = model.module.to("cpu").eval()
    mods = module_table(model)
    cast_to = port.cast_to if port is not None else None
    run_mods, arrives = _target_copies(root, mods, model.example_inputs, port, local)
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
            local.not_run[path] = f"running it alone on {stack.name} failed: {one_line(exc)}"
            return
        local.metrics[path] = m
        errs[path] = m.rel_l2
        if port is not None and port.judged:
            with hooks_suspended(mod):
                record_verdict(local, path, lambda: module_verdict(mod, args, kwargs, output, got, port.dtype))
        if m.rel_l2 > tol and not _explained(path, errs, tol):
            progress(f"accuracy: {path} is over tolerance; replaying its ops on {stack.name}")
            ops_for(local, path, mod, args, kwargs, stack, device, tol, port,
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
