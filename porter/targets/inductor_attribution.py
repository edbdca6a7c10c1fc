"""Module paths for inductor-compiled code, from the compiler instead of hooks.

Hooks that open profiler ranges make dynamo break the graph at every module, which
changes the program measured; so the inductor stack leaves the model alone and asks the
compiler, while it compiles, which FX nodes each kernel call computes:

* inductor's provenance tracking (``config.trace.provenance_tracking_level = 1``) gives
  every kernel call site in the generated wrapper a debug handle
  (``# [Provenance debug handles] cpp_fused_gelu_6:14``) and records handle -> the
  post-grad FX nodes it computes. That map lives in ``torch._inductor.debug`` only for
  the duration of one compile, so a wrapping ``inner_compile`` copies it right after
  code generation, together with each post-grad node's ``nn_module_stack`` and the
  wrapper source. A kernel reused by several blocks has one handle per call site, so
  each call gets its own module.
* The rule for a call whose nodes span several modules: its module is the deepest
  common module path of its nodes, not counting nodes that an earlier call of the same
  graph already computed (inductor recomputes cheap producers, e.g. the embedding sum,
  inside later fused kernels; they belong to the first kernel that computes them). Nodes
  written in the root forward have path '' and so pull the call to the root (''). An extern
  call (a GEMM, the SDPA fallback) computes its own op's nodes only: its handle lists its
  inputs' producers too (own_nodes).
* Each post-grad node also names the op call of the model code it came from (node_calls:
  dynamo's source_fn_stack), and a kernel call takes its costliest node's (``ops.call``, the
  per-call identity porter.targets.call_tags defines). A kernel whose nodes come from two
  calls or more (a GELU written as eight eager ops, a bias add fused with the activation after
  it) also lists them (``ops.call_members``, each call's share of the nodes' estimated cost),
  so porter.analysis.op_calls splits its time among those calls.
* The profiled ops are then matched to the call sequence in order within each step;
  the ops a matched call launches inherit its module. A call whose nodes span modules
  also records them (``ops.members``) with each module's share of the nodes' estimated
  cost (node_cost: FX meta shapes, porter.core.elementcost per element), so the analysis can
  split the kernel's time where the other side measured nothing (porter.analysis.split_fused).
  A generated kernel that lists a convolution or matmul an extern call computes only lays out
  that op's input: the node costs nothing there and does not pull the kernel's module up
  (idle_nodes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import pandas as pd
import torch

from porter.core.elementcost import element_weight
from porter.core.schema import encode_call_members, encode_members
from porter.core.tags import common_path

HANDLE = re.compile(r"#\s*\[Provenance debug handles\]\s*(\S+:\d+)\s*$")
CALL = re.compile(
    r"^\s*(?:[\w, ]+=\s*)?(?:extern_kernels\.(?P<ext>\w+)|torch\.ops\.(?P<ns>\w+)\.(?P<op>\w+)(?:\.\w+)?"
    r"|aten\.(?P<aten>\w+)(?:\.\w+)?|(?P<cpp>cpp_\w+))\("
)
TRACE_CPP = re.compile(r"^graph_\d+_(cpp_\w+)$")
# the local dynamo reached the root module through: its own name (L['self'], L['fn']), or an
# element of a *args tuple (L['args'][0]) when the root's forward is a decorated wrapper taking
# (*args, **kwargs), as transformers' output decorators are
ROOT_LOCAL = re.compile(r"^L\[['\"]args['\"]\]\[\d+\]|^L\[['\"]\w+['\"]\]")
QUALIFIER = re.compile(r"\[['\"]?(\w+)['\"]?\]")


@dataclass(frozen=True)
class WrapperCall:
    callee: str  # as the profiler names it: 'aten::addmm', 'mkldnn::_linear_pointwise', 'cpp_fused_gelu_view_6'
    module: str  # '' when unknown or the root
    members: str = ""  # JSON [[module, op, share], ...] when its nodes span modules (schema ops.members)
    call: str = ""  # '<op>#<k>': the op call of its costliest node, when that node is in its module (ops.call)
    call_members: str = ""  # JSON [[module, '<op>#<k>', share], ...] when its nodes come from several calls


NO_SITE = WrapperCall("", "")  # a kernel call without a provenance handle


@dataclass
class RegionRecord:
    """What one compiled region's inductor compile knew, copied while it compiled."""

    source: str = ""
    handle_nodes: dict[str, list[str]] = field(default_factory=dict)  # 'cpp_fused_x:3' -> post-grad nodes
    node_modules: dict[str, str] = field(default_factory=dict)  # post-grad node -> module path
    node_costs: dict[str, tuple[str, float]] = field(default_factory=dict)  # post-grad node -> (op, estimated cost)
    node_calls: dict[str, str] = field(default_factory=dict)  # post-grad node -> '<op>#<k>' (node_calls)
    views: set[str] = field(default_factory=set)  # post-grad nodes that only alias their input (view_nodes)


def stack_path(qualified: str) -> str:
    """dynamo nn_module_stack name ("L['self'].blocks[0].attn", "L['fn'].0", "L['args'][0].model") ->
    'blocks/0/attn', '0', 'model'."""
    text = ROOT_LOCAL.sub("", qualified)
    text = QUALIFIER.sub(r".\1", text).replace("._modules.", ".").lstrip(".")
    return text.replace(".", "/")


def innermost_path(stack: dict) -> str | None:
    """The innermost nn_module_stack entry reached from the root's locals, as a path; None when
    every entry is a global (G['...'].fn: a module-level function dynamo traced as a module, as
    transformers' apply_rotary_pos_emb once read 'G/__import_transformers_dot_..._llama/
    apply_rotary_pos_emb', a path the eager source never has)."""
    for entry in reversed(list(stack.values())):
        name = str(entry[0])
        if not name.startswith("G["):
            return stack_path(name)
    return None


def node_modules(gm: torch.fx.GraphModule) -> dict[str, str]:
    """Graph node name -> innermost module path ('' for the root forward).

    Nodes a pattern rewrite made (e.g. the fused SDPA that replaces bmm-softmax-bmm) carry
    no nn_module_stack; each takes the deepest common module of its neighbours (inputs and
    users) that have one, so it is not pulled to the root.
    """
    out: dict[str, str] = {}
    unknown = []
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        path = innermost_path(stack) if stack else None
        if path is not None:
            out[node.name] = path
        elif node.op == "call_function":
            unknown.append(node)
        else:
            out[node.name] = ""
    for _ in range(2):  # a chain of rewritten nodes: the second round reaches its middle
        for node in unknown:
            known = [out[n.name] for n in (*node.all_input_nodes, *node.users) if out.get(n.name)]
            if known and node.name not in out:
                out[node.name] = common_path(known)
    for node in unknown:
        out.setdefault(node.name, "")
    return out


DYNAMO_SUFFIX = re.compile(r"_\d+$")


def node_calls(gm: torch.fx.GraphModule, modules: dict[str, str]) -> dict[str, str]:
    """Post-grad node -> the op call of the model's code it came from, '<op>#<k>'
    (porter.targets.call_tags): dynamo names each call it traced (``source_fn_stack``:
    ``linear_3``, ``add_2``, ``view``) and numbers calls of one op in program order, so the op is
    the name without its number and k ranks the call among that op's calls in the node's module
    (a node's ``aten::addmm`` and ``aten::view`` from one ``linear`` share its call). The module
    counted in is the node's own nn_module_stack (the root's when it has none); a node whose
    module node_modules inferred differently (from its neighbours) gets no call, as does a node
    a rewrite made (no source_fn_stack). Within one compiled region: a graph break inside a
    module restarts its counts."""
    from porter.core.opclass import canonical_op

    named: dict[str, tuple[str, str, int]] = {}  # node -> (module, op, dynamo number)
    for node in gm.graph.nodes:
        stack = node.meta.get("source_fn_stack")
        if node.op != "call_function" or not stack:
            continue
        scopes = node.meta.get("nn_module_stack")
        own = stack_path(list(scopes.values())[-1][0]) if scopes else ""
        name = str(stack[-1][0])
        m = DYNAMO_SUFFIX.search(name)
        number = int(m.group(0)[1:]) if m else 0
        named[node.name] = (own, canonical_op(DYNAMO_SUFFIX.sub("", name)), number)
    ranks: dict[tuple[str, str], list[int]] = {}
    for module, op, number in named.values():
        ranks.setdefault((module, op), []).append(number)
    order = {key: {n: k for k, n in enumerate(sorted(set(v)))} for key, v in ranks.items()}
    return {node: f"{op}#{order[(module, op)][number]}" for node, (module, op, number) in named.items()
            if modules.get(node, "") == module}


def _numel(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.numel())
    if isinstance(value, (tuple, list)):
        return sum(_numel(v) for v in value)
    return 0


MATMULS = ("mm", "addmm", "bmm", "baddbmm")


def node_cost(node: torch.fx.Node) -> float:
    """Estimated arithmetic of one FX node from its meta shapes (an estimate): matmuls
    2 * output elements * K, convolutions 2 * output elements * (weight elements / output
    channels), anything else its output elements times the op's cost per element
    (porter.core.elementcost: an erfinv is not an add)."""
    out = max(_numel(node.meta.get("val")), 1)
    name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
    tensors = [a.meta.get("val") for a in node.args if isinstance(a, torch.fx.Node)]
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    if name in MATMULS and tensors:
        lhs = tensors[-2] if len(tensors) >= 2 else tensors[0]
        return 2.0 * out * max(int(lhs.shape[-1]) if lhs.dim() else 1, 1)
    if _heavy(name) and len(tensors) >= 2 and tensors[1].dim():
        w = tensors[1]
        return 2.0 * out * max(w.numel() // max(int(w.shape[0]), 1), 1)
    length = int(tensors[0].shape[-1]) if tensors and tensors[0].dim() else 0
    return float(out) * element_weight(name, length)


def _heavy(name: str) -> bool:
    return name in MATMULS or "convolution" in name


def node_costs(gm: torch.fx.GraphModule) -> dict[str, tuple[str, float]]:
    return {n.name: (f"aten::{getattr(n.target, '__name__', str(n.target)).split('.')[0]}", node_cost(n))
            for n in gm.graph.nodes if n.op == "call_function"}


def view_nodes(gm: torch.fx.GraphModule) -> set[str]:
    """Nodes that only alias their input (view, permute, expand, split, getitem): inside a fused
    kernel they are indexing, no work of their own."""
    import operator

    unsafe = torch.ops.aten._unsafe_view.default
    return {n.name for n in gm.graph.nodes if n.op == "call_function"
            and (getattr(n.target, "is_view", False) or n.target in (unsafe, operator.getitem))}


def members_json(nodes: list[str], record: RegionRecord, idle: set[str] | frozenset[str] = frozenset()) -> str:
    """A call's nodes by module with their share of its estimated cost; '' within one module.
    A view costs nothing, as in handle_call_members: costed by its output's size, the dense
    layer's output view inside GPT-2's GELU kernel gave c_fc 11% of that kernel. Nor does an
    idle node (idle_nodes: a convolution an extern call computes)."""
    def member(n: str) -> tuple[str, str, float]:
        op, cost = record.node_costs.get(n, ("", 0.0))
        return record.node_modules.get(n, ""), op, 0.0 if n in record.views or n in idle else cost

    return encode_members(member(n) for n in nodes)


def fresh_nodes(record: RegionRecord) -> dict[str, list[str]]:
    """Call-site handle -> its nodes not computed by an earlier call (handles in call order). An
    extern call computes the nodes of its own op only (own_nodes)."""
    seen: set[str] = set()
    out = {}
    for handle in sorted(record.handle_nodes, key=lambda h: int(h.rsplit(":", 1)[1])):
        nodes = [n for n in record.handle_nodes[handle] if n in record.node_modules]
        if not _generated(handle):
            nodes = own_nodes(handle, nodes, record) or nodes
        out[handle] = [n for n in nodes if n not in seen] or nodes
        seen.update(nodes)
    return out


def extern_op(handle: str) -> str:
    """The op an extern call site runs: 'extern_kernels.mm:6' -> 'mm',
    'torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default:8' -> that op's name."""
    parts = handle.rsplit(":", 1)[0].split(".")
    if parts[:2] == ["torch", "ops"] and len(parts) >= 4:
        return parts[3]
    return parts[1] if len(parts) >= 2 and parts[0] in ("aten", "extern_kernels") else parts[-1]


def own_nodes(handle: str, nodes: list[str], record: RegionRecord) -> list[str]:
    """The nodes of an extern call's own op. Its handle also lists its inputs' producers: Llama's
    SDPA call lists the rotary embedding and the q/k/v views the fused kernel before it computed,
    so by the deepest-common rule the attention (and the allocations under it) went to the model."""
    op = extern_op(handle)
    return [n for n in nodes if record.node_costs.get(n, ("", 0.0))[0].rpartition("::")[2] == op]


def _generated(handle: str) -> bool:
    """A kernel inductor wrote (C++ or Triton), not an extern call (extern_kernels.convolution)."""
    return handle.startswith(("cpp_", "triton_"))


def idle_nodes(record: RegionRecord) -> dict[str, set[str]]:
    """Generated call-site handle -> the nodes it lists that an extern call computes (its own op:
    a matmul, a convolution, an SDPA): there the kernel only writes that op's input in the layout
    the extern call wants
    (resnet's BatchNorm+ReLU kernel lists the next convolution; priced at its FLOPs, that
    convolution took 98% of a kernel that does none of its arithmetic)."""
    heavy = lambda n: _heavy(record.node_costs.get(n, ("", 0.0))[0].rpartition("::")[2])  # noqa: E731
    extern = {n for h, nodes in record.handle_nodes.items() if not _generated(h)
              for n in (own_nodes(h, nodes, record) or [n for n in nodes if heavy(n)])}
    return {h: {n for n in nodes if n in extern} for h, nodes in record.handle_nodes.items() if _generated(h)}


def handle_modules(record: RegionRecord) -> dict[str, str]:
    """Call-site handle -> module, by the rule in the module docstring, over the nodes that do
    work (a view read in place does not pull the kernel up to the block holding both modules,
    nor does an idle node: idle_nodes)."""
    idle = idle_nodes(record)
    return {h: common_path([record.node_modules[n] for n in (_work(nodes, record, idle.get(h, set())) or nodes)])
            for h, nodes in fresh_nodes(record).items()}


def _work(nodes: list[str], record: RegionRecord, idle: set[str] | frozenset[str] = frozenset()) -> list[str]:
    return [n for n in nodes if n not in record.views and n not in idle]


def handle_members(record: RegionRecord) -> dict[str, str]:
    """Call-site handle -> members_json of its fresh nodes ('' within one module)."""
    idle = idle_nodes(record)
    return {h: members_json(nodes, record, idle.get(h, set())) for h, nodes in fresh_nodes(record).items()}


def _costliest(nodes: list[str], record: RegionRecord) -> str:
    return max(nodes, key=lambda n: record.node_costs.get(n, ("", 0.0))[1])


def handle_calls(record: RegionRecord) -> dict[str, str]:
    """Call-site handle -> the op call of its costliest fresh node, when that node names one and
    lies in the handle's own module (else none: a fused SDPA a rewrite made names no call, and
    must not take the call of the transpose feeding it)."""
    modules, idle = handle_modules(record), idle_nodes(record)
    out = {}
    for h, nodes in fresh_nodes(record).items():
        main = _costliest(_work(nodes, record, idle.get(h, set())) or nodes, record) if nodes else ""
        if main in record.node_calls and record.node_modules.get(main, "") == modules.get(h, ""):
            out[h] = record.node_calls[main]
    return out


def handle_call_members(record: RegionRecord) -> dict[str, str]:
    """Call-site handle -> its fresh nodes' op calls, each in its own module with its share of
    their estimated cost (porter.core.schema.encode_call_members; only handles of two calls or more).
    A view costs nothing (a dense layer's output ``view`` inside the GELU kernel after it is
    indexing there): its call is listed with share 0, so the GELU's call takes the kernel whole
    even when that view pulled the kernel's module up to the block holding both. Only when the
    costliest other node names a call: a kernel whose main work a rewrite made (a fused SDPA)
    would otherwise hand all its time to the small tagged ops around it."""
    out, idle = {}, idle_nodes(record)
    for h, nodes in fresh_nodes(record).items():
        work = _work(nodes, record, idle.get(h, set()))
        if not work or _costliest(work, record) not in record.node_calls:
            continue
        encoded = encode_call_members((record.node_modules.get(n, ""), record.node_calls.get(n, ""),
                                       0.0 if n in record.views or n in idle.get(h, ()) else
                                       record.node_costs.get(n, ("", 0.0))[1]) for n in nodes)
        if encoded:
            out[h] = encoded
    return out


def handle_sites(record: RegionRecord) -> dict[str, WrapperCall]:
    """Call-site handle -> what its kernel call carries (callee left blank: the wrapper names it)."""
    modules, members = handle_modules(record), handle_members(record)
    calls, call_members = handle_calls(record), handle_call_members(record)
    return {h: WrapperCall("", modules[h], members.get(h, ""), calls.get(h, ""), call_members.get(h, ""))
            for h in modules}


def parse_wrapper(source: str, sites: dict[str, WrapperCall]) -> list[WrapperCall]:
    """Kernel calls of the generated call(), in order, each with what its handle's site carries."""
    calls, pending = [], ""
    body = source.split("\ndef call(", 1)[-1]
    for line in body.splitlines():
        m = HANDLE.search(line)
        if m:
            pending = m.group(1)
            continue
        c = CALL.match(line)
        if not c:
            continue
        if c.group("ext"):
            callee = f"aten::{c.group('ext')}"
        elif c.group("ns"):
            callee = f"{c.group('ns')}::{c.group('op')}"
        elif c.group("aten"):
            callee = f"aten::{c.group('aten')}"
        else:
            callee = c.group("cpp")
        calls.append(replace(sites.get(pending, NO_SITE), callee=callee))
        pending = ""
    return calls


def region_calls(records: list[RegionRecord]) -> list[WrapperCall]:
    return [call for r in records for call in parse_wrapper(r.source, handle_sites(r))]


def recording_inner(records: list[RegionRecord]) -> Callable[..., Any]:
    """An inner_compile for compile_fx that runs compile_fx_inner unchanged and keeps a RegionRecord.

    Needs ``trace.provenance_tracking_level = 1`` and the FX/AOT caches off (a cache hit
    generates no code, so nothing would be recorded).
    """
    from torch._inductor.compile_fx import compile_fx_inner

    def inner(gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:
        out = compile_fx_inner(gm, example_inputs, **kwargs)
        import torch._inductor.debug as inductor_debug

        modules = node_modules(gm)  # gm now holds the post-grad graph the handles name
        records.append(RegionRecord(
            source=getattr(out, "source_code", "") or "",
            handle_nodes={k: list(v) for k, v in inductor_debug._inductor_triton_kernel_to_post_grad_node_info.items()},
            node_modules=modules,
            node_costs=node_costs(gm),
            node_calls=node_calls(gm, modules),
            views=view_nodes(gm),
        ))
        return out

    return inner


def attribute(ops: pd.DataFrame, calls: list[WrapperCall]) -> pd.DataFrame:
    """Set ops.module for ops matched (in order, per step) to wrapper calls; descendants inherit."""
    if not calls:
        return ops
    callees = {c.callee for c in calls}
    ops = ops.copy()
    parent = dict(zip(ops["op_id"], ops["parent_id"]))
    module: dict[int, str] = {}
    members: dict[int, str] = {}
    call_members: dict[int, str] = {}
    tagged: dict[int, str] = {}
    for _, group in ops[ops["step"] >= 0].sort_values("start_us").groupby("step", sort=False):
        i = 0
        for row in group.itertuples():
            m = TRACE_CPP.match(row.name)
            name = m.group(1) if m else row.name
            if name not in callees or _inside(row.op_id, parent, module):
                continue
            j = next((k for k in range(i, len(calls)) if calls[k].callee == name), None)
            if j is None:
                continue
            module[row.op_id] = calls[j].module
            if calls[j].members:
                members[row.op_id] = calls[j].members
            if calls[j].call:
                tagged[row.op_id] = calls[j].call
            if calls[j].call_members:
                call_members[row.op_id] = calls[j].call_members
            i = j + 1

    def resolve(op_id: int) -> str:
        seen = op_id
        while seen != -1:
            if seen in module:
                return module[seen]
            seen = parent.get(seen, -1)
        return ""
    found = ops["op_id"].map(resolve)
    ops["module"] = ops["module"].where(ops["module"] != "", found)
    ops["members"] = ops["op_id"].map(members).fillna("") if members else ops.get("members", "")
    if call_members:  # on the matched op only: what it launched is inside its time already
        ops["call_members"] = ops["op_id"].map(call_members).fillna("")
    if tagged:  # the call of a matched op, inherited by what it launched (same walk as the module)
        def call_of(op_id: int) -> str:
            seen = op_id
            while seen != -1:
                if seen in module:
                    return tagged.get(seen, "")
                seen = parent.get(seen, -1)
            return ""
        ops["call"] = ops["op_id"].map(call_of)
    return ops


def _inside(op_id: int, parent: dict[int, int], matched: dict[int, str]) -> bool:
    p = parent.get(op_id, -1)
    while p != -1:
        if p in matched:
            return True
        p = parent.get(p, -1)
    return False
