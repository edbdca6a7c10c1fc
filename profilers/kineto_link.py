"""Which op each device activity's time belongs to.

Device rows link to the runtime call with the same `correlation` id, and through it to
the innermost op open on the call's thread when it began. Rows no op launched get
synthetic ops; CPU-only traces turn each op's self CPU time into its one device row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from porter.core.factorize import factorize
from profilers.intervals import Nesting
from profilers.kineto_events import Columns
from profilers.kineto_scopes import Clock, Scopes


@dataclass
class DeviceRows:
    """The kernels table's columns (before steps), plus the synthetic ops they needed."""

    op: np.ndarray
    name: np.ndarray  # object
    kind: np.ndarray
    device_id: np.ndarray
    stream: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    correlation: np.ndarray
    synthetic_names: list[str]
    synthetic_start: np.ndarray
    synthetic_host: np.ndarray
    synthetic_module: np.ndarray


def _launch_calls(rt_corr: np.ndarray, rt_op: np.ndarray, k_corr: np.ndarray) -> np.ndarray:
    """Per device row, the index of the runtime call with its correlation id, or -1."""
    usable = np.flatnonzero(rt_corr > 0)
    # Where several calls share an id (MTIA sync calls do), prefer one inside an op.
    usable = usable[np.argsort(rt_op[usable] >= 0, kind="stable")]
    ids = rt_corr[usable]
    if len(ids) == 0:
        return np.full(len(k_corr), -1, dtype=np.int64)
    ids, last = np.unique(ids[::-1], return_index=True)  # sorted ids, each one's last call
    calls = usable[len(usable) - 1 - last]
    pos = np.clip(np.searchsorted(ids, k_corr), 0, len(ids) - 1)
    return np.where(ids[pos] == k_corr, calls[pos], -1)


def link_device(clock: Clock, scopes: Scopes, op_nest: Nesting, n_ops: int,
                runtime: Columns, device: Columns, kind: np.ndarray) -> DeviceRows:
    """Attribute device rows (sorted by start) to ops, adding synthetic ops for the unlaunched."""
    rt_key = clock.key(runtime)
    rt_op = op_nest.enclosing(rt_key)
    k_corr = device.correlation
    k_call = _launch_calls(runtime.correlation, rt_op, k_corr)
    has_call = k_call >= 0
    k_op = np.where(has_call, rt_op[np.clip(k_call, 0, None)] if len(runtime) else -1, -1)

    lost = np.flatnonzero(k_op < 0)
    # One synthetic op per launching call; per row when the call is not in the trace.
    codes, _ = factorize(np.where(has_call[lost], k_call[lost], len(runtime) + lost))
    first = lost[np.unique(codes, return_index=True)[1]]
    call = k_call[first]
    with_call = call >= 0
    ci = call[with_call]
    k_start = clock.rel(device)
    syn_start, syn_host = k_start[first].copy(), np.zeros(len(first))
    syn_start[with_call] = clock.rel(runtime)[ci]
    syn_host[with_call] = runtime.dur[ci]
    syn_module = np.full(len(first), "", dtype=object)
    syn_module[with_call] = scopes.at(rt_key[ci])
    k_op[lost] = n_ops + codes

    return DeviceRows(
        op=k_op, name=device.name, kind=kind, device_id=device.device, stream=device.stream,
        start=k_start, dur=device.dur, correlation=k_corr,
        synthetic_names=device.name[first].tolist(),
        synthetic_start=syn_start, synthetic_host=syn_host, synthetic_module=syn_module,
    )


def cpu_as_device(ops: Columns, op_start: np.ndarray, op_parent: np.ndarray) -> DeviceRows:
    """CPU-only trace: one row per op holding its self CPU time (duration minus child ops)."""
    n = len(ops)
    child = op_parent >= 0
    self_us = ops.dur - np.bincount(op_parent[child], weights=ops.dur[child], minlength=n)
    none = np.full(n, -1, dtype=np.int64)
    return DeviceRows(
        op=np.arange(n, dtype=np.int64), name=ops.name, kind=np.full(n, "kernel", dtype=object),
        device_id=none, stream=none, start=op_start, dur=np.maximum(self_us, 0.0), correlation=none,
        synthetic_names=[], synthetic_start=np.zeros(0), synthetic_host=np.zeros(0),
        synthetic_module=np.zeros(0, dtype=object),
    )
