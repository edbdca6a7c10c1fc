"""Turn an exception from running a model on a stack into a one-line CaptureFailure
that names the op and the module, from whatever the exception carries:

* the module: the hook tracker's innermost running module (eager stacks); else the
  innermost `self` in the traceback that is one of the model's submodules; else dynamo's
  user-code stack (``exc.real_stack``: file/line frames, matched to the forward() source
  of the model's submodules, walking down from the root);
* the op: the dispatcher op the tracker saw fail, else the first op-like name in the message.
"""

from __future__ import annotations

import inspect
import re
import traceback
from typing import Any

import torch

from porter.targets.base import CaptureFailure, module_path

OP_PATTERNS = (
    re.compile(r"call_function ([\w.]+(?:::[\w.]+)?)"),  # dynamo: failed FX node
    re.compile(r"CustomOpDef\(([\w.:]+)\)"),
    re.compile(r"Could not run '([\w.:]+)'"),  # dispatcher: no kernel for this backend
    re.compile(r"\b(aten(?:::|\.)\w+(?:\.\w+)?)"),
    re.compile(r"\b([a-z_]\w*::\w+(?:\.\w+)?)"),
)


def op_from_message(text: str) -> str:
    for pat in OP_PATTERNS:
        m = pat.search(text)
        if m:
            return m.group(1)
    return ""


def _submodules(root: torch.nn.Module) -> dict[int, str]:
    return {id(m): module_path(n) for n, m in root.named_modules()}


def module_from_traceback(exc: BaseException, root: torch.nn.Module) -> str | None:
    """Innermost traceback frame whose `self` is one of root's modules (not root itself)."""
    known = _submodules(root)
    found = None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        obj = frame.f_locals.get("self")
        if obj is not None and id(obj) in known and known[id(obj)]:
            found = known[id(obj)]
    return found


def _forward_span(mod: torch.nn.Module) -> tuple[str, int, int] | None:
    try:
        fn = type(mod).forward
        lines, start = inspect.getsourcelines(fn)
        return inspect.getsourcefile(fn) or "", start, start + len(lines) - 1
    except (OSError, TypeError):
        return None


def module_from_user_stack(frames: list[Any], root: torch.nn.Module) -> str | None:
    """Walk dynamo's user frames down the module tree; ambiguous instances are all named."""
    spans = {name: _forward_span(m) for name, m in root.named_modules()}
    current = [""]
    for fr in frames[1:]:
        hits = []
        for parent in current:
            prefix = f"{parent}." if parent else ""
            for name, span in spans.items():
                if name.startswith(prefix) and name != parent and span and span[0] == fr.filename and span[1] <= fr.lineno <= span[2]:
                    hits.append(name)
        if not hits:
            continue
        depth = min(h.count(".") for h in hits)
        current = [h for h in hits if h.count(".") == depth]
    named = [module_path(n) for n in current if n]
    if not named:
        return None
    return named[0] if len(named) == 1 else " or ".join(named[:3]) + (f" (+{len(named) - 3} more)" if len(named) > 3 else "")


def describe_failure(exc: BaseException, root: torch.nn.Module, stack: str, *, tracked_module: str | None = None,
                     tracked_op: str = "") -> CaptureFailure:
    text = str(exc)
    op = tracked_op or op_from_message(text)
    module = tracked_module or module_from_traceback(exc, root)
    if module is None and getattr(exc, "real_stack", None):
        module = module_from_user_stack(list(exc.real_stack), root)
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    where = f" in module {module}" if module else " (module unknown)"
    what = f"op {op}" if op else "the model"
    return CaptureFailure(
        f"{what} failed on the {stack} stack{where}: {type(exc).__name__}: {first[:300]}",
        op=op,
        module=module,
        hint="the failed capture bundle holds the full error text",
    )
