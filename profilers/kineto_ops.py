"""Per-op columns of the Kineto reader: values from a cpu_op's args (FLOPs, input shapes
and dtypes, the TorchScript/mobile `Module Hierarchy` fallback module path) and the
aggregates over each op's device rows (distinct kernel names, first stream, op class)."""

from __future__ import annotations

from typing import Optional

import msgspec
import numpy as np
import pandas as pd

from porter.opclass import classify

from profilers.kineto_events import Args


_SEP = b"\x1e"  # ASCII record separator: never inside JSON text Kineto writes


def _raw_texts(raws: list[msgspec.Raw]) -> np.ndarray:
    """Raw JSON fragments as str, joined and split once in C rather than decoded one by one."""
    if not raws:
        return np.zeros(0, dtype=object)
    texts = np.array(_SEP.join(raws).decode("utf-8", "replace").split("\x1e"), dtype=object)
    if len(texts) != len(raws):  # a separator inside a string value: fall back to one by one
        texts = np.array([bytes(r).decode("utf-8", "replace") for r in raws], dtype=object)
    texts[texts == "null"] = ""
    return texts


def op_table_columns(args: list[Optional[Args]], n_synthetic: int) -> dict[str, np.ndarray]:
    """flops, bytes, input_shapes, dtypes, concrete_inputs for the ops (None args -> unknown),
    then synthetic rows."""
    empty = msgspec.Raw()
    pad_s = np.full(n_synthetic, "", dtype=object)
    flops = np.array([np.nan if a is None or a.flops is None else a.flops for a in args], dtype=np.float64)
    shapes = _raw_texts([empty if a is None else a.input_dims for a in args])
    dtypes = _raw_texts([empty if a is None else a.input_type for a in args])
    concrete = _raw_texts([empty if a is None else a.concrete_inputs for a in args])
    return {
        "flops": np.concatenate([flops, np.full(n_synthetic, np.nan)]),
        "bytes": np.full(len(args) + n_synthetic, np.nan),
        "input_shapes": np.concatenate([shapes, pad_s]),
        "dtypes": np.concatenate([dtypes, pad_s]),
        "concrete_inputs": np.concatenate([concrete, pad_s]),
    }


def hierarchy_path(text: str) -> str:
    """'TOP(Net)::forward.fc1(Linear)::forward.' -> 'TOP/fc1': instance names, outermost first."""
    parts = []
    for seg in text.split("."):
        if "(" in seg:
            parts.append(seg.split("(", 1)[0])
    return "/".join(p for p in parts if p)


def module_from_hierarchy(module: np.ndarray, args: list[Optional[Args]]) -> np.ndarray:
    """Fill ops without a scope-derived module from their `Module Hierarchy` arg, if any."""
    out = module.copy()
    for i in np.flatnonzero(out == "").tolist():
        a = args[i]
        if a is not None and a.module_hierarchy:
            out[i] = hierarchy_path(a.module_hierarchy)
    return out


def distinct_names(op: np.ndarray, name: list[str], n_ops: int) -> np.ndarray:
    """Per op: the distinct names of its device rows in launch order, newline-joined."""
    out = np.full(n_ops, "", dtype=object)
    if len(op) == 0:
        return out
    code, uniques = pd.factorize(np.array(name, dtype=object))
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
    codes, uniques = pd.factorize(key)
    classes = np.array([classify(k) if k else "other" for k in uniques], dtype=object)[codes]
    ask = np.flatnonzero((classes == "other") & (kernels != ""))
    if len(ask):
        pcodes, puniques = pd.factorize(key[ask] + "\x1f" + kernels[ask])
        by_kernels = np.array([classify(*_split_pair(p)) for p in puniques], dtype=object)
        classes[ask] = by_kernels[pcodes]
    return classes


def _split_pair(pair: str) -> tuple[str, list[str]]:
    key, kernels = pair.split("\x1f", 1)
    return key, kernels.split("\n")


def frame(columns: dict[str, np.ndarray | list]) -> pd.DataFrame:
    """A DataFrame that keeps str columns as plain object arrays (no Arrow string inference)."""
    return pd.DataFrame({
        k: pd.Series(v, dtype=object) if isinstance(v, list) or getattr(v, "dtype", None) == object else v
        for k, v in columns.items()
    })
