"""The common op-level schema every profiler reader produces.

Two tables, both with times in microseconds (float64) measured from the first event
of the trace:

* ops: one row per op invocation (a framework op, an HLO op, an ONNX node, or a
  synthetic op standing in for device work no op launched).
* kernels: one row per device activity (kernel, memcpy, memset), linked to the op
  its time is attributed to through ``op_id``.

``device_us`` on an op is *self* device time: the kernels attributed to exactly that op
(the innermost framework op around the launch). Summing ``device_us`` over all ops
therefore equals summing ``dur_us`` over all kernels, an invariant ``validate`` checks.
See docs/schema.md for the meaning of each column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from porter.core.checked import as_float64, as_int64, check_text_length

if TYPE_CHECKING:  # pandas loads when a DataFrame is made (porter.core.columns: ~0.45 s a process)
    import pandas as pd

SCHEMA_VERSION = 1

# Canonical op classes, shared by every reader (porter.core.opclass assigns them).
OP_CLASSES: tuple[str, ...] = (
    "matmul",
    "conv",
    "attention",
    "norm",
    "softmax",
    "elementwise",
    "reduction",
    "embedding",
    "copy",
    "memset",
    "collective",
    "communication",
    "optimizer",
    "sync",
    "custom_kernel",  # a hand-written kernel called as one op (a Pallas call), whatever it computes
    "other",
)

MODULE_SEP = "/"  # module paths: scope names joined outermost first, e.g. "encoder/layer.0/attn"
NO_MODULE = ""
NO_ID = -1


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "str", "int", "float", "bool"
    unit: str
    doc: str
    optional: bool = False  # a reader may omit it; coerce fills the "unknown" value


OPS_COLUMNS: tuple[Column, ...] = (
    Column("op_id", "int", "", "unique within the bundle"),
    Column("parent_id", "int", "", "op_id of the enclosing op, -1 at top level"),
    Column("step", "int", "", "profiler step number (ProfilerStep#N), -1 outside steps"),
    Column("name", "str", "", "the op's name as the profiler wrote it"),
    Column("framework_op", "str", "", "framework-level op: aten::linear, jax dot_general, ONNX MatMul"),
    Column("op_class", "str", "", "canonical class, one of OP_CLASSES"),
    Column("module", "str", "", "model scope path, '/'-joined outermost first; '' when unknown"),
    Column("device_type", "str", "", "cuda, rocm, cpu, tpu, gpu, mtia"),
    Column("device_name", "str", "", "e.g. 'NVIDIA H100 80GB HBM3'"),
    Column("stream", "int", "", "stream (or XLA line) of its first kernel; -1 when none"),
    Column("start_us", "float", "us", "start on the host timeline (device timeline for HLO ops)"),
    Column("host_us", "float", "us", "wall time of the op on the host (inclusive)"),
    Column("device_us", "float", "us", "self device time: kernels attributed to this op"),
    Column("kernel_count", "int", "", "number of kernels attributed to this op"),
    Column("kernels", "str", "", "distinct kernel names, newline-separated"),
    Column("flops", "float", "FLOP", "floating-point operations, NaN when unknown"),
    Column("bytes", "float", "B", "bytes moved, NaN when unknown"),
    Column("input_shapes", "str", "", "JSON list of input dims, '' when not recorded"),
    Column("dtypes", "str", "", "JSON list of input dtypes, '' when not recorded"),
    Column("concrete_inputs", "str", "", "JSON list of scalar inputs (stride, padding, causal...), '' when not recorded", optional=True),
    Column("synthetic", "bool", "", "True for a stand-in op that owns kernels no op launched"),
    Column("members", "str", "", "a fused op's members by module: JSON [[module, op, estimated cost share], ...], "
                                 "'' unless it spans modules", optional=True),
    Column("call", "str", "", "live captures: the op call this op belongs to within its module, '<op>#<k>' "
                              "(porter.targets.call_tags), '' when not tagged", optional=True),
    Column("call_members", "str", "", "live captures: a fused op's member op calls, JSON [[module, '<op>#<k>', "
                                      "estimated cost share], ...], '' unless it holds two calls or more", optional=True),
    Column("rank", "int", "", "the rank of a multi-rank job the op ran on; -1 for a single-rank run", optional=True),
)

KERNEL_COLUMNS: tuple[Column, ...] = (
    Column("op_id", "int", "", "op the kernel's time is attributed to"),
    Column("step", "int", "", "profiler step, -1 outside steps"),
    Column("name", "str", "", "kernel name as the profiler wrote it"),
    Column("kind", "str", "", "kernel, memcpy or memset"),
    Column("device_id", "int", "", "device index, -1 when unknown"),
    Column("stream", "int", "", "stream or queue id, -1 when unknown"),
    Column("start_us", "float", "us", "start on the device timeline"),
    Column("dur_us", "float", "us", "duration"),
    Column("correlation", "int", "", "runtime correlation id, -1 when none"),
    Column("rank", "int", "", "the rank of a multi-rank job the kernel ran on; -1 for a single-rank run", optional=True),
)

KERNEL_KINDS = ("kernel", "memcpy", "memset")


def encode_members(members: "Iterable[tuple[str, str, float]]") -> str:
    """(module, op, estimated cost) of a fused op's members -> the ops.members JSON: one entry
    per module, [module, its costliest op, its share of the cost], largest first; '' when they
    all lie in one module (nothing to split) or carry no cost. A module whose members cost
    nothing (a view read in place) is left out."""
    cost: dict[str, float] = {}
    top: dict[str, tuple[float, str]] = {}
    for module, op, c in members:
        cost[module] = cost.get(module, 0.0) + c
        if c > top.get(module, (-1.0, ""))[0]:
            top[module] = (c, op)
    cost = {m: c for m, c in cost.items() if c > 0}
    total = sum(cost.values())
    if len(cost) < 2 or total <= 0:
        return ""
    rows = sorted(([m, top[m][1], round(c / total, 6)] for m, c in cost.items()), key=lambda r: (-r[2], r[0]))
    return json.dumps(rows)



def encode_call_members(members: "Iterable[tuple[str, str, float]]") -> str:
    """(module, '<op>#<k>' call, estimated cost) of a fused op's members -> the ops.call_members
    JSON: one entry per tagged call, [module, call, its share of the tagged members' cost],
    largest first; '' when fewer than two calls are tagged or none carries cost. Untagged
    members (a constant, an op a rewrite made) are left out: their cost goes to the calls."""
    cost: dict[tuple[str, str], float] = {}
    for module, call, c in members:
        if call:
            cost[(module, call)] = cost.get((module, call), 0.0) + c
    total = sum(cost.values())
    if len(cost) < 2 or total <= 0:
        return ""
    rows = sorted(([m, call, round(c / total, 9)] for (m, call), c in cost.items()), key=lambda r: (-r[2], r[0], r[1]))
    return json.dumps(rows)


_DTYPES = {"str": object, "int": np.int64, "float": np.float64, "bool": np.bool_}
_UNKNOWN = {"str": "", "int": NO_ID, "float": np.nan, "bool": False}


def dtype_of(kind: str) -> Any:
    """The numpy dtype of a column kind."""
    return _DTYPES[kind]


def unknown_of(kind: str) -> Any:
    """The value an optional column a reader left out holds."""
    return _UNKNOWN[kind]


class SchemaViolation(AssertionError):
    """A reader produced a table outside the schema: a bug in porter, not bad input."""


def _empty(columns: tuple[Column, ...]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c.name: pd.Series([], dtype=_DTYPES[c.kind]) for c in columns})


def empty_ops() -> pd.DataFrame:
    return _empty(OPS_COLUMNS)


def empty_kernels() -> pd.DataFrame:
    return _empty(KERNEL_COLUMNS)


def _as_str(s: pd.Series) -> pd.Series:
    """Object column of str, '' for missing. Columns that already are all-str pass
    untouched (checked in one C loop), which is most of them: the astype round trip
    costs ~0.3 s per 100k rows."""
    import pandas as pd

    if s.dtype == object and pd.api.types.infer_dtype(s, skipna=False) == "string":
        return pd.Series(s.to_numpy(), dtype=object, copy=False)
    if isinstance(s.dtype, pd.StringDtype):  # pandas' own str dtype (the default from pandas 3)
        # Via the distinct values: to_numpy() would make a new str object per row (~70 B
        # each; a broadcast device_name column of 1M rows became 70 MB).
        codes, uniques = pd.factorize(s)
        return pd.Series(np.append(uniques.to_numpy(dtype=object), "")[codes], dtype=object, copy=False)
    return s.astype(object).where(s.notna(), "").astype(str).astype(object)


def _coerce(df: pd.DataFrame, columns: tuple[Column, ...], table: str) -> pd.DataFrame:
    import pandas as pd

    out = {}
    for c in columns:
        if c.name not in df.columns:
            if not c.optional:
                raise SchemaViolation(f"missing column {c.name!r}")
            out[c.name] = pd.Series([_UNKNOWN[c.kind]] * len(df), dtype=_DTYPES[c.kind])
            continue
        s = df[c.name]
        if c.kind == "str":
            out[c.name] = _as_str(s)
            check_text_length(out[c.name].to_numpy(), f"{table}.{c.name}")
        elif s.dtype == _DTYPES[c.kind]:
            out[c.name] = pd.Series(s.to_numpy(), copy=False)  # already right: no copy
        else:
            out[c.name] = pd.Series(checked_numbers(s.to_numpy(), c, table), copy=False)
    return pd.DataFrame(out, index=pd.RangeIndex(len(df)), copy=False)


def checked_numbers(values: np.ndarray, column: Column, table: str) -> np.ndarray:
    """A numeric column in its schema dtype; a trace value it cannot hold is FieldOutOfRange
    naming `table.column` (porter.core.checked), never numpy's OverflowError."""
    field = f"{table}.{column.name}"
    if column.kind == "int":
        return as_int64(values, field)
    if column.kind == "float":
        return as_float64(values, field)
    return np.asarray(values).astype(_DTYPES[column.kind])


def coerce_ops(df: pd.DataFrame) -> pd.DataFrame:
    """Return the ops table with exactly the schema's columns, order and dtypes."""
    return _coerce(df, OPS_COLUMNS, "ops")


def coerce_kernels(df: pd.DataFrame) -> pd.DataFrame:
    return _coerce(df, KERNEL_COLUMNS, "kernels")


def _check_kinds(df: pd.DataFrame, columns: tuple[Column, ...], table: str) -> None:
    import pandas as pd

    names = [c.name for c in columns]
    if list(df.columns) != names:
        raise SchemaViolation(f"{table}: columns {list(df.columns)} != schema {names}")
    for c in columns:
        s = df[c.name]
        ok = {
            "str": pd.api.types.is_string_dtype(s) or s.dtype == object,
            "int": pd.api.types.is_integer_dtype(s),
            "float": pd.api.types.is_float_dtype(s),
            "bool": pd.api.types.is_bool_dtype(s),
        }[c.kind]
        if not ok:
            raise SchemaViolation(f"{table}.{c.name}: dtype {s.dtype} is not {c.kind}")


def validate(ops: pd.DataFrame, kernels: pd.DataFrame) -> None:
    """Check both tables against the schema and the invariants that tie them together
    (checked on the tables' numpy columns, as porter.core.columns checks a reader's)."""
    _check_kinds(ops, OPS_COLUMNS, "ops")
    _check_kinds(kernels, KERNEL_COLUMNS, "kernels")
    check_invariants(from_frame(ops), from_frame(kernels))


# ---------------------------------------------------------------- the tables as numpy columns

Table = dict[str, np.ndarray]  # porter.core.columns' unit: name -> 1-D array


def from_frame(df: pd.DataFrame) -> Table:
    """A DataFrame's columns as numpy arrays (str columns as object arrays)."""
    return {str(c): df[c].to_numpy() for c in df.columns}


def check_invariants(ops: Table, kernels: Table) -> None:
    """Ids unique, classes and kinds known, times finite and non-negative, and each op's
    device_us the sum of the kernels attributed to it."""
    op_id = np.asarray(ops["op_id"], dtype=np.int64)
    order = np.argsort(op_id, kind="stable")
    ids = op_id[order]
    if len(ids) > 1 and (ids[1:] == ids[:-1]).any():
        raise SchemaViolation("ops.op_id is not unique")
    bad_class = set(ops["op_class"].tolist()) - set(OP_CLASSES)
    if bad_class:
        raise SchemaViolation(f"ops.op_class has unknown classes {sorted(map(str, bad_class))}")
    for col in ("device_us", "host_us"):
        vals = np.asarray(ops[col], dtype=np.float64)
        if np.isnan(vals).any() or (vals < 0).any():
            raise SchemaViolation(f"ops.{col} has NaN or negative values")
    dur = np.asarray(kernels["dur_us"], dtype=np.float64)
    if (dur < 0).any() or np.isnan(dur).any():
        raise SchemaViolation("kernels.dur_us has NaN or negative values")
    bad_kind = set(kernels["kind"].tolist()) - set(KERNEL_KINDS)
    if bad_kind:
        raise SchemaViolation(f"kernels.kind has unknown kinds {sorted(map(str, bad_kind))}")
    if not len(dur):
        return
    k_op = np.asarray(kernels["op_id"], dtype=np.int64)
    pos = np.clip(np.searchsorted(ids, k_op), 0, max(len(ids) - 1, 0))
    found = ids[pos] == k_op if len(ids) else np.zeros(len(k_op), dtype=bool)
    if not found.all():
        orphans = np.unique(k_op[~found])
        raise SchemaViolation(f"{len(orphans)} kernel op_ids name no op (e.g. {orphans[:3].tolist()})")
    per_op = np.bincount(pos, weights=dur, minlength=len(ids))
    has = np.bincount(pos, minlength=len(ids)) > 0
    device = np.asarray(ops["device_us"], dtype=np.float64)[order]
    total = float(dur.sum())
    if total > 0 and float(np.abs(device[has] - per_op[has]).sum()) > 1e-6 * total + 1e-6:
        raise SchemaViolation("ops.device_us does not equal the kernels attributed to each op")
    if abs(float(device.sum()) - total) > 1e-6 * total + 1e-6:
        raise SchemaViolation("ops.device_us total differs from the kernels' total")
