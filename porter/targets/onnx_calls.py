"""Per-op-call identity of an exported ONNX model's nodes, from the exporter's FX graph.

torch.onnx.export (dynamo) writes on each ONNX node the FX node it came from
(``pkg.torch.onnx.fx_node``). The exported program's FX graph runs in program order and
each FX node names the torch function call it traced (``torch_fn``: ``('linear_3',
'builtin_function_or_method.linear')``; a batch norm's ``getitem`` shares its call), so an
op call's identity (module, canonical op, call index in the module: porter.targets.call_tags)
is the rank of that call among the module's calls of that op. The op is the torch function's
(``batch_norm``, as eager's profiler and torchax name it), not the aten op the graph was
decomposed to (``_native_batch_norm_legit_no_training``).

The exporter's own optimizer folds an eval-mode BatchNorm into the Conv before it
(onnxscript's rewrite), and the folded Conv carries the batch norm's metadata: charged by
it, each convolution's time landed on its BatchNorm's module. folded_members finds such
nodes (an ONNX Conv or Gemm/MatMul whose FX node is no convolution or matmul) and walks the
FX graph up to the compute node that was folded in, if that node has no ONNX node of its own
left (else the MatMul is the FX node's own lowering: scaled_dot_product_attention decomposes
into MatMuls, and the query linear two hops up is not folded into them); the node then
belongs to that call, and lists the calls it holds with their estimated cost (FX meta
shapes), like a fused node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from porter.core.opclass import canonical_op, classify_op
from porter.core.schema import encode_call_members, encode_members
from porter.targets.base import module_path

HEAVY_ONNX = {"Conv": "conv", "ConvTranspose": "conv", "Gemm": "matmul", "MatMul": "matmul"}
FOLD_DEPTH = 3  # FX hops from a folded node back to the compute it absorbed (bn <- conv; getitem <- bn <- conv)


@dataclass(frozen=True)
class FxCall:
    """One FX node's op call: module path, canonical op, call index, estimated cost."""

    module: str
    op: str
    k: int
    cost: float
    inputs: tuple[str, ...]

    @property
    def call(self) -> str:
        return f"{self.op}#{self.k}"


def _module(node: Any) -> str:
    stack = node.meta.get("nn_module_stack")
    return module_path(list(stack.values())[-1][0]) if stack else ""


def _op(node: Any) -> str:
    """The torch function the node traced (``function.batch_norm`` -> ``batch_norm``), else its target's."""
    fn = node.meta.get("torch_fn")
    if fn and len(fn) > 1:
        return canonical_op(str(fn[1]).rpartition(".")[2])
    return canonical_op(str(getattr(node.target, "__name__", node.target)))


def _numel(value: Any) -> int:
    shape = getattr(value, "shape", None)
    if shape is not None:
        n = 1
        for d in shape:
            n *= int(d)
        return n
    if isinstance(value, (tuple, list)):
        return sum(_numel(v) for v in value)
    return 0


def fx_cost(node: Any, op: str) -> float:
    """Estimated arithmetic of an FX node (an estimate): convolutions 2 * output * (weight /
    output channels), linear/matmul 2 * output * K, anything else its output elements."""
    out = max(_numel(node.meta.get("val")), 1)
    vals = [a.meta.get("val") for a in node.all_input_nodes]
    shapes = [tuple(v.shape) for v in vals if getattr(v, "shape", None) is not None]
    if op.startswith("conv") and len(shapes) >= 2 and shapes[1]:
        w = shapes[1]
        return 2.0 * out * max(_numel_of(w) // max(w[0], 1), 1)
    if op in ("linear", "matmul", "mm", "bmm", "addmm") and shapes and shapes[0]:
        return 2.0 * out * max(shapes[0][-1], 1)
    return float(out)


def _numel_of(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def fx_calls(graph_module: Any) -> dict[str, FxCall]:
    """FX node name -> its op call, for every call_function node (see the module doc)."""
    ranks: dict[tuple[str, str], dict[str, int]] = {}
    out: dict[str, FxCall] = {}
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        module, op = _module(node), _op(node)
        fn = node.meta.get("torch_fn")
        call_id = str(fn[0]) if fn else node.name  # a batch norm's getitem shares its call
        seen = ranks.setdefault((module, op), {})
        k = seen.setdefault(call_id, len(seen))
        out[node.name] = FxCall(module, op, k, fx_cost(node, op),
                                tuple(a.name for a in node.all_input_nodes if a.op == "call_function"))
    return out


def folded_chain(start: str, calls: dict[str, FxCall], want: str) -> list[str]:
    """FX nodes from start back to the nearest node of op class want (within FOLD_DEPTH hops,
    first inputs first); [] when there is none."""
    chain, cur = [start], start
    for _ in range(FOLD_DEPTH):
        ins = calls[cur].inputs if cur in calls else ()
        if not ins:
            return []
        cur = ins[0]
        chain.append(cur)
        if cur in calls and classify_op(calls[cur].op) == want:
            return chain
    return []


def annotate(proto: Any, scopes: dict[str, dict[str, str]], calls: dict[str, FxCall]) -> dict[str, dict[str, str]]:
    """The node scopes (porter.targets.onnxruntime.module_of_nodes) with each node's call from
    the FX graph, and each folded node moved to the compute call it absorbed with the calls it
    holds (``members``, ``call_members``)."""
    out = dict(scopes)
    lowered = {e["fx_node"] for e in scopes.values() if e.get("fx_node")}  # FX nodes that kept ONNX nodes of their own
    for node in proto.graph.node:
        entry = scopes.get(node.name)
        fx = calls.get(entry.get("fx_node", "")) if entry else None
        if fx is None:
            continue
        entry = {**entry, "call": fx.call}
        want = HEAVY_ONNX.get(node.op_type)
        if want and classify_op(fx.op) != want:
            names = folded_chain(entry["fx_node"], calls, want)
            # folded only if that compute has no ONNX node left: an attention's own MatMuls
            # (scaled_dot_product_attention decomposed) are not the linear before it
            chain = [calls[n] for n in names] if names and names[-1] not in lowered else []
            if chain:
                head = chain[-1]
                by_call: dict[tuple[str, str], FxCall] = {}  # a batch norm and its getitem: one call, its larger cost
                for c in chain:
                    if c.cost > by_call.get((c.module, c.call), c).cost or (c.module, c.call) not in by_call:
                        by_call[(c.module, c.call)] = c
                parts = by_call.values()
                entry.update(module=head.module, framework_op=f"aten::{head.op}", call=head.call,
                             members=encode_members((c.module, f"aten::{c.op}", c.cost) for c in parts),
                             call_members=encode_call_members((c.module, c.call, c.cost) for c in parts))
                entry = {k: v for k, v in entry.items() if v != ""}
        out[node.name] = entry
    return out
