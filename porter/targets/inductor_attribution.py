"""Module paths for inductor-compiled code, from the compiler instead of hooks.

Hooks that open profiler ranges make dynamo break the graph at every module, which
changes the program measured; so the inductor stack leaves the model alone and joins:

* the dynamo (pre-grad) graph: node name -> module path, from ``nn_module_stack``;
* the generated wrapper code: the ordered calls of ``call()``, where each extern kernel
  (addmm, bmm, mkldnn linear, ...) is preceded by ``# ... Source Nodes: [a, b, c]``; the
  last source node is the one the call computes;
* the profiled ops, matched to that call sequence in order within each step.

Fused C++ kernels carry no source-node comment at their call site, so they stay without
a module; the share of device time that does get one is reported by the capture.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

SOURCE_NODES = re.compile(r"#.*Source Nodes: \[([^\]]*)\]")
CALL = re.compile(
    r"^\s*(?:extern_kernels\.(?P<ext>\w+)|torch\.ops\.(?P<ns>\w+)\.(?P<op>\w+)(?:\.\w+)?|aten\.(?P<aten>\w+)(?:\.\w+)?"
    r"|(?P<cpp>cpp_fused\w*|cpp_\w+))\("
)
TRACE_CPP = re.compile(r"^graph_\d+_(cpp_\w+)$")
QUALIFIER = re.compile(r"\[['\"]?(\w+)['\"]?\]")


@dataclass(frozen=True)
class WrapperCall:
    callee: str  # as the profiler names it: 'aten::addmm', 'mkldnn::_linear_pointwise', 'cpp_fused_gelu_view_6'
    source_node: str  # '' when the call site carries no source-node comment


def stack_path(qualified: str) -> str:
    """dynamo nn_module_stack name ("L['self'].blocks[0].attn") -> 'blocks/0/attn'."""
    text = qualified
    if text.startswith("L['self']"):
        text = text[len("L['self']"):]
    text = QUALIFIER.sub(r".\1", text).replace("._modules.", ".").lstrip(".")
    return text.replace(".", "/")


def node_modules(gm: torch.fx.GraphModule) -> dict[str, str]:
    """Dynamo graph node name -> innermost module path ('' for the root)."""
    out = {}
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack") or {}
        if stack:
            out[node.name] = stack_path(list(stack.values())[-1][0])
    return out


def parse_wrapper(source: str) -> list[WrapperCall]:
    """Kernel calls of the generated call(), in order, with their source node."""
    calls, pending = [], ""
    body = source.split("\ndef call(", 1)[-1]
    for line in body.splitlines():
        m = SOURCE_NODES.search(line)
        if m:
            nodes = [n.strip() for n in m.group(1).split(",") if n.strip()]
            pending = nodes[-1] if nodes else ""
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
        calls.append(WrapperCall(callee, pending))
        pending = ""
    return calls


def wrapper_sources(paths: list[Path]) -> list[WrapperCall]:
    calls: list[WrapperCall] = []
    for p in paths:
        try:
            calls.extend(parse_wrapper(Path(p).read_text()))
        except OSError:
            continue
    return calls


def attribute(ops: pd.DataFrame, calls: list[WrapperCall], nodes: dict[str, str]) -> pd.DataFrame:
    """Set ops.module for ops matched (in order, per step) to wrapper calls; descendants inherit."""
    if not calls:
        return ops
    callees = {c.callee for c in calls}
    ops = ops.copy()
    parent = dict(zip(ops["op_id"], ops["parent_id"]))
    module: dict[int, str] = {}
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
            module[row.op_id] = nodes.get(calls[j].source_node, "")
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
    return ops


def _inside(op_id: int, parent: dict[int, int], matched: dict[int, str]) -> bool:
    p = parent.get(op_id, -1)
    while p != -1:
        if p in matched:
            return True
        p = parent.get(p, -1)
    return False
