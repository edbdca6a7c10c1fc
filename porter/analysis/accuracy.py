"""Where a port loses accuracy: error metrics, per-module blame, and the fp64 oracle.

Per module two errors are compared against the source run's output of that module:
* propagated: the target run end to end (inherits everything upstream did);
* local: the module alone on the target, fed the source's inputs (shadow mode, as
  torch.ao.ns shadow loggers and Polygraphy's layerwise comparisons do).
A module *introduces* error when its local error is above the dtype's tolerance and is a
large share of its propagated error; modules that only inherit upstream error have small
local error and are not blamed. Works on torch tensors or numpy arrays; everything is
compared in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from porter.core.errors import BundleError
from porter.analysis.opcost import canonical_dtype

INTRODUCES_SHARE = 0.5  # local error must be at least this share of the propagated error


@dataclass(frozen=True)
class Tolerance:
    rel_l2: float
    reason: str


# Relative-L2 tolerances per compute dtype. u is the unit roundoff (2^-(mantissa bits+1)).
# A well-conditioned dot product of length n drifts by about u*sqrt(n) relative, and a
# model chains a few of them, so a tolerance of tens to hundreds of u separates normal
# rounding from a real loss. fp32 matches torch._dynamo's default accuracy tol (1e-4).
TOLERANCES: dict[str, Tolerance] = {
    "fp64": Tolerance(1e-10, "u = 1.1e-16; anything above 1e-10 is a real difference"),
    "fp32": Tolerance(1e-4, "u = 6e-8; 1e-4 (torch._dynamo's default) leaves room for long reductions"),
    "tf32": Tolerance(5e-3, "TF32 keeps 10 mantissa bits, u = 4.9e-4; ~10u for accumulated matmuls"),
    "fp16": Tolerance(5e-3, "u = 4.9e-4 (10 mantissa bits); ~10u"),
    "bf16": Tolerance(3e-2, "u = 3.9e-3 (7 mantissa bits); ~8u"),
    "fp8": Tolerance(1.5e-1, "e4m3 keeps 3 mantissa bits, u = 6.3e-2; ~2u"),
}
ORACLE_MULTIPLIER = {"fp32": 2.0, "fp64": 2.0, "tf32": 3.0, "bf16": 3.0, "fp16": 3.0, "fp8": 3.0}


def tolerance_for(dtype: str, overrides: Mapping[str, float] | None = None) -> float:
    """Relative-L2 tolerance for a dtype; overrides maps dtype -> tolerance."""
    d = canonical_dtype(dtype) or dtype
    if overrides and d in overrides:
        return float(overrides[d])
    return TOLERANCES.get(d, TOLERANCES["fp32"]).rel_l2


def as_float64(x: Any) -> np.ndarray:
    """A torch tensor (any dtype, any device) or array-like as a float64 numpy array."""
    if hasattr(x, "detach") and hasattr(x, "double"):
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


@dataclass(frozen=True)
class ErrorMetrics:
    max_abs: float
    rel_l2: float  # ||a - r|| / ||r||
    cosine: float  # <a, r> / (||a|| ||r||)
    sqnr_db: float  # 10 log10(||r||^2 / ||a - r||^2); inf when identical

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": v for k, v in self.__dict__.items()}


NAN_METRICS = ErrorMetrics(math.nan, math.nan, math.nan, math.nan)


def error_metrics(reference: Any, actual: Any) -> ErrorMetrics:
    """Metrics of actual against reference (shapes must match; both flattened)."""
    r = as_float64(reference).ravel()
    a = as_float64(actual).ravel()
    if r.shape != a.shape:
        raise ValueError(f"shape mismatch: reference {r.shape} vs actual {a.shape}")
    if r.size == 0:
        return NAN_METRICS
    diff = a - r
    err2 = float(np.dot(diff, diff))
    ref2 = float(np.dot(r, r))
    act2 = float(np.dot(a, a))
    rel = math.sqrt(err2 / ref2) if ref2 > 0 else (0.0 if err2 == 0 else math.inf)
    cos = float(np.dot(a, r)) / math.sqrt(ref2 * act2) if ref2 > 0 and act2 > 0 else (1.0 if err2 == 0 else 0.0)
    sqnr = math.inf if err2 == 0 else (10 * math.log10(ref2 / err2) if ref2 > 0 else -math.inf)
    return ErrorMetrics(float(np.max(np.abs(diff))), rel, cos, sqnr)


def compare_modules(
    source_outputs: Mapping[str, Any],
    target_outputs: Mapping[str, Any],
    local_outputs: Mapping[str, Any] | None = None,
    *,
    dtype: str = "fp32",
    tolerances: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """Per module: propagated and local error against the source, and who introduces error.

    Columns: module, propagated_{max_abs,rel_l2,cosine,sqnr_db}, local_{...} (NaN without
    local_outputs), tolerance, introduces_error (bool). The rule:
    local_rel_l2 > tolerance AND local_rel_l2 >= INTRODUCES_SHARE * propagated_rel_l2,
    and no descendant module (path below this one) that introduces error accounts for
    at least INTRODUCES_SHARE of this module's local error: a parent that merely contains
    the lossy child is not blamed. ``dtype`` is the dtype the model is meant to run in.
    """
    tol = tolerance_for(dtype, tolerances)
    rows = []
    for module in source_outputs:
        if module not in target_outputs:
            continue
        prop = error_metrics(source_outputs[module], target_outputs[module])
        local = NAN_METRICS
        if local_outputs is not None and module in local_outputs:
            local = error_metrics(source_outputs[module], local_outputs[module])
        rows.append({"module": module, **prop.as_dict("propagated_"), **local.as_dict("local_"), "tolerance": tol})
    cols = ["module", *(f"propagated_{k}" for k in NAN_METRICS.__dict__), *(f"local_{k}" for k in NAN_METRICS.__dict__), "tolerance"]
    df = pd.DataFrame(rows, columns=cols)
    df["introduces_error"] = introducers(df, tol)
    return df


def introducers(df: pd.DataFrame, tol: float) -> pd.Series:
    """compare_modules' blame rule over a frame with module, local_rel_l2, propagated_rel_l2.

    A NaN propagated error (not measured per module) does not block blame: the local error
    then decides alone."""
    local = df["local_rel_l2"].to_numpy(dtype=float)
    prop = np.nan_to_num(df["propagated_rel_l2"].to_numpy(dtype=float), nan=0.0)
    with np.errstate(invalid="ignore"):
        candidate = (local > tol) & (local >= INTRODUCES_SHARE * prop)
    flags = dict(zip(df["module"], candidate))
    errs = dict(zip(df["module"], local))
    for module in sorted(flags, key=lambda m: -m.count("/")):  # innermost first
        if not flags[module]:
            continue
        prefix = f"{module}/" if module else ""
        explained = any(flags[m] and errs[m] >= INTRODUCES_SHARE * errs[module]
                        for m in flags if m != module and m.startswith(prefix))
        if explained:
            flags[module] = False
    return df["module"].map(flags).fillna(False).astype(bool)


# ---------------------------------------------------------------- sketches (bounded, cross-host)

@dataclass
class Sketches:
    """A bundle's per-module sketches (porter.targets.sketch): summaries and sampled elements."""

    summaries: dict[str, dict[str, Any]]
    samples: dict[str, np.ndarray]


def renamed_sketches(sk: Sketches, mapping: dict[str, str]) -> Sketches:
    """A side's sketches under other module names (a rewrite's modules in the source's names)."""
    return Sketches({mapping.get(k, k): v for k, v in sk.summaries.items()},
                    {mapping.get(k, k): v for k, v in sk.samples.items()})


def load_sketches(bundle_path: str | Path) -> Sketches | None:
    """activations/sketch.{json,safetensors} of a bundle, None when it has none."""
    import json

    from safetensors.numpy import load_file

    folder = Path(bundle_path) / "activations"
    if not (folder / "sketch.json").is_file():
        return None
    try:
        summaries = json.loads((folder / "sketch.json").read_text())
        samples = load_file(str(folder / "sketch.safetensors"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"cannot read activation sketches: {exc}", path=folder) from None
    return Sketches(summaries, dict(samples))


def sampled_rel_l2(reference: np.ndarray, actual: np.ndarray, numel: int) -> tuple[float, float]:
    """Relative L2 of actual vs reference estimated from k sampled elements, and its standard error.

    The estimate is sqrt(sum d^2 / sum r^2) over the samples (d = actual - reference), a
    ratio estimator of the full tensor's ||d||^2 / ||r||^2. Its standard error comes from
    the delta method over the k sample pairs, with the finite-population correction
    (1 - k/numel), so it is 0 when every element was sampled. It says how far the estimate
    may be from the full-tensor value when error is spread over the elements; an error
    confined to a few elements can fall between samples (max_abs and NaN/Inf counts, exact
    over the whole tensor, are reported beside it for that reason).
    """
    r = np.asarray(reference, dtype=np.float64)
    a = np.asarray(actual, dtype=np.float64)
    k = r.size
    if k == 0 or r.shape != a.shape:
        return math.nan, math.nan
    d2, r2 = (a - r) ** 2, r * r
    mr2 = float(r2.mean())
    if mr2 == 0:
        return (0.0, 0.0) if float(d2.sum()) == 0 else (math.inf, math.nan)
    ratio = float(d2.mean()) / mr2
    fpc = max(0.0, 1.0 - k / max(numel, k))
    var_ratio = float(np.var(d2 - ratio * r2, ddof=1)) / (k * mr2 * mr2) * fpc if k > 1 else 0.0
    est = math.sqrt(ratio)
    se = math.sqrt(var_ratio) / (2 * est) if est > 0 else 0.0
    return est, se


def same_layout(a: Any, b: Any) -> bool:
    """Two shapes whose elements correspond in flat order (size-1 dimensions aside). The same
    element count is not enough: [2, 2, 32, 64] and [2, 32, 128] hold other elements at the
    sampled positions, so comparing them measures a transpose, not an error."""
    return [int(d) for d in a if int(d) != 1] == [int(d) for d in b if int(d) != 1]


def compare_sketches(source: Sketches, target: Sketches) -> tuple[pd.DataFrame, dict[str, str]]:
    """Per module both bundles sketched: sampled propagated rel-L2 (with its standard error),
    exact norms, max |x| and NaN/Inf counts. Also module -> reason for each module not compared."""
    rows, gaps = [], {}
    for module, s in source.summaries.items():
        t = target.summaries.get(module)
        if t is None:
            gaps[module] = "the target bundle has no sketch of it"
            continue
        if not same_layout(s["shape"], t["shape"]) or module not in source.samples or module not in target.samples:
            gaps[module] = f"shapes differ: source {s['shape']}, target {t['shape']}"
            continue
        est, se = sampled_rel_l2(source.samples[module], target.samples[module], int(s["numel"]))
        rows.append({"module": module, "propagated_rel_l2": est, "propagated_rel_l2_se": se,
                     "sampled": int(min(len(source.samples[module]), s["numel"])), "numel": int(s["numel"]),
                     "source_l2": s["l2"], "target_l2": t["l2"], "source_max_abs": s["max_abs"],
                     "target_max_abs": t["max_abs"], "target_nan": t["nan"], "target_inf": t["inf"]})
    for module in target.summaries:
        if module not in source.summaries:
            gaps[module] = "the source bundle has no sketch of it"
    return pd.DataFrame(rows), gaps


def first_over(df: pd.DataFrame, tol: float, column: str = "propagated_rel_l2") -> str | None:
    """The first module (in the frame's order: the order modules finished) whose error exceeds tol."""
    over = df[df[column] > tol]
    return None if over.empty else str(over["module"].iloc[0])


@dataclass(frozen=True)
class OracleVerdict:
    passed: bool
    target_error: float  # rel L2 of target vs fp64
    source_error: float  # rel L2 of source vs fp64
    bound: float  # multiplier * source_error + tol / 10
    multiplier: float


def oracle_verdict(source: Any, target: Any, fp64_reference: Any, *, dtype: str = "fp32",
                   tolerances: Mapping[str, float] | None = None) -> OracleVerdict:
    """Inductor's accuracy rule: err(target, fp64) <= m * err(source, fp64) + tol/10.

    m is 2 for fp32 and 3 for bf16/fp16, as torch._dynamo's checker uses. The error is the
    relative L2 (torch uses RMSE with an absolute tol; relative L2 lets one tolerance table
    serve tensors of any scale). The target need not match the source; it must not be
    much further from the exact answer than the source is.
    """
    d = canonical_dtype(dtype) or "fp32"
    m = ORACLE_MULTIPLIER.get(d, 2.0)
    t_err = error_metrics(fp64_reference, target).rel_l2
    s_err = error_metrics(fp64_reference, source).rel_l2
    bound = m * s_err + tolerance_for(d, tolerances) / 10
    return OracleVerdict(bool(t_err <= bound), t_err, s_err, bound, m)


@dataclass
class ShadowRun:
    outputs: dict[str, Any]
    failures: dict[str, str]  # module path -> one-line reason


def shadow_run(
    module_by_path: Mapping[str, Any],
    source_inputs: Mapping[str, Any],
    run_fn: Callable[[Any, Any], Any],
) -> ShadowRun:
    """Run each module alone on the target, fed the source's recorded input.

    run_fn(module, source_input) runs one submodule on the target stack and returns its
    output (moving data to and from the device is run_fn's business), so any stack works:
    eager on another device, a compiled submodule, an exported ONNX piece. A module whose
    run raises is recorded in ``failures`` and left out of ``outputs``.
    """
    outputs: dict[str, Any] = {}
    failures: dict[str, str] = {}
    for path, inp in source_inputs.items():
        module = module_by_path.get(path)
        if module is None:
            continue
        try:
            outputs[path] = run_fn(module, inp)
        except Exception as exc:  # noqa: BLE001 - a failing module is a finding, not a crash
            failures[path] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return ShadowRun(outputs, failures)


@dataclass
class SavedActivations:
    outputs: dict[str, Any]
    inputs: dict[str, Any]


def load_activations(bundle_path: str | Path) -> SavedActivations:
    """Per-module tensors a capture saved: activations/{outputs,inputs}.safetensors.

    Keys are module paths ("blocks/0/attn"). inputs.safetensors is optional (empty dict).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(bundle_path) / "activations"
    out_file = folder / "outputs.safetensors"
    if not out_file.is_file():
        raise BundleError("no saved activations", path=out_file, hint="capture with activations enabled")
    try:
        outputs = load_file(str(out_file))
        in_file = folder / "inputs.safetensors"
        inputs = load_file(str(in_file)) if in_file.is_file() else {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise BundleError(f"cannot read activations: {exc}", path=folder) from None
    return SavedActivations(dict(outputs), dict(inputs))
