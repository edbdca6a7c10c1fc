"""NVTX ranges of an Nsight Systems export: which are framework ops, which are module scopes.

PyTorch's `emit_nvtx` (and nsys `--pytorch=autograd-nvtx` / `autograd-shapes-nvtx`) writes
one range per op call, `aten::addmm, seq = 7, op_id = 12, sizes = [[8, 64], [64, 64]]`;
NCCL and nsys's MPI tracing write one per library call (`ncclSend`, `MPI_Send`). Those are
ops. Any other range a user pushed (`nvtx.range("encoder")`) is a module scope. FSDP's
`FSDP::pre_forward (blocks.3.attn)` .. `FSDP::post_forward (blocks.3.attn)` markers name
the module whose forward runs between them, so that stretch is a scope too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

_LIBRARY_OP = re.compile(r"^(nccl|rccl|MPI_|cuda|cublas|cudnn|NCCL)")
_FSDP = re.compile(r"^FSDP::(pre|post)_forward \((.+)\)$")


@dataclass(frozen=True)
class RangeText:
    name: str  # the op or scope name, annotations stripped
    is_op: bool
    input_shapes: str  # JSON list of input dims ('' when not recorded)


def _bracketed(text: str, at: int) -> str:
    """The balanced [...] starting at text[at] ('' when unbalanced)."""
    depth = 0
    for i in range(at, len(text)):
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        if depth == 0:
            return text[at:i + 1]
    return ""


def parse(text: str) -> RangeText:
    name, sep, rest = text.partition(", ")
    annotated = bool(sep) and " = " in rest
    shapes = ""
    at = rest.find("sizes = [") if annotated else -1
    if at >= 0:
        raw = _bracketed(rest, at + len("sizes = "))
        try:
            value = json.loads(raw) if raw else None
            shapes = json.dumps(value) if isinstance(value, list) else ""
        except ValueError:
            shapes = ""
    name = name if annotated else text
    is_op = annotated or "::" in name or bool(_LIBRARY_OP.match(name))
    return RangeText(name.strip() or text, is_op, shapes)


def fsdp_scopes(names: list[str], starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> list[tuple[str, int, int, int]]:
    """(module, start, end, thread) per FSDP forward: pre_forward's start to the matching
    post_forward's end on the same thread; a forward without its post is left out."""
    open_: dict[tuple[int, str], list[int]] = {}
    out = []
    order = np.argsort(starts, kind="stable")
    for i in order:
        m = _FSDP.match(names[i])
        if not m:
            continue
        key = (int(threads[i]), m.group(2))
        if m.group(1) == "pre":
            open_.setdefault(key, []).append(int(i))
        elif open_.get(key):
            j = open_[key].pop()
            out.append((m.group(2).replace(".", "/"), int(starts[j]), int(ends[i]), key[0]))
    return out
