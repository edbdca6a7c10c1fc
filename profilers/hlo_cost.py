"""FLOPs and bytes of one executed HLO instruction, from the shapes in its HloProto.

An XLA trace names HLO ops (``fusion.12``, ``dot.3``), not tensors, so porter's shape-based
cost model (porter.analysis.opcost) has nothing to read. The program's HloProto does have
every instruction's result shape, its operands and a dot's contracting dimensions. Bytes:
what the executed instruction reads and writes once (its operands plus its result; for a
fusion, its parameters plus its result: the intermediates stay in registers or cache).
FLOPs, counted inside fusions too: a dot 2 * prod(result) * prod(contracting dims), a
convolution (or a cuDNN/MIOpen conv custom-call) 2 * prod(result) * (kernel elements / output
features), elementwise ops 1 per result element, reductions 1 per input element; data
movement 0; other library custom-calls unknown (NaN: porter.analysis.opcost estimates them
from the operand shapes this module also records).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

# xla PrimitiveType -> (bytes per element, dtype name porter.analysis.opcost understands)
_TYPES: dict[int, tuple[int, str]] = {
    1: (1, "bool"), 2: (1, "s8"), 3: (2, "s16"), 4: (4, "s32"), 5: (8, "s64"), 6: (1, "u8"),
    10: (2, "f16"), 11: (4, "f32"), 12: (8, "f64"), 16: (2, "bf16"), 15: (8, "c64"), 18: (16, "c128"),
    19: (1, "f8e5m2"), 20: (1, "f8e4m3fn"),
}
_MOVES = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "reshape", "transpose", "copy",
          "broadcast", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "reverse",
          "gather", "scatter", "iota", "copy-start", "copy-done", "after-all", "while",
          "conditional", "call", "fusion", "select-and-scatter", "sort", "rng-bit-generator"}
_REDUCES = {"reduce", "reduce-window", "reduce-precision"}


@dataclass(frozen=True)
class Shape:
    dims: tuple[int, ...]
    element_bytes: int
    dtype: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.dims) * self.element_bytes


def shapes_of(proto: Any) -> list[Shape]:
    """The array shapes in a ShapeProto (a tuple's leaves, in order)."""
    if len(proto.tuple_shapes):
        return [s for t in proto.tuple_shapes for s in shapes_of(t)]
    size, name = _TYPES.get(int(proto.element_type), (0, ""))
    return [Shape(tuple(int(d) for d in proto.dimensions), size, name)] if size else []


def _elements(shapes: list[Shape]) -> int:
    return sum(math.prod(s.dims) for s in shapes)


def _own_flops(ins: Any, operand: Callable[[int], list[Shape]]) -> float:
    op = ins.opcode.decode("utf-8", "replace")
    out = shapes_of(ins.shape)
    if op == "dot":
        lhs = operand(ins.operand_ids[0]) if len(ins.operand_ids) else []
        k = math.prod(lhs[0].dims[d] for d in ins.dot_dimension_numbers.lhs_contracting_dimensions) if lhs else 1
        return 2.0 * _elements(out) * k
    target = ins.custom_call_target.decode("utf-8", "replace").lower()
    if (op == "convolution" or (op == "custom-call" and "conv" in target)) and len(ins.operand_ids) >= 2 and out:
        kernel = operand(ins.operand_ids[1])
        if not kernel:
            return math.nan
        # output features: the kernel dim that is also an output dim (layouts differ by backend)
        features = max((d for d in kernel[0].dims if d in out[0].dims), default=kernel[0].dims[0])
        return 2.0 * math.prod(out[0].dims) * (math.prod(kernel[0].dims) / max(features, 1))
    if op == "custom-call":
        return math.nan  # a library call (GEMM, attention) whose shape contract porter does not read
    if op in _REDUCES:
        return float(sum(_elements(operand(i)) for i in ins.operand_ids[:1]))
    if op in _MOVES:
        return 0.0
    return float(_elements(out))  # elementwise arithmetic, compare, select, convert


class HloCosts:
    """Costs of a module's instructions by name; fusions sum their fused computation's FLOPs."""

    def __init__(self, module: Any) -> None:
        self._by_id = {int(i.id): i for c in module.computations for i in c.instructions}
        self._comps = {int(c.id): list(c.instructions) for c in module.computations}
        self._by_name = {i.name.decode("utf-8", "replace"): i for c in module.computations for i in c.instructions}

    def _operand(self, op_id: int) -> list[Shape]:
        ins = self._by_id.get(int(op_id))
        return shapes_of(ins.shape) if ins is not None else []

    def _flops(self, ins: Any, depth: int = 0) -> float:
        total = _own_flops(ins, self._operand)
        if depth < 8:
            for cid in ins.called_computation_ids:
                total += sum(self._flops(i, depth + 1) for i in self._comps.get(int(cid), ()))
        return total

    def cost(self, name: str) -> tuple[float, float, list[list[int]], list[str]] | None:
        """(flops, bytes, operand dims, operand dtypes) of the named instruction, None if unknown."""
        ins = self._by_name.get(name)
        if ins is None:
            return None
        operands = [s for i in ins.operand_ids for s in self._operand(i)]
        out = shapes_of(ins.shape)
        nbytes = float(sum(s.nbytes for s in operands) + sum(s.nbytes for s in out))
        return self._flops(ins), nbytes, [list(s.dims) for s in operands], [s.dtype for s in operands]
