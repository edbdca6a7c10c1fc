"""A model's output, whatever pytree it is, as the flat tuple of its tensors: the one form
every stack returns and compares.

A stock transformers model returns a ``ModelOutput`` (``CausalLMOutputWithPast``: logits and a
``DynamicCache``); other models return dataclasses, dicts, lists, nested tuples with ``None``
in them. Eager and inductor run any of these, but a ``jax.jit`` function must return JAX
types and an ONNX graph returns tensors only, so the stacks that trace or export the model
(xla, ort, ``porter ops``' torch.export) run it under ``leaf_outputs``, which makes the
root's forward return ``output_leaves`` of what it returned. Only the root's forward
changes, for the duration: submodules, their hooks and their paths stay as they are, so
every stack records the same module paths, and the final output every stack reports is
``output_leaves(out)[0]`` in the same flatten order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Iterator

import torch
from torch.utils import _pytree as pytree


def output_leaves(value: Any) -> tuple[torch.Tensor, ...]:
    """Every tensor of an output pytree, in torch's pytree flatten order (a registered
    container such as ModelOutput, dict, list, tuple, namedtuple); a dataclass torch's pytree
    does not know is walked field by field. Other leaves (None, numbers, a KV cache object
    that is state rather than output) carry no tensor of the output and are left out."""
    out: list[torch.Tensor] = []
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            out.append(leaf)
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            for f in dataclasses.fields(leaf):
                out.extend(output_leaves(getattr(leaf, f.name)))
    return tuple(out)


@contextlib.contextmanager
def leaf_outputs(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """module's forward returns output_leaves of its output while the block runs (an
    instance attribute shadowing the class's forward, removed on the way out)."""
    had = "forward" in vars(module)
    before = vars(module).get("forward")
    inner = module.forward

    @functools.wraps(inner)  # keeps the signature: torch.export names the inputs from it
    def forward(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        return output_leaves(inner(*args, **kwargs))

    module.forward = forward
    try:
        yield module
    finally:
        if had:
            module.forward = before
        else:
            del module.forward
