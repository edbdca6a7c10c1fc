"""The tag protocol between porter's live capture (the writers, ``porter.targets``) and the
readers (``profilers``): the one definition of both sides.

Every capture stack names each module's work ``porter.module:<path>``. In torch traces the
range name holds the porter path as is (``blocks/0/attn``). In XLA op_name metadata '/'
separates scopes, so the xla stack writes the qualified name with its dots
(``porter.module:blocks.0.attn``, nested scopes per module); torch module names never contain
'.', so the dots map back losslessly. Under torchax each op a module's forward calls is also
tagged ``porter.call:<op>#<k>`` (its k-th call of that canonical op in the module).
"""

from __future__ import annotations

from typing import Iterable

MODULE_TAG = "porter.module:"
CALL_TAG = "porter.call:"
KERNEL_TAG = "porter.kernel:"  # a custom kernel (a Pallas call) that porter's JAX-program capture scoped
KERNEL_OP_PREFIX = "pallas_call("  # the framework op of every op inside a tagged kernel


def module_path(qualified_name: str) -> str:
    """named_modules() name -> porter module path ('blocks.0.attn' -> 'blocks/0/attn')."""
    return qualified_name.replace(".", "/")


def common_path(paths: list[str]) -> str:
    """Deepest module path containing every path ('' when they share none)."""
    if not paths:
        return ""
    parts = [p.split("/") if p else [] for p in paths]
    out = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        out.append(level[0])
    return "/".join(out)


def module_range(path: str) -> str:
    """The profiler range that tags a module's work in a torch trace."""
    return f"{MODULE_TAG}{path}"


def module_scope(qualified_name: str) -> str:
    """The jax.named_scope that tags a module's ops in HLO metadata ('porter.module:blocks.0.attn')."""
    return f"{MODULE_TAG}{qualified_name}"


def call_scope(op: str, index: int) -> str:
    """The scope name that tags the index-th call of (canonical) op within its module:
    ``porter.call:view#2``. The op is in the tag itself: the scope torchax opens next is not
    always the op's (a tensor constructor opens none)."""
    return f"{CALL_TAG}{op}#{index}"


def module_from_tags(components: Iterable[str]) -> str | None:
    """The porter path of the innermost tagged component, or None when none is tagged."""
    found = None
    for comp in components:
        if comp.startswith(MODULE_TAG):
            found = comp[len(MODULE_TAG):]
    return None if found is None else found.replace(".", "/")


def call_from_tags(components: Iterable[str]) -> tuple[str, str, int] | None:
    """(module path, canonical op, call index) of an op_name's scope components, from the
    innermost ``porter.call:<op>#<k>`` tag and the module tag around it; None when untagged."""
    module: str | None = None
    found = None
    for comp in components:
        if comp.startswith(MODULE_TAG):
            module = comp[len(MODULE_TAG):].replace(".", "/")
        elif comp.startswith(CALL_TAG) and module is not None:
            op, _, k = comp[len(CALL_TAG):].rpartition("#")
            if op and k.isdigit():
                found = (module, op, int(k))
    return found


def kernel_scope(name: str) -> str:
    """The scope around a custom kernel's ops: ``porter.kernel:add_kernel`` (its name, '/' kept out)."""
    return KERNEL_TAG + name.replace("/", "_")


def kernel_index(components: list[str]) -> int | None:
    """Where the outermost kernel tag sits among an op_name's scope components, or None."""
    return next((i for i, c in enumerate(components) if c.startswith(KERNEL_TAG)), None)


def kernel_op(component: str) -> str:
    """The framework op every op of a tagged kernel reads as: ``pallas_call(add_kernel)``."""
    return f"{KERNEL_OP_PREFIX}{component[len(KERNEL_TAG):]})"
