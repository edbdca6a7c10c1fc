"""ONNX Runtime profiler JSON (`SessionOptions.enable_profiling`, `end_profiling()`).

The file is a Chrome-trace style JSON list. `cat == "Node"` events named
`<node name>_kernel_time` time one node's kernel, with args `op_name` (the ONNX op type),
`provider`, `input_type_shape`, `output_type_shape`; `cat == "Session"` events
`model_run` bracket each `InferenceSession.run` (one step each, numbered from 0).
With the CPU provider the CPU is the device: each node execution is one op and one
kernel of the same duration. (Events of `cat == "Kernel"`, written by GPU providers'
profilers, become kernels of the node named in `args.parent_name` when it ran in the same
step; this path has not been seen on real GPU output here.)

A profiling session's first runs may be warm-ups (the first pays for arena allocation);
ORT cannot switch profiling on after them, so the capturing stack writes a sibling
`<profile>.runs.json` ({"warmup_runs": N}) and the reader drops the first N `model_run`s and
everything in them: steps are the profiled runs only, as with torch.profiler's schedule.

Module paths are not in the profile. They come from the exported model: a sibling file
`<profile>.nodes.json` maps node name -> {"module": ..., "framework_op": ..., "call": ...}
(plus "members" and "call_members" for a node ORT fused from several); build it with
`node_scopes_from_onnx` (see there for how the namespace and FX node metadata are parsed).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from porter.core.errors import TraceFormatError
from porter.core.opclass import canonical_op, classify
from profilers.base import ReadResult, TraceMeta

if TYPE_CHECKING:  # loaded by read(): sniffing a file (every command that opens one) needs no pandas
    import pandas as pd
from profilers.jsonio import load_json, number

FORMAT = "onnxruntime"
KERNEL_SUFFIX = "_kernel_time"
NODES_SUFFIX = ".nodes.json"
RUNS_SUFFIX = ".runs.json"
DEVICE_TYPES = {"CUDAExecutionProvider": "cuda", "TensorrtExecutionProvider": "cuda",
                "ROCMExecutionProvider": "rocm", "MIGraphXExecutionProvider": "rocm"}
_SNIFF_MARKS = (b'"cat":"Session"', b'"cat": "Session"', b'"cat":"Node"', b'"cat": "Node"',
                KERNEL_SUFFIX.encode() + b'"', b'"model_loading_uri"')


def sniff(path: Path, head: bytes) -> bool:
    return head.lstrip()[:1] == b"[" and any(m in head for m in _SNIFF_MARKS)


@dataclass(frozen=True)
class Scope:
    module: str
    framework_op: str
    members: str = ""  # a fused node's members by module (schema ops.members), from the side file
    call: str = ""  # the op call the node came from, '<op>#<k>' (schema ops.call)
    call_members: str = ""  # a fused node's member calls (schema ops.call_members)


def scope_from_namespace(namespace: str) -> Scope:
    """Module path and aten op from a dynamo-exported node's `namespace` metadata.

    The string is `/`-separated frames `<qualified attr name>: <class>`, outermost first:
    `: pkg.M/blocks.0: pkg.Blk/blocks.0.fc: torch.nn.Linear/linear: aten.linear.default`.
    The first frame is the root module (empty name), the last the FX node (its target is
    the aten op), the ones between are the module chain. Each module contributes its
    attribute name relative to its parent (`blocks.0.fc` under `blocks.0` -> `fc`), so the
    path is `blocks.0/fc`, the same one-name-per-level path as hook-based scopes.
    The aten target `aten.linear.default` becomes `aten::linear` (overload dropped).
    """
    frames = [f.partition(": ") for f in namespace.split("/")]
    names = [name for name, _, _ in frames]
    parts, parent = [], ""
    for name in names[1:-1]:
        rel = name[len(parent) + 1:] if parent and name.startswith(parent + ".") else name
        parts.append(rel)
        parent = name
    target = frames[-1][2] if len(frames) > 1 else ""
    pieces = target.split(".")
    framework_op = f"{pieces[0]}::{pieces[1]}" if len(pieces) >= 2 and pieces[0] else target
    return Scope("/".join(parts), framework_op)


FX_NODE_KEY = "pkg.torch.onnx.fx_node"  # the exporter's FX node, '%linear_4 : [num_users=1] = call_function[...]'


def fx_node_name(text: str) -> str:
    """'%linear_4 : [num_users=1] = ...' -> 'linear_4'; '' when the text is not an FX node."""
    head = text.split(" ", 1)[0]
    return head[1:] if head.startswith("%") and len(head) > 1 else ""


def node_scopes_from_onnx(model: Any) -> dict[str, dict[str, str]]:
    """node name -> {"module", "framework_op", "call", "fx_node"} for every node with `namespace` metadata.

    ``call`` is the op call the node came from, '<op>#<k>' (porter.targets.call_tags): the
    exporter writes each node's FX node (FX_NODE_KEY; one ``linear`` becomes a MatMul and an
    Add sharing it), the FX graph runs in program order, so k ranks that FX node among the FX
    nodes of the same canonical op in the same module, in node order, as eager's calls are
    ranked in time order (porter.analysis.step_median.call_index). A capture that has the
    exported program names calls from its FX graph instead (porter.targets.onnx_calls). `model` is an
    onnx.ModelProto or a path to a .onnx file. The result is what `read` expects in
    `<profile>.nodes.json`.
    """
    import onnx  # optional dependency: only needed to build the side file

    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    out: dict[str, dict[str, str]] = {}
    ranks: dict[tuple[str, str], dict[str, int]] = {}
    for node in proto.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        if node.name and props.get("namespace"):
            scope = scope_from_namespace(props["namespace"])
            entry = {"module": scope.module, "framework_op": scope.framework_op}
            fx = fx_node_name(props.get(FX_NODE_KEY, ""))
            if fx:
                entry["fx_node"] = fx
            if fx and scope.framework_op:
                op = canonical_op(scope.framework_op)
                seen = ranks.setdefault((scope.module, op), {})
                entry["call"] = f"{op}#{seen.setdefault(fx, len(seen))}"
            out[node.name] = entry
    return out


def write_node_scopes(model: Any, profile: Path) -> Path:
    """Write `<profile>.nodes.json` next to an ORT profile; returns its path."""
    dest = Path(str(profile) + NODES_SUFFIX)
    dest.write_text(json.dumps(node_scopes_from_onnx(model), indent=1, sort_keys=True) + "\n")
    return dest


def load_node_scopes(profile: Path) -> dict[str, Scope]:
    """The side file's map, or {} when there is none; a damaged one is a TraceFormatError."""
    side = Path(str(profile) + NODES_SUFFIX)
    if not side.is_file():
        return {}
    doc = load_json(side, "node scope map")
    if not isinstance(doc, dict):
        raise TraceFormatError("node scope map is not a JSON object", path=side)
    out = {}
    for name, entry in doc.items():
        if isinstance(entry, dict):
            out[name] = Scope(*(str(entry.get(k, "") or "") for k in
                                ("module", "framework_op", "members", "call", "call_members")))
    return out


def write_warmup_runs(profile: Path, runs: int) -> Path:
    """Write `<profile>.runs.json`: the profile's first `runs` model_runs are warm-ups."""
    dest = Path(str(profile) + RUNS_SUFFIX)
    dest.write_text(json.dumps({"warmup_runs": int(runs)}) + "\n")
    return dest


def load_warmup_runs(profile: Path) -> int:
    """Warm-up runs named by the side file; 0 when there is none."""
    side = Path(str(profile) + RUNS_SUFFIX)
    if not side.is_file():
        return 0
    doc = load_json(side, "ORT run roles")
    n = doc.get("warmup_runs") if isinstance(doc, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise TraceFormatError("run roles file needs a non-negative integer warmup_runs", path=side)
    return n


@dataclass(frozen=True)
class Event:
    cat: str
    name: str
    ts: float
    dur: float
    args: dict


def events(doc: Any, path: Path) -> list[Event]:
    """The complete ('X') events, checked: a Node or Session event needs numeric ts and dur."""
    if not isinstance(doc, list):
        raise TraceFormatError("not an ONNX Runtime profile (expected a JSON list of events)", path=path)
    out = []
    for i, ev in enumerate(doc):
        if not isinstance(ev, dict):
            raise TraceFormatError(f"event {i} is {type(ev).__name__}, not an object", path=path)
        cat, name = ev.get("cat"), ev.get("name")
        if cat not in ("Node", "Session", "Kernel"):
            continue
        if not isinstance(name, str):
            raise TraceFormatError(f"event {i} ({cat}) has no name", path=path)
        ts, dur = number(ev.get("ts"), f"event {i} ts", path), number(ev.get("dur"), f"event {i} dur", path)
        if dur < 0:
            raise TraceFormatError(f"event {i} ({name}) has negative dur {dur}", path=path)
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        out.append(Event(cat, name, float(ts), float(dur), args))
    return out


def step_of(ts: float, runs: list[tuple[float, float]]) -> int:
    """Index of the model_run interval holding ts, -1 outside every run."""
    for i, (start, end) in enumerate(runs):
        if start <= ts <= end:
            return i
    return -1


def _shapes(args: dict) -> tuple[str, str]:
    """(input_shapes, dtypes) as JSON lists from args.input_type_shape [{dtype: dims}, ...]."""
    shapes, dtypes = [], []
    items = args.get("input_type_shape")
    if not isinstance(items, list):
        return "", ""
    for item in items:
        if isinstance(item, dict) and len(item) == 1:
            (dtype, dims), = item.items()
            shapes.append(dims if _is_shape(dims) else [])
            dtypes.append(str(dtype))
    return json.dumps(shapes), json.dumps(dtypes)


def _is_shape(dims: Any) -> bool:
    """A flat list of int64 sizes; anything else (nested lists, huge numbers) is no shape."""
    return isinstance(dims, list) and all(type(d) is int and 0 <= d < 2**63 for d in dims)


def _text(args: dict, key: str) -> str:
    value = args.get(key, "")
    return value if isinstance(value, str) else ""


def read(path: Path) -> ReadResult:
    path = Path(path)
    evs = events(load_json(path, "ONNX Runtime profile"), path)
    if not any(e.cat == "Session" or (e.cat == "Node" and e.name.endswith(KERNEL_SUFFIX)) for e in evs):
        raise TraceFormatError("no ONNX Runtime Session or Node events: not an ONNX Runtime profile", path=path)
    scopes = load_node_scopes(path)
    all_runs = sorted((e.ts, e.ts + e.dur) for e in evs if e.cat == "Session" and e.name == "model_run")
    n_warm = load_warmup_runs(path)
    warm, runs = all_runs[:n_warm], all_runs[n_warm:]
    work = [e for e in evs if e.cat != "Session" and step_of(e.ts, warm) < 0]
    nodes = [e for e in work if e.cat == "Node" and e.name.endswith(KERNEL_SUFFIX)]
    t0 = min((e.ts for e in evs), default=0.0)
    providers = Counter(_text(e.args, "provider") for e in nodes)
    provider = providers.most_common(1)[0][0] if nodes else ""
    device_type = DEVICE_TYPES.get(provider, "cpu")
    gpu_kernels = [e for e in work if e.cat == "Kernel"]

    ops: dict[str, list] = {k: [] for k in ("name", "framework_op", "op_class", "module", "step", "start_us",
                                             "host_us", "input_shapes", "dtypes", "members", "call", "call_members")}
    by_node: dict[tuple[str, int], int] = {}
    for i, e in enumerate(sorted(nodes, key=lambda e: e.ts)):
        node = e.name[: -len(KERNEL_SUFFIX)]
        onnx_op = _text(e.args, "op_name")
        scope = scopes.get(node)
        framework_op = scope.framework_op if scope and scope.framework_op else onnx_op
        shapes, dtypes = _shapes(e.args)
        step = step_of(e.ts, runs)
        by_node.setdefault((node, step), i)
        for key, value in (("name", node), ("framework_op", framework_op),
                           ("op_class", classify(framework_op, [onnx_op] if onnx_op else [])),
                           ("module", scope.module if scope else ""), ("step", step),
                           ("start_us", e.ts - t0), ("host_us", e.dur), ("input_shapes", shapes), ("dtypes", dtypes),
                           ("members", scope.members if scope else ""), ("call", scope.call if scope else ""),
                           ("call_members", scope.call_members if scope else "")):
            ops[key].append(value)

    kern: dict[str, list] = {k: [] for k in ("op_id", "step", "name", "start_us", "dur_us")}
    if gpu_kernels:
        synthetic = _gpu_kernels(gpu_kernels, by_node, runs, t0, ops, kern)
    else:  # the CPU is the device: the node's kernel time is its device time
        synthetic = [False] * len(ops["name"])
        for i, e in enumerate(sorted(nodes, key=lambda e: e.ts)):
            for key, value in (("op_id", i), ("step", ops["step"][i]), ("name", _text(e.args, "op_name") or ops["name"][i]),
                               ("start_us", e.ts - t0), ("dur_us", e.dur)):
                kern[key].append(value)
    return ReadResult(*_frames(ops, kern, synthetic, device_type, provider), _meta(evs, provider, device_type, warm))


def _gpu_kernels(kernels: list[Event], by_node: dict[tuple[str, int], int], runs: list[tuple[float, float]],
                 t0: float, ops: dict[str, list], kern: dict[str, list]) -> list[bool]:
    """Attach GPU provider kernel events to their parent node; the rest get synthetic ops."""
    synthetic = [False] * len(ops["name"])
    for e in sorted(kernels, key=lambda e: e.ts):
        step = step_of(e.ts, runs)
        op_id = by_node.get((_text(e.args, "parent_name"), step))
        if op_id is None:
            op_id = len(ops["name"])
            for key, value in (("name", e.name), ("framework_op", ""), ("op_class", classify("", [e.name])),
                               ("module", ""), ("step", step), ("start_us", e.ts - t0), ("host_us", 0.0),
                               ("input_shapes", ""), ("dtypes", ""), ("members", ""), ("call", ""), ("call_members", "")):
                ops[key].append(value)
            synthetic.append(True)
        for key, value in (("op_id", op_id), ("step", step), ("name", e.name), ("start_us", e.ts - t0), ("dur_us", e.dur)):
            kern[key].append(value)
    return synthetic


def _frames(ops: dict[str, list], kern: dict[str, list], synthetic: list[bool], device_type: str,
            provider: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    import pandas as pd

    n = len(ops["name"])
    kernels = pd.DataFrame(kern).assign(kind="kernel", device_id=-1 if device_type == "cpu" else 0,
                                        stream=-1, correlation=-1)
    per_op = kernels.groupby("op_id")["dur_us"].agg(["sum", "count"]).reindex(range(n), fill_value=0)
    names = kernels.groupby("op_id")["name"].agg(lambda s: "\n".join(dict.fromkeys(s))).reindex(range(n), fill_value="")
    ops_df = pd.DataFrame(ops).assign(
        op_id=np.arange(n, dtype=np.int64), parent_id=-1, device_type=device_type, device_name=provider,
        stream=-1, device_us=per_op["sum"].to_numpy(dtype=float), kernel_count=per_op["count"].to_numpy(dtype=np.int64),
        kernels=names.to_numpy(dtype=object), flops=np.nan, bytes=np.nan, synthetic=synthetic)
    return ops_df, kernels


def _meta(evs: list[Event], provider: str, device_type: str, warm: list[tuple[float, float]]) -> TraceMeta:
    versions = {}
    for e in evs:
        version = e.args.get("onnxruntime_version") or e.args.get("version")
        if e.cat == "Session" and isinstance(version, str):
            versions["onnxruntime"] = version
            break
    return TraceMeta(
        profiler=FORMAT, device_type=device_type, device_name=provider, framework_versions=versions,
        events_read=len(evs),
        extra={"runs": sum(1 for e in evs if e.cat == "Session" and e.name == "model_run"),
               "warmup_runs_dropped": len(warm), "warmup_us_dropped": float(sum(b - a for a, b in warm))},
    )
