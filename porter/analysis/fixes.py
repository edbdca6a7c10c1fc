"""From gap groups to the fixes that apply: the fix catalogue, each group's symptoms, and the
match of one against the other (porter.analysis.fixrank ranks what matched).

Input contract: ``groups``, one row per matched group (same module + op class on both
sides, built by porter.analysis.attribute). Required columns:

    group_id (str)        stable id of the group
    module (str)          module path ('' when unknown)
    op_class (str)        one of porter.core.schema.OP_CLASSES
    framework_op (str)    the group's main target op (e.g. 'aten::mm'), for display and regexes
    source_us, target_us  summed self device time per side (us, float)
    source_kernels, target_kernels   kernel counts per side (int)
    flops, bytes          target-side cost summed over the group (NaN when unknown;
                          porter.analysis.perfmodel.op_costs gives it per op)
    dtype (str)           target compute dtype, canonical ('bf16', 'fp32', ...) or raw
    input_shapes (str)    JSON input dims of the group's most expensive target op ('' unknown)
    target_device_type    cuda, rocm, tpu, cpu, ...
    target_stack          porter.core.stacks key (xla-cpu, rocm, inductor-triton, ...; 'other' unknown)
    host_us               target host time of the group not covered by device work (0 if none)
Optional columns: source_framework_op, already_fused (bool: the group's module, or one
around it, already runs a fused attention kernel on either side), source_dtype, source_device_type, recompiles (int, -1 unknown),
local_error (module's local rel-L2 from porter.analysis.accuracy), tolerance, introduces_error,
roofline_us (else computed from flops/bytes with target ceilings), recoverable_us and
demonstrated_us (else computed with porter.analysis.perfmodel), outside (a kind of the runtime's
time outside every module, porter.analysis.outside: '' for a matched group;
porter.analysis.fixplan.outside_fix_groups makes those rows), within_noise (bool), step_ratio
(a live pair's target/source per unprofiled step: the ratio conditions read, where not NaN).
"""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from porter.core.errors import PorterError
from porter.analysis.opcost import DTYPE_BYTES, canonical_dtype, gemm_dims, tensors_of
from porter.analysis.perfmodel import Ceilings, roofline_us
from porter.analysis.recipes import Recipe, parse_recipes
from porter.core.stacks import STACK_NAMES

CATALOGUE_FILE = Path(__file__).parents[1] / "data" / "fixes.toml"
KINDS = ("perf", "accuracy")
RECOVERS = ("model", "source")  # what a perf fix can recover: see FixEntry.recovers
TPU_TILE = 128  # MXU systolic array edge
GPU_TILE_BYTES = 16  # tensor core / MFMA operands want 16-byte multiples (8 bf16, 4 fp32, 16 fp8)
# Ops that are one fused attention kernel: torch's flash / memory-efficient / cuDNN SDPA
# backends, flash-attn, cuDNN fMHA custom calls in XLA, ONNX Runtime's Attention contrib ops.
# Not the dispatcher op aten::scaled_dot_product_attention: it may run the unfused math backend.
FUSED_ATTENTION = re.compile(
    r"_scaled_dot_product_(?:flash|efficient|cudnn|fused)|_flash_attention|_efficient_attention|flash_attn|fmha"
    r"|^(?:com\.microsoft::)?(?:(?:Multi|Group)Query)?Attention$",
    re.IGNORECASE)

_SORT = re.compile(r"(?:^|[_:/.-])(?:arg)?sort(?:$|[_.-])", re.IGNORECASE)
# condition key -> (python type(s), description); the catalogue is checked against this.
CONDITIONS: dict[str, tuple[tuple[type, ...], str]] = {
    "op_class": ((list,), "group op class in the list"),
    "target_dtype": ((list,), "target dtype in the list"),
    "device_type": ((list,), "target device type in the list"),
    "stack": ((list,), "target stack in the list (porter.core.stacks.STACK_NAMES keys)"),
    "source_stack": ((list,), "source stack in the list (porter.core.stacks.STACK_NAMES keys)"),
    "framework_op": ((str,), "regex search over the group's framework op"),
    "module": ((str,), "regex search over the module path"),
    "min_ratio": ((int, float), "target_us / source_us >= value"),
    "min_kernel_ratio": ((int, float), "target_kernels / source_kernels >= value"),
    "max_kernel_ratio": ((int, float), "target_kernels / source_kernels <= value"),
    "max_roofline_efficiency": ((int, float), "roofline_us / target_us <= value"),
    "misaligned": ((bool,), "a matmul/conv/attention dim is off the hardware tile"),
    "dtype_changed": ((bool,), "target dtype differs from source dtype"),
    "on_host": ((bool,), "the op ran on the host on the target"),
    "min_host_fraction": ((int, float), "host_us / (host_us + target_us) >= value"),
    "min_recompiles": ((int,), "recompiles >= value"),
    "introduces_error": ((bool,), "the module's local error jumps (porter.analysis.accuracy)"),
    "already_fused": ((bool,), "a fused attention kernel already runs in the group or its module (either side)"),
    "became_sort": ((bool,), "the target's op is a sort where the source's is not (median, quantile, unique lowered to a sort)"),
    "source_compiled": ((bool,), "the source runs the group inside a torch.compile region (the target does not)"),
    "target_compiled": ((bool,), "the target runs the group inside a torch.compile region (the source does not)"),
    "min_error_ratio": ((int, float), "local_error / tolerance >= value"),
    "rewrite_differs": ((bool,), "the target is a rewrite of the model (another framework, paired by parameters) whose "
                                 "op computes a value the source's module never does (porter.accuracy.rewrite)"),
    "outside": ((list,), "the row is the target runtime's time outside every module, of a kind in the list "
                         "(porter.analysis.outside: guard checks, graph wrapper and runtime dispatch, transfers); "
                         "such rows match only fixes that name this condition"),
    "op_status": ((list,), "the op's portability status on the target (porter ops) in the list"),
    "has_decomposition": ((bool,), "torch has a core ATen decomposition for the op (porter ops)"),
}
@dataclass(frozen=True)
class FixEntry:
    id: str
    title: str
    kind: str
    tier: str
    days: tuple[float, float]
    why: str
    first_step: str
    applies_when: Mapping[str, Any]
    first_steps: Mapping[str, str] = field(default_factory=dict)  # per target stack, over first_step
    apply: Mapping[str, tuple[Recipe, ...]] = field(default_factory=dict)  # per stack: what porter tune can set
    # "model": recovers what the perf model bounds (beyond parity too); "source": the fix runs
    # the part as the source does, so it recovers the source's demonstrated time and no more
    recovers: str = "model"

    @property
    def mid_days(self) -> float:
        return (self.days[0] + self.days[1]) / 2


@dataclass(frozen=True)
class Catalogue:
    tiers: Mapping[str, tuple[float, float]]
    fixes: tuple[FixEntry, ...]

    def get(self, fix_id: str) -> FixEntry:
        return next(f for f in self.fixes if f.id == fix_id)

    def recipes(self, stack: str) -> tuple[Recipe, ...]:
        """Every recipe for one catalogue stack, in catalogue order (porter tune's candidates)."""
        return tuple(r for f in self.fixes for r in f.apply.get(stack, ()))


def _read_toml(path: Path) -> dict:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # checked before opening: a FIFO would block the read
            kind = "a directory" if Path(path).is_dir() else "not a regular file"
            raise PorterError(f"the fix catalogue is {kind}", path=path, hint="pass a TOML file (docs/fixes.md)")
        return tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise PorterError(f"cannot read fix catalogue: {exc.strerror or exc}", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise PorterError(f"invalid TOML in fix catalogue: {exc}", path=path) from None


def _build(raw: dict, path: Path) -> Catalogue:
    def bad(msg: str) -> PorterError:
        return PorterError(f"invalid fix catalogue: {msg}", path=path, hint="see docs/fixes.md for the format")

    tiers_raw = raw.get("tiers", {})
    tiers: dict[str, tuple[float, float]] = {}
    for name, rng in tiers_raw.items():
        if not (isinstance(rng, list) and len(rng) == 2 and all(isinstance(v, (int, float)) for v in rng) and 0 < rng[0] <= rng[1]):
            raise bad(f"tier {name!r} must be [low, high] engineer-days with 0 < low <= high")
        tiers[name] = (float(rng[0]), float(rng[1]))
    fixes = []
    for entry in raw.get("fix", []):
        fid = entry.get("id", "?")
        for key in ("id", "title", "kind", "tier", "why", "first_step"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise bad(f"fix {fid!r}: {key!r} must be a non-empty string")
        if entry["kind"] not in KINDS:
            raise bad(f"fix {fid!r}: kind must be one of {KINDS}, not {entry['kind']!r}")
        if entry["tier"] not in tiers:
            raise bad(f"fix {fid!r}: unknown tier {entry['tier']!r} (tiers: {', '.join(tiers)})")
        days = tiers[entry["tier"]]
        if "days" in entry:
            d = entry["days"]
            if not (isinstance(d, list) and len(d) == 2 and all(isinstance(v, (int, float)) for v in d) and 0 < d[0] <= d[1]):
                raise bad(f"fix {fid!r}: days must be [low, high] with 0 < low <= high")
            days = (float(d[0]), float(d[1]))
        cond = entry.get("applies_when", {})
        if not isinstance(cond, dict):
            raise bad(f"fix {fid!r}: applies_when must be a table")
        for key, value in cond.items():
            if key not in CONDITIONS:
                raise bad(f"fix {fid!r}: unknown condition {key!r} (known: {', '.join(CONDITIONS)})")
            types = CONDITIONS[key][0]
            if not isinstance(value, types) or (bool in types) != isinstance(value, bool):
                raise bad(f"fix {fid!r}: condition {key!r} has the wrong type ({CONDITIONS[key][1]})")
            if isinstance(value, str):
                try:
                    re.compile(value)
                except re.error as exc:
                    raise bad(f"fix {fid!r}: condition {key!r} is not a valid regex ({exc})") from None
        steps = entry.get("first_steps", {})
        if not isinstance(steps, dict) or not all(k in STACK_NAMES and isinstance(v, str) and v for k, v in steps.items()):
            raise bad(f"fix {fid!r}: first_steps must map stacks ({', '.join(STACK_NAMES)}) to non-empty strings")
        recipes = parse_recipes(entry.get("apply"), fid, STACK_NAMES, bad)
        recovers = entry.get("recovers", "model")
        if recovers not in RECOVERS:
            raise bad(f"fix {fid!r}: recovers must be one of {RECOVERS}, not {recovers!r}")
        fixes.append(FixEntry(entry["id"], entry["title"], entry["kind"], entry["tier"], days,
                              entry["why"], entry["first_step"], dict(cond), dict(steps), recipes, recovers))
    ids = [f.id for f in fixes]
    if len(set(ids)) != len(ids):
        raise bad(f"duplicate fix ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return Catalogue(tiers, tuple(fixes))


def load_catalogue(path: str | Path | None = None) -> Catalogue:
    """The built-in catalogue, with a user TOML merged over it when path is given.

    Merging: [tiers] keys replace or add; a [[fix]] with a built-in id replaces the fields
    it names (applies_when is replaced as a whole), a new id adds a fix, and
    ``disabled = true`` removes one. Any problem is a one-line PorterError.
    """
    raw = _read_toml(CATALOGUE_FILE)
    where = CATALOGUE_FILE
    if path is not None:
        where = Path(path)
        user = _read_toml(where)
        if not isinstance(user.get("fix", []), list) or not isinstance(user.get("tiers", {}), dict):
            raise PorterError("invalid fix catalogue: use [tiers] and [[fix]] tables", path=where)
        raw["tiers"] = {**raw.get("tiers", {}), **user.get("tiers", {})}
        by_id = {f["id"]: dict(f) for f in raw.get("fix", [])}
        for f in user.get("fix", []):
            if not isinstance(f, dict) or not isinstance(f.get("id"), str):
                raise PorterError("invalid fix catalogue: every [[fix]] needs a string id", path=where)
            if f.get("disabled") is True:
                by_id.pop(f["id"], None)
                continue
            by_id[f["id"]] = {**by_id.get(f["id"], {}), **f}
        raw["fix"] = list(by_id.values())
    return _build(raw, where)


# ---- symptoms ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Symptoms:
    """What is known about one gap group, in the terms catalogue conditions use."""

    group_id: str
    module: str
    op_class: str
    framework_op: str
    device_type: str
    target_dtype: str
    ratio: float  # target_us / source_us
    kernel_ratio: float  # target_kernels / source_kernels
    roofline_efficiency: float  # roofline_us / target_us, NaN unknown
    misaligned: bool
    dtype_changed: bool
    on_host: bool
    host_fraction: float
    recompiles: int  # -1 unknown
    introduces_error: bool
    error_ratio: float  # local_error / tolerance, NaN unknown
    already_fused: bool  # fused attention already runs here (see FUSED_ATTENTION)
    became_sort: bool  # the target runs a sort where the source ran another op
    source_compiled: bool  # the group is a torch.compile region on the source, eager ops on the target
    target_compiled: bool  # ... on the target, eager ops on the source
    outside: str = ""  # the runtime's time outside every module, of this kind ('' for a matched group)
    source_stack: str = "other"  # the source's stack (porter.core.stacks key), as `stack` is the target's
    rewrite_differs: bool = False  # a rewrite's module computes what the original does not (porter.accuracy.rewrite)


def tile_for(device_type: str, dtype: str) -> int:
    """Dimension multiple a matrix unit wants: 128 on TPU, 16 bytes of elements on GPUs, 1 on CPU."""
    dev = device_type.lower()
    if dev == "tpu":
        return TPU_TILE
    if dev in ("cuda", "rocm", "gpu", "xpu", "mtia"):
        return max(GPU_TILE_BYTES // DTYPE_BYTES.get(canonical_dtype(dtype) or "fp32", 4), 1)
    return 1


def misaligned_dims(framework_op: str, op_class: str, input_shapes: str, dtypes: str, device_type: str, dtype: str = "") -> list[int]:
    """Dims that miss the tile: K and N of a matmul, channels of a conv, head dim of attention."""
    tensors = tensors_of(input_shapes, dtypes)
    tile = tile_for(device_type, dtype or (tensors[0].dtype if tensors else ""))
    if tile <= 1 or not tensors:
        return []
    dims: list[int] = []
    if op_class == "matmul":
        gd = gemm_dims(framework_op, tensors)
        dims = [gd[2], gd[3]] if gd else []
    elif op_class == "conv" and len(tensors) >= 2 and len(tensors[1].shape) >= 3:
        dims = [tensors[1].shape[0], tensors[1].shape[1]]
    elif op_class == "attention" and tensors and len(tensors[0].shape) == 4:
        dims = [tensors[0].shape[-1]]
    return [d for d in dims if d > 1 and d % tile]


def column(groups: pd.DataFrame, name: str, default: Any) -> pd.Series:
    """An optional input column, or `default` on every row when the table lacks it."""
    return groups[name] if name in groups.columns else pd.Series([default] * len(groups), index=groups.index)


def symptoms_table(groups: pd.DataFrame, target_ceilings: Ceilings | None = None) -> pd.DataFrame:
    """One row of symptom columns per group (index aligned with groups)."""
    src = groups["source_us"].to_numpy(np.float64)
    tgt = groups["target_us"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(src > 0, tgt / src, np.where(tgt > 0, np.inf, np.nan))
        if "step_ratio" in groups.columns:  # a live pair's: each side's profiler slowdown out (fixplan)
            step = groups["step_ratio"].to_numpy(np.float64)
            ratio = np.where(np.isnan(step), ratio, step)
        sk = groups["source_kernels"].to_numpy(np.float64)
        tk = groups["target_kernels"].to_numpy(np.float64)
        kratio = np.where(sk > 0, tk / sk, np.where(tk > 0, np.inf, np.nan))
    dtype = column(groups, "dtype", "").fillna("").astype(str).map(lambda d: canonical_dtype(d) or d)
    if "roofline_us" in groups.columns:
        rl = groups["roofline_us"].to_numpy(np.float64)
    else:
        rl = roofline_us(groups["flops"], groups["bytes"], target_ceilings, dtype.to_numpy(object))
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = np.where(tgt > 0, rl / tgt, np.nan)
    host = column(groups, "host_us", 0.0).fillna(0.0).to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        host_frac = np.where(host + tgt > 0, host / (host + tgt), 0.0)
    dev = column(groups, "target_device_type", "").fillna("").astype(str)
    src_dev = column(groups, "source_device_type", "").fillna("").astype(str)
    sdt = column(groups, "source_dtype", "").fillna("").astype(str).map(lambda d: canonical_dtype(d) or d)
    on_host = ((dev == "cpu") & (src_dev != "") & (src_dev != "cpu")) | (
        (groups["target_kernels"] == 0) & (groups["source_kernels"] > 0) & (host > 0))
    shapes = column(groups, "input_shapes", "").fillna("").astype(str)
    dtypes_json = column(groups, "dtypes", "").fillna("").astype(str)
    # once per distinct op, shapes and device (groups repeat a layer's ops), not per group
    seen_mis: dict[tuple[str, ...], bool] = {}
    mis = [seen_mis[k] if k in seen_mis else seen_mis.setdefault(k, bool(misaligned_dims(*k))) for k in zip(
        groups["framework_op"].astype(str), groups["op_class"].astype(str), shapes, dtypes_json, dev, dtype)]
    seen_fused: dict[tuple[str, str], bool] = {}
    fused_op = [seen_fused[k] if k in seen_fused else seen_fused.setdefault(
        k, bool(FUSED_ATTENTION.search(k[0]) or FUSED_ATTENTION.search(k[1]))) for k in zip(
        groups["framework_op"].astype(str), column(groups, "source_framework_op", "").fillna("").astype(str))]
    already_fused = column(groups, "already_fused", False).fillna(False).astype(bool).to_numpy() | np.array(fused_op, dtype=bool)
    local = column(groups, "local_error", np.nan).to_numpy(np.float64)
    tol = column(groups, "tolerance", np.nan).to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        err_ratio = local / tol
    return pd.DataFrame({
        "group_id": groups["group_id"].astype(str),
        "module": groups["module"].fillna("").astype(str),
        "op_class": groups["op_class"].astype(str),
        "framework_op": groups["framework_op"].astype(str),
        "device_type": dev,
        "stack": column(groups, "target_stack", "other").fillna("other").astype(str),
        "source_stack": column(groups, "source_stack", "other").fillna("other").astype(str),
        "target_dtype": dtype,
        "ratio": ratio,
        "kernel_ratio": kratio,
        "roofline_efficiency": eff,
        "misaligned": mis,
        "dtype_changed": (sdt != "") & (dtype != "") & (sdt != dtype),
        "on_host": on_host.to_numpy(bool),
        "host_fraction": host_frac,
        "recompiles": column(groups, "recompiles", -1).fillna(-1).astype(int),
        "introduces_error": column(groups, "introduces_error", False).fillna(False).astype(bool),
        "error_ratio": err_ratio,
        "already_fused": already_fused,
        "source_compiled": (column(groups, "compiled", "").fillna("").astype(str) == "source").to_numpy(),
        "target_compiled": (column(groups, "compiled", "").fillna("").astype(str) == "target").to_numpy(),
        "outside": column(groups, "outside", "").fillna("").astype(str),
        "rewrite_differs": column(groups, "rewrite_differs", False).fillna(False).astype(bool).to_numpy(),
        "became_sort": [bool(_SORT.search(t)) and not _SORT.search(s) for t, s in zip(
            groups["framework_op"].astype(str), column(groups, "source_framework_op", "").fillna("").astype(str))],
    }, index=groups.index)


def symptoms_of(row: Mapping[str, Any]) -> Symptoms:
    return Symptoms(**{f: row[f] for f in Symptoms.__dataclass_fields__})


THRESHOLDS = {  # condition key -> (symptom column, +1: at least / -1: at most)
    "min_ratio": ("ratio", 1), "min_kernel_ratio": ("kernel_ratio", 1), "max_kernel_ratio": ("kernel_ratio", -1),
    "max_roofline_efficiency": ("roofline_efficiency", -1), "min_host_fraction": ("host_fraction", 1),
    "min_recompiles": ("recompiles", 1), "min_error_ratio": ("error_ratio", 1),
}


def applies(cond: Mapping[str, Any], s: Mapping[str, Any]) -> bool:
    """Whether every condition holds for one symptoms row (unknown values never satisfy); the
    runtime's time outside every module matches only a fix that asks for it (outside = [...])."""
    if s.get("outside") and "outside" not in cond:
        return False
    for key, want in cond.items():
        if key == "outside" and s.get("outside") not in want:
            return False
        if key == "op_status" and s.get("op_status") not in want:  # only porter ops rows carry it
            return False
        if key == "has_decomposition" and bool(s.get("has_decomposition")) != want:
            return False
        if key == "op_class" and s["op_class"] not in want:
            return False
        if key == "target_dtype" and s["target_dtype"] not in [canonical_dtype(w) or w for w in want]:
            return False
        if key == "device_type" and s["device_type"] not in want:
            return False
        if key == "stack" and s["stack"] not in want:
            return False
        if key == "source_stack" and s.get("source_stack", "other") not in want:
            return False
        if key in ("framework_op", "module") and not re.search(want, str(s[key]), re.IGNORECASE):
            return False
        if key in ("misaligned", "dtype_changed", "on_host", "introduces_error", "already_fused", "became_sort",
                   "source_compiled", "target_compiled", "rewrite_differs") and bool(s[key]) != want:
            return False
        threshold = THRESHOLDS.get(key)
        if threshold:
            value = float(s[threshold[0]])
            if math.isnan(value) or (threshold[1] > 0 and value < want) or (threshold[1] < 0 and value > want):
                return False
    return True


def applies_mask(cond: Mapping[str, Any], sym: pd.DataFrame) -> np.ndarray:
    """applies() for every symptoms row at once. Each condition reads one column, so it is
    decided once per distinct value of that column (exactly applies()'s rule), not per row."""
    mask = np.ones(len(sym), dtype=bool)
    for key, want in cond.items():
        col = THRESHOLDS[key][0] if key in THRESHOLDS else key
        if col not in sym.columns:  # op_status, has_decomposition: rows of porter ops only
            if key in ("op_status", "has_decomposition") and not applies({key: want}, {}):
                mask[:] = False
            continue  # other keys: applies() reads only the columns its known keys name
        if key in THRESHOLDS:  # a number per row (ratios are nearly all distinct): compared as one array
            ok = _threshold_mask(sym[col], want, THRESHOLDS[key][1])
            if ok is not None:
                mask &= ok
                continue
        codes, uniques = pd.factorize(sym[col], use_na_sentinel=False)
        ok = np.fromiter((applies({key: want}, {col: u}) for u in uniques), dtype=bool, count=len(uniques))
        mask &= ok[codes]
    if "outside" not in cond and "outside" in sym.columns:  # runtime rows: only for the fixes of their kind
        mask &= (sym["outside"] == "").to_numpy(bool)
    return mask


def _threshold_mask(values: pd.Series, want: float, sign: int) -> np.ndarray | None:
    """applies()'s threshold rule over a whole column (NaN never satisfies); None when the
    column does not convert to floats, for the per-value path."""
    try:
        v = values.to_numpy(dtype=float, na_value=np.nan)
    except (TypeError, ValueError):
        return None
    return ~np.isnan(v) & ((v >= want) if sign > 0 else (v <= want))
