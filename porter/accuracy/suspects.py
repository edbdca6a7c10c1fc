"""Local error from bundles captured apart: each side saved its suspects' full calls
(``porter capture ... --modules SUSPECT``), and each side's saved output is checked against
the module replayed in float32 eager on the CPU on that side's own saved input.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from porter.accuracy.local import (
    LocalRun, Port, hooks_suspended, module_table, one_line, ops_for, record_verdict, target_stack, tree_metrics,
)
from porter.accuracy.precision import module_verdict
from porter.bundles.bundle import ACTIVATIONS, Bundle
from porter.capture.precision import cast_tree
from porter.targets.base import module_hooks
from porter.targets.sketch import call_key


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
    stack, device, _ = target_stack(model, target)
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
                    record_verdict(local, path, lambda: module_verdict(mods[path], args, kwargs, ref,
                                                                 _leaves(tgt_calls, path, "out"), port.dtype))
        except Exception as exc:  # noqa: BLE001 - a replay that fails is listed, not fatal
            local.not_run[path] = f"replaying the saved call failed: {one_line(exc)}"
            continue
        local.metrics[path] = errs["target"]
        if errs["target"].rel_l2 > tol and stack is not None:
            ops_for(local, path, mods[path], *src_args, stack, device, tol, port)
        elif errs["target"].rel_l2 > tol:
            local.ops[path] = {"first_op": None, "skipped": "the target's stack is not available here to replay single ops"}
    return local
