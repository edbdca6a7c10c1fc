"""Roofline time per op and the time a port could recover, from device ceilings.

Two questions for every gap between a source run and a target run: how fast could the
target do this op at all (its roofline: the larger of FLOPs over peak FLOP/s and bytes
over memory bandwidth), and how fast should it be, given that the source did it in
``source_us`` on hardware with other ceilings. Ceilings come from measurements stored in
a bundle's manifest when capture took them, else from the datasheet table in
porter/data/devices.toml. The formulas and their reasoning are in docs/perfmodel.md.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from porter.core.errors import PorterError
from porter.analysis.opcost import FLOAT_DTYPES, canonical_dtype, op_costs

__all__ = [
    "Ceilings", "DeviceSpec", "load_devices", "ceilings_for", "roofline_us",
    "expected_from_source_us", "recoverable_us", "op_costs",
]

DEVICES_FILE = Path(__file__).parents[1] / "data" / "devices.toml"


@dataclass(frozen=True)
class Ceilings:
    """What one device can do at best: peak FLOP/s per dtype and memory bytes/s."""

    device: str
    flops_per_s: Mapping[str, float]  # canonical dtype ('bf16', 'fp32', ...) -> FLOP/s
    bytes_per_s: float
    source: str  # where the numbers come from (datasheet, or "measured ...")
    measured: bool = False

    def peak_flops(self, dtype: str) -> float:
        """Peak FLOP/s for dtype; fp64 falls back to fp32's rate, non-float dtypes to NaN."""
        d = canonical_dtype(dtype) or dtype
        if d in self.flops_per_s:
            return float(self.flops_per_s[d])
        if d in FLOAT_DTYPES and "fp32" in self.flops_per_s:
            return float(self.flops_per_s["fp32"])
        return math.nan


@dataclass(frozen=True)
class DeviceSpec:
    id: str
    name: str
    match: tuple[str, ...]
    flops_per_s: Mapping[str, float]
    bytes_per_s: float
    source: str
    url: str
    memory_gb_min: float | None = None
    patterns: tuple[re.Pattern, ...] = field(default=(), compare=False, repr=False)

    def matches(self, device_name: str, memory_gb: float | None) -> bool:
        if not any(p.search(device_name) for p in self.patterns):
            return False
        if self.memory_gb_min is not None:
            return memory_gb is not None and memory_gb >= self.memory_gb_min
        return True

    def ceilings(self) -> Ceilings:
        return Ceilings(self.name, dict(self.flops_per_s), self.bytes_per_s, f"{self.source} <{self.url}>")


def load_devices(path: str | Path | None = None) -> list[DeviceSpec]:
    """The device table (built-in unless path is given); a malformed file is a PorterError."""
    path = Path(path) if path else DEVICES_FILE
    try:
        data = tomllib.loads(path.read_text())
        specs = []
        for i, d in enumerate(data["device"]):
            flops = {canonical_dtype(k) or k: float(v) for k, v in d["flops_per_s"].items()}
            specs.append(DeviceSpec(
                id=str(d["id"]), name=str(d["name"]), match=tuple(d["match"]), flops_per_s=flops,
                bytes_per_s=float(d["bytes_per_s"]), source=str(d["source"]), url=str(d.get("url", "")),
                memory_gb_min=float(d["memory_gb_min"]) if "memory_gb_min" in d else None,
                patterns=tuple(re.compile(p, re.IGNORECASE) for p in d["match"]),
            ))
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError, re.error) as exc:
        raise PorterError(f"bad device table: {type(exc).__name__}: {exc}", path=path) from None
    return specs


def _memory_gb(device: Mapping[str, Any]) -> float | None:
    props = device.get("properties") or {}
    for key in ("totalGlobalMem", "total_memory", "memory_bytes"):
        if isinstance(props.get(key), (int, float)) and props[key] > 0:
            return float(props[key]) / 1e9
    m = re.search(r"(\d+)\s*GB", str(device.get("name", "")), re.IGNORECASE)
    return float(m.group(1)) if m else None


def _spec_for(device: Mapping[str, Any], table: list[DeviceSpec]) -> DeviceSpec | None:
    name = str(device.get("name", ""))
    if not name:
        return None
    mem = _memory_gb(device)
    return next((s for s in table if s.matches(name, mem)), None)


def ceilings_for(manifest: Mapping[str, Any], table: list[DeviceSpec] | None = None) -> tuple[Ceilings | None, str]:
    """Ceilings for the device a bundle ran on, and a one-line reason for the choice.

    Measured ceilings in ``manifest["ceilings"]`` win. Their shape (written by capture):
    ``{"matmul_flops_per_s": float, "matmul_dtype": "bfloat16", "copy_bytes_per_s": float}``
    (``dtype`` is accepted for ``matmul_dtype``), either rate optional. The measured matmul rate sets that dtype's peak; other dtypes keep the
    datasheet rates scaled by the same measured/datasheet ratio when the device is in the
    table. Otherwise ``manifest["device"]["name"]`` is matched against the table
    (``properties.totalGlobalMem`` disambiguates memory variants). An unknown device
    gives ``(None, reason)``.
    """
    table = load_devices() if table is None else table
    device = manifest.get("device") or {}
    spec = _spec_for(device, table)
    measured = manifest.get("ceilings") or {}
    mm = measured.get("matmul_flops_per_s")
    bw = measured.get("copy_bytes_per_s")
    if isinstance(mm, (int, float)) or isinstance(bw, (int, float)):
        flops: dict[str, float] = dict(spec.flops_per_s) if spec else {}
        parts = []
        if isinstance(mm, (int, float)) and mm > 0:
            raw_dtype = measured.get("matmul_dtype", measured.get("dtype", "fp32"))
            dtype = canonical_dtype(str(raw_dtype)) or "fp32"
            if spec and dtype in spec.flops_per_s:
                scale = mm / spec.flops_per_s[dtype]
                flops = {k: v * scale for k, v in spec.flops_per_s.items()}
            flops[dtype] = float(mm)
            parts.append(f"matmul {dtype} {mm / 1e12:.3g} TFLOP/s")
        if isinstance(bw, (int, float)) and bw > 0:
            bytes_per_s = float(bw)
            parts.append(f"copy {bw / 1e9:.4g} GB/s")
        else:
            bytes_per_s = spec.bytes_per_s if spec else math.nan
        name = device.get("name") or (spec.name if spec else "unknown device")
        why = "measured in the bundle (" + ", ".join(parts) + ")"
        if spec:
            why += f"; other rates from the {spec.name} datasheet, scaled"
        return Ceilings(str(name), flops, bytes_per_s, why, measured=True), why
    if spec:
        return spec.ceilings(), f"datasheet: {spec.name} ({spec.source})"
    name = device.get("name") or "(no device name in the manifest)"
    return None, f"unknown device {name!r}: not in the device table; add it to porter/data/devices.toml or measure ceilings at capture"


def _per_dtype(dtype: str | Any, n: int) -> np.ndarray:
    if isinstance(dtype, str):
        return np.full(n, dtype, dtype=object)
    return np.asarray(dtype, dtype=object)


def _peak(ceilings: Ceilings, dtypes: np.ndarray) -> np.ndarray:
    uniq = {d: ceilings.peak_flops(str(d)) for d in set(dtypes.tolist())}
    return np.array([uniq[d] for d in dtypes.tolist()], dtype=np.float64)


def roofline_us(flops: Any, bytes_: Any, ceilings: Ceilings | None, dtype: str | Any = "fp32") -> np.ndarray:
    """Least time (us) the device needs: max(flops / peak FLOP/s, bytes / bandwidth).

    A NaN flops (or a dtype with no FLOP/s, e.g. int64) leaves the memory term alone;
    NaN when neither term is known or ceilings is None.
    """
    f = np.atleast_1d(np.asarray(flops, dtype=np.float64))
    b = np.atleast_1d(np.asarray(bytes_, dtype=np.float64))
    f, b = np.broadcast_arrays(f, b)
    if ceilings is None:
        return np.full(f.shape, np.nan)
    compute = f / _peak(ceilings, _per_dtype(dtype, f.size).reshape(-1)).reshape(f.shape)
    memory = b / ceilings.bytes_per_s
    with np.errstate(invalid="ignore"):
        t = np.fmax(compute, memory)  # fmax: a NaN term yields to the other
    return t * 1e6


def expected_from_source_us(
    source_us: Any,
    source_ceilings: Ceilings | None,
    target_ceilings: Ceilings | None,
    *,
    flops: Any = np.nan,
    bytes_: Any = np.nan,
    dtype: str | Any = "fp32",
) -> tuple[np.ndarray, np.ndarray]:
    """Source time moved to the target's hardware, and the basis used per op.

    With flops/bytes known, the ratio is roofline(target) / roofline(source): each
    device's bound (compute or memory) is chosen by the op's arithmetic intensity
    against that device's ridge point. With costs unknown the op is taken as
    memory-bound (bandwidth ratio). Without both devices' ceilings the source time is
    used as is ("unscaled"). Basis per op: "compute", "memory", "bandwidth ratio",
    "unscaled".
    """
    s = np.atleast_1d(np.asarray(source_us, dtype=np.float64))
    n = s.size
    f = np.broadcast_to(np.asarray(flops, dtype=np.float64), s.shape)
    b = np.broadcast_to(np.asarray(bytes_, dtype=np.float64), s.shape)
    if source_ceilings is None or target_ceilings is None:
        return s.copy(), np.full(n, "unscaled", dtype=object)
    rl_t = roofline_us(f, b, target_ceilings, dtype)
    rl_s = roofline_us(f, b, source_ceilings, dtype)
    bw_ratio = source_ceilings.bytes_per_s / target_ceilings.bytes_per_s
    known = np.isfinite(rl_t) & np.isfinite(rl_s) & (rl_s > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(known, rl_t / np.where(known, rl_s, 1.0), bw_ratio)
        mem_t = b / target_ceilings.bytes_per_s * 1e6
    basis = np.where(~known, "bandwidth ratio", np.where(rl_t > mem_t * (1 + 1e-12), "compute", "memory")).astype(object)
    return s * ratio, basis


def recoverable_us(
    target_us: Any,
    source_us: Any,
    roofline_target_us: Any,
    source_ceilings: Ceilings | None,
    target_ceilings: Ceilings | None,
    *,
    flops: Any = np.nan,
    bytes_: Any = np.nan,
    dtype: str | Any = "fp32",
) -> np.ndarray:
    """Time (us) a fix could win back: target - min(roofline, source scaled), never < 0.

    min() takes the better of the two bounds on what the target could achieve: its
    roofline, and what the source's time predicts for the target's hardware
    (expected_from_source_us). A NaN bound yields to the other; with neither, nothing is
    claimed (0). See docs/perfmodel.md for why this is an upper bound and for
    ``demonstrated`` (the source-only bound) that rank_fixes reports beside it.
    """
    t = np.atleast_1d(np.asarray(target_us, dtype=np.float64))
    rl = np.broadcast_to(np.asarray(roofline_target_us, dtype=np.float64), t.shape)
    scaled, _ = expected_from_source_us(source_us, source_ceilings, target_ceilings, flops=flops, bytes_=bytes_, dtype=dtype)
    best = np.fmin(rl, np.broadcast_to(scaled, t.shape))
    gain = np.where(np.isnan(best), 0.0, t - best)
    return np.maximum(gain, 0.0)
