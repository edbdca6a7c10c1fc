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
    """flops, bytes, input_shapes, dtypes for the ops (None args -> unknown), then synthetic rows."""
    empty = msgspec.Raw()
    pad_s = np.full(n_synthetic, "", dtype=object)
    flops = np.array([np.nan if a is None or a.flops is None else a.flops for a in args], dtype=np.float64)
    shapes = _raw_texts([empty if a is None else a.input_dims for a in args])
    dtypes = _raw_texts([empty if a is None else a.input_type for a in args])
    return {
        "flops": np.concatenate([flops, np.full(n_synthetic, np.nan)]),
        "bytes": np.full(len(args) + n_synthetic, np.nan),
        "input_shapes": np.concatenate([shapes, pad_s]),
        "dtypes": np.concatenate([dtypes, pad_s]),
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
    pairs = pd.DataFrame({"op": op, "name": pd.Series(name, dtype=object)}).drop_duplicates()
    counts = np.bincount(pairs["op"].to_numpy(), minlength=n_ops)
    single = pairs[counts[pairs["op"].to_numpy()] == 1]
    out[single["op"].to_numpy()] = single["name"].to_numpy(dtype=object)
    multi = pairs[counts[pairs["op"].to_numpy()] > 1]
    if len(multi):
        joined = multi.groupby("op", sort=False)["name"].agg("\n".join)
        out[joined.index.to_numpy()] = joined.to_numpy(dtype=object)
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
        pcodes, puniques = pd.factorize(pd.MultiIndex.from_arrays([key[ask], kernels[ask]]))
        by_kernels = np.array([classify(k, ks.split("\n")) for k, ks in puniques], dtype=object)
        classes[ask] = by_kernels[pcodes]
    return classes


def frame(columns: dict[str, np.ndarray | list]) -> pd.DataFrame:
    """A DataFrame that keeps str columns as plain object arrays (no Arrow string inference)."""
    return pd.DataFrame({
        k: pd.Series(v, dtype=object) if isinstance(v, list) or getattr(v, "dtype", None) == object else v
        for k, v in columns.items()
    })
