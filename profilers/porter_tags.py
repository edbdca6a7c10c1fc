"""Module tags porter itself writes during live capture, read back by the readers.

Every capture stack names each module's work ``porter.module:<path>`` (see
porter.targets.base). In torch traces the range name holds the porter path as is
(``blocks/0/attn``). In XLA op_name metadata '/' separates scopes, so the xla stack writes
the qualified name with its dots (``porter.module:blocks.0.attn``, nested scopes per
module); torch module names never contain '.', so the dots map back losslessly.
"""

from __future__ import annotations

from typing import Iterable

MODULE_TAG = "porter.module:"  # == porter.targets.base.MODULE_RANGE_PREFIX (a test checks)


def module_from_tags(components: Iterable[str]) -> str | None:
    """The porter path of the innermost tagged component, or None when none is tagged."""
    found = None
    for comp in components:
        if comp.startswith(MODULE_TAG):
            found = comp[len(MODULE_TAG):]
    return None if found is None else found.replace(".", "/")


CALL_TAG = "porter.call:"  # == porter.targets.call_tags.CALL_TAG (a test checks)


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
