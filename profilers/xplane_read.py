"""The XSpace reader behind profilers/xplane.py (which sniffs), imported when an XSpace is read.

See profilers/xplane.py for what becomes ops and kernels.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from porter.core.errors import TraceFormatError
from porter.core.opclass import class_for_category, classify
from porter.core.schema import NO_ID, NO_MODULE
from profilers.base import ReadResult, TraceMeta, read_bytes
from porter.core.tags import KERNEL_OP_PREFIX
from profilers.xla_hlo import HloIndex
from profilers.xplane_events import (
    DEVICE_PLANE,
    STREAM,
    Event,
    PlaneView,
    cpu_thunk_events,
    device_events,
    hlo_index,
    host_launches,
    text,
)
from profilers.xplane_format import FORMAT, PLANE_NAMES
from profilers.xplane_steps import device_steps, group_steps, host_steps
from profilers.xspace_proto import DecodeError, parse_xspace

_MEMCPY = re.compile(r"memcpy|copyBuffer|Memcpy", re.IGNORECASE)
_MEMSET = re.compile(r"memset|fillBuffer", re.IGNORECASE)


# ---------------------------------------------------------------- tables

def _kind(ev: Event) -> str:
    text = f"{ev.name} {ev.line_name}"
    if _MEMSET.search(text):
        return "memset"
    if _MEMCPY.search(text):
        return "memcpy"
    return "kernel"


def _program(stats: dict[str, Any]) -> int | None:
    pid = stats.get("program_id")
    return pid if isinstance(pid, int) else None


def _group(events: list[Event]) -> list[list[Event]]:
    """Kernels -> op invocations: consecutive kernels of one HLO op on one GPU stream."""
    groups: list[list[Event]] = []
    by_line: dict[tuple[int, int], list[Event]] = {}
    for ev in events:
        by_line.setdefault((ev.plane, ev.line), []).append(ev)
    for evs in by_line.values():
        evs.sort(key=lambda e: e.start_ps)
        cur: list[Event] = []
        cur_key: tuple | None = None
        names: set[str] = set()
        for ev in evs:
            hlo = ev.stats.get("hlo_op")
            key = (hlo, ev.stats.get("hlo_module"), _program(ev.stats), ev.stats.get("run_id")) if hlo else None
            alone = key is None or not STREAM.match(ev.line_name)  # thunks and TPU ops are one op each
            if not cur or alone or key != cur_key or ev.name in names:
                if cur:
                    groups.append(cur)
                cur, cur_key, names = [], key, set()
            cur.append(ev)
            names.add(ev.name)
        if cur:
            groups.append(cur)
    groups.sort(key=lambda g: (g[0].start_ps, g[0].plane, g[0].line))
    return groups


def _kernel_of(group: list[Event], index: HloIndex) -> str:
    """The tagged custom kernel (porter.core.tags) a group's HLO op belongs to, or ''."""
    first = group[0]
    hlo = first.stats.get("hlo_op")
    if not hlo:
        return ""
    fw = index.lookup(_program(first.stats), str(first.stats.get("hlo_module", "")), str(hlo),
                      [e.name for e in group]).framework_op
    return fw if fw.startswith(KERNEL_OP_PREFIX) else ""


def merge_kernels(groups: list[list[Event]], index: HloIndex) -> list[list[Event]]:
    """One op per custom-kernel call: the HLO ops an interpreted Pallas kernel runs as (its loop's
    copies, slices and fusions, one after another on one line) merged into the one group they are,
    as a compiled kernel is one custom call. Groups stay in start order."""
    out: list[list[Event]] = []
    last_on_line: dict[tuple[int, int], tuple[int, str]] = {}  # line -> (index in out, its kernel)
    for g in groups:
        line = (g[0].plane, g[0].line)
        kernel = _kernel_of(g, index)
        prev = last_on_line.get(line)
        if kernel and prev is not None and prev[1] == kernel and prev[0] == len(out) - 1:
            out[-1] = out[-1] + g
            continue
        out.append(g)
        last_on_line[line] = (len(out) - 1, kernel)
    return out


def build_tables(groups: list[list[Event]], index: HloIndex, device_type: str, device_name: str,
                 launches: dict[int, tuple[int, int]], steps: list[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One op row per group (steps[i] its step), one kernel row per event; times in us from the first event."""
    origin = min((g[0].start_ps for g in groups), default=0)
    ops: dict[str, list] = {k: [] for k in ("op_id", "name", "framework_op", "op_class", "module", "stream",
                                            "start_us", "host_us", "device_us", "kernel_count", "kernels", "synthetic",
                                            "flops", "bytes", "input_shapes", "dtypes", "members", "call", "call_members")}
    kern: dict[str, list] = {k: [] for k in ("op_id", "name", "kind", "device_id", "stream", "start_us",
                                             "dur_us", "correlation", "step")}
    for op_id, group in enumerate(groups):
        first = group[0]
        hlo = first.stats.get("hlo_op")
        knames = list(dict.fromkeys(e.name for e in group))
        if hlo:
            info = index.lookup(_program(first.stats), str(first.stats.get("hlo_module", "")), str(hlo), knames)
            name, fw, module = str(hlo), info.framework_op, info.module
            cls = class_for_category(first.stats.get("hlo_category"), info.op_class)  # xprof's category, where the trace says it
            if len(group) > 1 and fw.startswith(KERNEL_OP_PREFIX):
                name = fw  # a merged custom-kernel call (merge_kernels): named as the kernel, not its first HLO op
            cost = (info.flops, info.bytes, info.input_shapes, info.dtypes)
            members, call, call_members = info.members, info.call, info.call_members
        else:
            name, fw, cls, module = first.name, "", classify("", knames), NO_MODULE
            cost = (float("nan"), float("nan"), "", "")
            members = call = call_members = ""
        dur_ps = sum(e.dur_ps for e in group)
        corr = [e.stats.get("correlation_id") for e in group]
        host = sum(launches.get(c, (0, 0))[1] for c in corr if isinstance(c, int))
        ops["op_id"].append(op_id)
        ops["name"].append(name)
        ops["framework_op"].append(fw)
        ops["op_class"].append(cls)
        ops["module"].append(module)
        ops["stream"].append(first.line)
        ops["start_us"].append((first.start_ps - origin) / 1e6)
        ops["host_us"].append((dur_ps if device_type == "cpu" else host) / 1e6)
        ops["device_us"].append(dur_ps / 1e6)
        ops["kernel_count"].append(len(group))
        ops["kernels"].append("\n".join(knames))
        ops["synthetic"].append(not hlo)
        for key, value in zip(("flops", "bytes", "input_shapes", "dtypes"), cost):
            ops[key].append(value)
        ops["members"].append(members)
        ops["call"].append(call)
        ops["call_members"].append(call_members)
        for e, c in zip(group, corr):
            kern["op_id"].append(op_id)
            kern["name"].append(e.name)
            kern["kind"].append(_kind(e) if device_type != "cpu" else "kernel")
            kern["device_id"].append(e.plane)
            kern["stream"].append(e.line)
            kern["start_us"].append((e.start_ps - origin) / 1e6)
            kern["dur_us"].append(e.dur_ps / 1e6)
            kern["correlation"].append(c if isinstance(c, int) else NO_ID)
            kern["step"].append(steps[op_id])
    n = len(groups)
    ops_df = pd.DataFrame({
        **ops, "parent_id": [NO_ID] * n, "step": list(steps), "device_type": [device_type] * n,
        "device_name": [device_name] * n,
    })
    kern_df = pd.DataFrame(kern)
    return ops_df, kern_df


# ---------------------------------------------------------------- device facts

def device_facts(device_views: list[PlaneView], hostnames: list[str]) -> tuple[str, str, dict[str, Any]]:
    """(device_type, device_name, device_properties) from the device planes' stats."""
    if not device_views:
        props = {"hostnames": hostnames}
        return "cpu", "XLA:CPU" + (f" on {hostnames[0]}" if hostnames else ""), props
    first = device_views[0]
    stats = {k: v for k, v in first.stats(first.plane.stats).items() if not isinstance(v, bytes)}
    kind = DEVICE_PLANE.match(first.name)
    family = kind.group(1) if kind else "GPU"
    vendor = str(stats.get("device_vendor", ""))
    if family.startswith("TPU"):
        device_type = "tpu"
    elif "AMD" in vendor.upper():
        device_type = "rocm"
    elif "NVIDIA" in vendor.upper():
        device_type = "cuda"
    else:
        device_type = "gpu"
    model = next((str(stats[k]) for k in ("device_model", "device_type_string", "model", "device_name") if stats.get(k)), "")
    if not model:
        bits = []
        if "compute_cap_major" in stats:
            bits.append(f"compute capability {stats['compute_cap_major']}.{stats.get('compute_cap_minor', 0)}")
        if "core_count" in stats:
            bits.append(f"{stats['core_count']} cores")
        model = " ".join(x for x in (vendor, family) if x) + (f" ({', '.join(bits)})" if bits else "")
    props = {**stats, "device_count": len(device_views), "planes": [v.name for v in device_views], "hostnames": hostnames}
    return device_type, model, props


# ---------------------------------------------------------------- reader

def load_space(path: Path) -> Any:
    data = read_bytes(path)
    try:
        space = parse_xspace(data)
    except (DecodeError, ValueError, RecursionError):
        raise TraceFormatError("not a readable XSpace protobuf (truncated, corrupt, or another format)",
                               path=path, hint="pass the *.xplane.pb that jax.profiler wrote") from None
    if not any(p.name.startswith(PLANE_NAMES) for p in space.planes):
        raise TraceFormatError("parses as protobuf but is not an XSpace (no /host: or /device: planes)", path=path)
    return space


def read_xspace(path: Path) -> ReadResult:
    path = Path(path)
    space = load_space(path)
    views = [PlaneView(p) for p in space.planes]
    by_name = {v.name: v for v in views}
    meta_view, cpu_view = by_name.get("/host:metadata"), by_name.get("/host:CPU")
    events_read = sum(len(ln.events) for p in space.planes for ln in p.lines)
    index, bad_protos = hlo_index(meta_view)
    device_views = [v for v in views if DEVICE_PLANE.match(v.name)]
    events, containers, device_views = device_events(device_views, path)
    launches: dict[int, tuple[int, int]] = {}
    if events:
        launches = host_launches(cpu_view, path)
        source = "device planes"
    elif cpu_view is not None:
        events, containers = cpu_thunk_events(cpu_view, path)
        source = "XLA:CPU thunks on /host:CPU"
    if not events:
        raise TraceFormatError("no XLA op executions found (no device activity and no XLA:CPU thunk events)",
                               path=path, hint="profile while the jitted function runs, with block_until_ready()")
    hostnames = [text(h) for h in space.hostnames]
    device_type, device_name, props = device_facts(device_views, hostnames)
    groups = merge_kernels(_group(events), index)
    spans, step_source = host_steps(cpu_view, path), "host step_num markers"
    if spans:  # host windows: place GPU work by its host launch
        steps = group_steps(groups, spans, {c: start for c, (start, _) in launches.items()})
    else:  # device Steps lines are on the device clock: place work by its own start
        spans, step_source = device_steps(device_views, path), "device Steps lines"
        steps = group_steps(groups, spans, {})
    ops, kernels = build_tables(groups, index, device_type, device_name, launches, steps)
    versions = {}
    if meta_view is not None:
        mstats = meta_view.stats(meta_view.plane.stats)
        versions = {k.removesuffix("_version"): str(v) for k, v in mstats.items() if k in ("jax_version", "jaxlib_version")}
    meta = TraceMeta(
        profiler=FORMAT,
        device_type=device_type,
        device_name=device_name,
        device_properties=props,
        framework_versions=versions,
        events_read=events_read,
        extra={
            "source": source,
            "steps": step_source if spans else "none marked",
            "planes": [v.name for v in views],
            "hlo_modules": sorted(index.by_name),
            "container_events_skipped": containers,
            "undecodable_hlo_protos": bad_protos,
            "xspace_errors": [text(e) for e in space.errors][:20],
            "xspace_warnings": [text(w) for w in space.warnings][:20],
        },
    )
    return ReadResult(ops, kernels, meta)
