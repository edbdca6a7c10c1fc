"""Per-op columns of the Kineto reader: values from a cpu_op's args (FLOPs, input shapes
and dtypes, the TorchScript/mobile `Module Hierarchy` fallback module path) and the
aggregates over each op's device rows (distinct kernel names, first stream, op class)."""

from __future__ import annotations

import numpy as np

from porter.core.opclass import classify

from porter.core.factorize import factorize
from profilers.kineto_events import Columns


def op_table_columns(ops: Columns, n_synthetic: int) -> dict[str, np.ndarray]:
    """flops, bytes, input_shapes, dtypes, concrete_inputs for the ops, then synthetic rows."""
    pad_s = np.full(n_synthetic, "", dtype=object)
    return {
        "flops": np.concatenate([ops.flops, np.full(n_synthetic, np.nan)]),
        "bytes": np.concatenate([ops.msg_bytes, np.full(n_synthetic, np.nan)]),  # a collective's message
        "input_shapes": np.concatenate([ops.input_dims, pad_s]),
        "dtypes": np.concatenate([ops.input_type, pad_s]),
        "concrete_inputs": np.concatenate([ops.concrete_inputs, pad_s]),
    }


def hierarchy_path(text: str) -> str:
    """'TOP(Net)::forward.fc1(Linear)::forward.' -> 'TOP/fc1': instance names, outermost first."""
    parts = []
    for seg in text.split("."):
        if "(" in seg:
            parts.append(seg.split("(", 1)[0])
    return "/".join(p for p in parts if p)


def module_from_hierarchy(module: np.ndarray, hierarchy: np.ndarray) -> np.ndarray:
    """Fill ops without a scope-derived module from their `Module Hierarchy` arg, if any
    (one path per distinct arg text, shared by the ops that carry it)."""
    out = module.copy()
    ask = np.flatnonzero((out == "") & (hierarchy != ""))
    if len(ask):
        codes, texts = factorize(hierarchy[ask])
        out[ask] = np.array([hierarchy_path(t) for t in texts], dtype=object)[codes]
    return out


def distinct_names(op: np.ndarray, name: list[str], n_ops: int) -> np.ndarray:
    """Per op: the distinct names of its device rows in launch order, newline-joined."""
    out = np.full(n_ops, "", dtype=object)
    if len(op) == 0:
        return out
    code, uniques = factorize(np.array(name, dtype=object))
    uniques = np.asarray(uniques, dtype=object)
    first = np.sort(np.unique(op * (len(uniques) + 1) + code, return_index=True)[1])
    op, code = op[first], code[first]  # distinct (op, name) pairs, in launch order
    counts = np.bincount(op, minlength=n_ops)
    single = counts[op] == 1
    out[op[single]] = uniques[code[single]]
    joined: dict[int, list[str]] = {}
    for o, c in zip(op[~single].tolist(), code[~single].tolist()):  # few ops launch several kernels
        joined.setdefault(o, []).append(uniques[c])
    for o, names in joined.items():
        out[o] = "\n".join(names)
    return out


def first_stream(op: np.ndarray, stream: np.ndarray, n_ops: int) -> np.ndarray:
    """Per op: the stream of its first device row (rows are sorted by start), -1 when none."""
    out = np.full(n_ops, -1, dtype=np.int64)
    ops_with, first = np.unique(op, return_index=True)
    out[ops_with] = stream[first]
    return out


def op_classes(key: np.ndarray, kernels: np.ndarray) -> np.ndarray:
    """op_class from `key` (framework op, or an annotation's name); kernels when it says nothing."""
    codes, uniques = factorize(key)
    classes = np.array([classify(k) if k else "other" for k in uniques], dtype=object)[codes]
    ask = np.flatnonzero((classes == "other") & (kernels != ""))
    if len(ask):
        pcodes, puniques = factorize(key[ask] + "\x1f" + kernels[ask])
        by_kernels = np.array([classify(*_split_pair(p)) for p in puniques], dtype=object)
        classes[ask] = by_kernels[pcodes]
    return classes


def _split_pair(pair: str) -> tuple[str, list[str]]:
    key, kernels = pair.split("\x1f", 1)
    return key, kernels.split("\n")
