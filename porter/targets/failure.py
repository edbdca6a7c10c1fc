"""Turn an exception from running a model on a stack into a one-line CaptureFailure
that names the op and the module, from whatever the exception carries:

* the module: the hook tracker's innermost running module (eager stacks); else the
  innermost `self` in the traceback that is one of the model's submodules; else dynamo's
  user-code stack (``exc.real_stack``: file/line frames, matched to the forward() source
  of the model's submodules, walking down from the root);
* the op: the dispatcher op the tracker saw fail, else the innermost op a stack's own
  dispatcher was handling in the traceback (torchax keeps it as ``func``), else the first
  op-like name in the message;
* the category, from the error's type and text and the op's namespace (CATEGORIES).
"""

from __future__ import annotations

import inspect
import re
import traceback
from typing import Any

import torch

from porter.core.errors import PorterError
from porter.core.tags import module_path

OP_PATTERNS = (
    re.compile(r"OpOverload\(op='([\w.]+)'"),  # torch.onnx dispatch: no ONNX function for this op
    re.compile(r"target=torch\.ops\.(\w+\.\w+)"),  # an FX node that failed to translate
    re.compile(r"call_function ([\w.]+(?:::[\w.]+)?)"),  # dynamo: failed FX node
    re.compile(r"CustomOpDef\(([\w.:]+)\)"),
    re.compile(r"Could not run '([\w.:]+)'"),  # dispatcher: no kernel for this backend
    re.compile(r"\b(aten(?:::|\.)\w+(?:\.\w+)?)"),
    re.compile(r"\b([a-z_]\w*::\w+(?:\.\w+)?)"),
)


NO_LOWERING = "no lowering"
DATA_DEPENDENT = "data-dependent shape"
CUSTOM_OP = "custom op without a lowering"
DTYPE = "dtype unsupported"
OTHER = "op error"  # none of the above: the op itself raised (shapes, values)
CATEGORIES = (NO_LOWERING, DATA_DEPENDENT, CUSTOM_OP, DTYPE, OTHER)
HINTS = {
    NO_LOWERING: "the stack has no lowering for this op: rewrite it with supported ops or register a lowering",
    DATA_DEPENDENT: "the op's output shape depends on tensor values, which a compiled program cannot express: "
                    "pad it to a static size or run it outside the compiled model",
    CUSTOM_OP: "register a lowering (a decomposition into aten ops, or a kernel) for the custom op on this stack",
    DTYPE: "the stack does not support this dtype here: cast to a supported one (float32, bfloat16)",
}
# (category, pattern over the exception type names and message of the whole chain), first match wins
_RULES = (
    (DATA_DEPENDENT, re.compile(r"Concretization|TracerBoolConversion|TracerArrayConversion|NonConcreteBooleanIndex|"
                                r"DynamicOutputShape|DataDependent|data-dependent|GuardOnDataDependent", re.I)),
    (DTYPE, re.compile(r"unknown type: torch\.\w+|unsupported (?:d)?type|dtype \S+ is not supported|"
                       r"not implemented for '\w+'|doesn't support tensors of type|"
                       r"KeyError: torch\.(?:complex|float|bfloat|u?int|bool|q)\w*", re.I)),
    (NO_LOWERING, re.compile(r"OperatorNotFound|has no lowering|no lowering|Could not run '|not implemented for|"
                             r"NotImplementedError|No ONNX function found|No decompositions registered", re.I)),
)
CORE_NAMESPACES = ("aten", "prims", "torch", "Tensor")


class CaptureFailure(PorterError):
    """The model does not run on the target: names the op and module when known."""

    def __init__(self, message: str, *, op: str = "", module: str | None = None, hint: str | None = None):
        self.op = op
        self.module = module
        self.detail = ""  # full error text (traceback) for the failed bundle
        self.category = ""  # one of CATEGORIES when known
        self.bundle: str | None = None  # the failed capture bundle written for it, where one was
        super().__init__(message, hint=hint)

    def one_line(self) -> str:
        """The message, naming the failed capture bundle only while it is on disk (a live
        diagnose captures into scratch folders that are removed on the way out)."""
        from pathlib import Path

        text = super().one_line()
        if self.bundle and (Path(self.bundle) / "manifest.json").is_file():
            text += f"; the failed capture bundle {self.bundle} holds the full error text"
        return text


def categorize(exc: BaseException, op: str) -> str:
    """Which of CATEGORIES an error is, from the stack's own exception (and its causes)."""
    text = chain_text(exc)
    for category, pattern in _RULES:
        if pattern.search(text):
            if category == NO_LOWERING and op and not op.startswith(CORE_NAMESPACES):
                return CUSTOM_OP
            return category
    if op and not op.startswith(CORE_NAMESPACES):
        return CUSTOM_OP  # a user op failed inside the stack for a reason of its own (torchax: no env)
    return OTHER


def exception_chain(exc: BaseException) -> list[BaseException]:
    """exc, then what it was raised from (its cause, else its context), outermost first."""
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def op_name(func: Any) -> str:
    """A dispatcher op or a torch function as porter names ops: 'aten::_unique2', 'mylib::fancy_act', 'Tensor.to'."""
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return func.name() if isinstance(func, torch._ops.OpOverload) else str(func).replace(".", "::", 1)
    qual = getattr(func, "__qualname__", "")
    if qual and getattr(func, "__module__", None) in (None, "torch", "torch._C", "torch.functional", "torch.nn.functional"):
        return qual.replace("TensorBase.", "Tensor.") if "." in qual else f"torch.{qual}"
    return ""


def op_from_frames(exc: BaseException) -> str:
    """The innermost op a dispatcher was handling when exc was raised (a frame local
    named func or op that is an op), '' when no frame holds one."""
    found = ""
    for e in exception_chain(exc):
        for frame, _ in traceback.walk_tb(e.__traceback__):
            for key in ("func", "op"):
                name = op_name(frame.f_locals.get(key))
                if name:
                    found = name
        if found:
            return found
    return found


def op_from_message(text: str) -> str:
    for pat in OP_PATTERNS:
        m = pat.search(text)
        if m:
            return _canonical(m.group(1))
    return ""


def chain_text(exc: BaseException) -> str:
    """The messages of exc and every exception it was raised from, one per line."""
    return "\n".join(f"{type(e).__name__}: {e}" for e in exception_chain(exc))


def module_from_fx_frames(exc: BaseException) -> str | None:
    """The module of the innermost FX node a converter was handling (a frame local named node)."""
    from porter.targets.inductor_attribution import stack_path

    found = None
    for e in exception_chain(exc):
        for frame, _ in traceback.walk_tb(e.__traceback__):
            node = frame.f_locals.get("node")
            stack = getattr(node, "meta", {}).get("nn_module_stack") if isinstance(node, torch.fx.Node) else None
            if stack:
                found = stack_path(list(stack.values())[-1][0])
        if found:
            return found
    return found


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
    """One line: the op, the module, the category (CATEGORIES) and the stack's own first
    line; the full chained traceback is kept on the failure as ``detail``."""
    text = str(exc)
    op = _canonical(tracked_op) or op_from_frames(exc) or op_from_message(text)
    module = tracked_module or module_from_traceback(exc, root)
    if module is None and getattr(exc, "real_stack", None):
        module = module_from_user_stack(list(exc.real_stack), root)
    category = categorize(exc, op)
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    where = f" in module {module}" if module else " (module unknown)"
    what = f"op {op}" if op else "the model"
    failure = CaptureFailure(
        f"{what} failed on the {stack} stack{where}: {category}: {type(exc).__name__}: {first[:300]}",
        op=op,
        module=module,
        hint=HINTS.get(category),
    )
    failure.category = category
    failure.detail = "".join(traceback.format_exception(exc))
    return failure


def _canonical(op: str) -> str:
    """'aten._unique2.default' (str of an OpOverload) -> 'aten::_unique2'."""
    if not op or "::" in op:
        return op
    parts = op.split(".")
    return f"{parts[0]}::{parts[1]}" if len(parts) >= 2 else op
