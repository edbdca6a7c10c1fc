"""FLOPs and bytes moved per op, from the shapes and dtypes the profiler recorded.

The roofline needs, for every op, how much arithmetic it does and how many bytes it
must move at least once. Profilers rarely say (kineto's ``flops`` arg needs
``with_flops``), but they do record input shapes, and for the ops that dominate
model time (matmul, conv, attention) the cost follows from shapes alone. Everything
else is bandwidth-bound, where the bytes estimate is what matters.

Conventions (forward pass, one invocation):
* matmul: 2*B*M*K*N (one multiply and one add per MAC), as torch.utils.flop_counter.
* conv: 2*N*Cout*prod(out_spatial)*(Cin/groups)*prod(kernel). Output size needs stride,
  padding and dilation; they come from an optional ``concrete_inputs`` column, else the
  op is assumed stride 1 with "same" padding (an upper bound, flagged in ``cost_note``).
* attention: 2*B*H*Lq*Lk*(Dqk + Dv) (QK^T and PV), halved when known causal.
* norms 7, rms_norm 4, softmax 5 FLOP per element; elementwise 1 per output element;
  reductions 1 per input element.
* bytes: every tensor input read once plus the output written once; view-like ops
  (view, reshape, transpose, ...) move nothing; copies read and write.
A ``flops`` or ``bytes`` value already in the table (from the trace, or an XLA trace's HloProto
shapes: profilers.hlo_cost) wins over the estimate.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

# Canonical dtype names and their sizes in bytes.
DTYPE_BYTES: dict[str, int] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "c64": 8, "c128": 16,
}
_DTYPE_ALIASES: tuple[tuple[str, str], ...] = (
    (r"bfloat16|bf16", "bf16"),
    (r"float8|fp8|f8e", "fp8"),
    (r"half|float16|fp16|^f16$", "fp16"),
    (r"complex<double>|complex128", "c128"),
    (r"complex", "c64"),
    (r"double|float64|fp64|^f64$", "fp64"),
    (r"tf32", "tf32"),
    (r"^float$|float32|fp32|^f32$", "fp32"),
    (r"^long( int)?$|int64|^s64$|^long long", "int64"),
    (r"^int$|int32|^s32$", "int32"),
    (r"short|int16|^s16$", "int16"),
    (r"unsigned char|uint8|^u8$", "uint8"),
    (r"signed char|^int8$|^s8$", "int8"),
    (r"^bool$|^pred$", "bool"),
)
_DTYPE_RES = [(re.compile(p, re.IGNORECASE), d) for p, d in _DTYPE_ALIASES]
FLOAT_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")


@functools.lru_cache(maxsize=4096)  # a trace names a few dtypes, asked about per op and per group
def canonical_dtype(name: str) -> str:
    """'c10::BFloat16' -> 'bf16', 'float' -> 'fp32', 'long int' -> 'int64'; '' when not a dtype."""
    text = str(name).strip().removeprefix("torch.").removeprefix("c10::")
    for pattern, dtype in _DTYPE_RES:
        if pattern.search(text):
            return dtype
    return ""


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    dtype: str  # canonical, '' when unknown

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def nbytes(self, fallback: str) -> float:
        return self.numel * DTYPE_BYTES.get(self.dtype or fallback, DTYPE_BYTES.get(fallback, 4))


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float
    dtype: str
    note: str = ""


UNKNOWN = Cost(math.nan, math.nan, "", "unknown shapes")

_VIEW_OPS = {
    "view", "_unsafe_view", "reshape", "as_strided", "transpose", "t", "permute", "expand",
    "expand_as", "unsqueeze", "squeeze", "slice", "select", "narrow", "flatten", "unflatten",
    "detach", "alias", "view_as", "split", "split_with_sizes", "chunk", "unbind", "resolve_conj",
    "resolve_neg", "lift_fresh", "numpy_T", "mT", "movedim", "empty", "empty_like",
    "empty_strided", "resize_", "result_type", "is_nonzero", "bitcast", "_reshape_alias",
}
_GEMM_OPS = {"mm", "bmm", "addmm", "addbmm", "baddbmm", "linear", "matmul", "dot", "vdot",
             "_scaled_mm", "dot_general", "mv", "addmv"}
_BSHD_ATTENTION = ("_flash_attention_forward", "_efficient_attention_forward", "flash_attn")
# (argument index of the causal flag, value meaning causal) per attention op, for concrete_inputs.
_CAUSAL_ARG = {
    "scaled_dot_product_attention": (5, "true"),
    "_scaled_dot_product_flash_attention": (4, "true"),
    "_scaled_dot_product_efficient_attention": (6, "true"),
    "_scaled_dot_product_cudnn_attention": (6, "true"),
    "_flash_attention_forward": (8, "true"),
    "_efficient_attention_forward": (9, "1"),
}
# (stride, padding, dilation) argument indices per conv op, for concrete_inputs.
_CONV_ARGS = {
    "conv1d": (3, 4, 5), "conv2d": (3, 4, 5), "conv3d": (3, 4, 5),
    "convolution": (3, 4, 5), "_convolution": (3, 4, 5),
    "cudnn_convolution": (3, 2, 4),
    "miopen_convolution": (4, 3, 5), "mkldnn_convolution": (4, 3, 5),
}
_NORM_FLOPS_PER_ELEMENT = 7.0  # mean, variance (2), normalise (2), scale and shift (2)
_RMS_FLOPS_PER_ELEMENT = 4.0  # square, accumulate, scale by rsqrt, weight
_SOFTMAX_FLOPS_PER_ELEMENT = 5.0  # max, subtract, exp, sum, divide


def short_op_name(framework_op: str) -> str:
    """'aten::addmm.default' -> 'addmm'; 'jit(f)/fc1/dot_general' -> 'dot_general'."""
    name = framework_op.rsplit("/", 1)[-1].rsplit("::", 1)[-1]
    name = re.sub(r"\.(default|Tensor|Scalar|out|self|int|input)$", "", name)
    return name.strip()


def _parse_json(text: Any) -> list:
    if not isinstance(text, str) or not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _is_dims(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) for v in value)


def tensors_of(shapes_json: str, dtypes_json: str) -> list[Tensor]:
    """Tensor inputs (shape, canonical dtype) in argument order; scalars and Nones skipped.

    Tensor lists (aten::cat's first argument, nested one level deeper) are flattened.
    """
    shapes, dtypes = _parse_json(shapes_json), _parse_json(dtypes_json)
    out: list[Tensor] = []
    for i, dims in enumerate(shapes):
        dtype = canonical_dtype(dtypes[i]) if i < len(dtypes) else ""
        if _is_dims(dims) and dims:
            out.append(Tensor(tuple(dims), dtype))
        elif isinstance(dims, list) and dims and all(_is_dims(d) for d in dims):
            out.extend(Tensor(tuple(d), dtype) for d in dims if d)
    return out


def _main_dtype(tensors: list[Tensor]) -> str:
    for t in tensors:
        if t.dtype in FLOAT_DTYPES:
            return t.dtype
    return tensors[0].dtype if tensors else ""


def gemm_dims(framework_op: str, tensors: list[Tensor]) -> tuple[int, int, int, int] | None:
    """(batch, M, K, N) of a matmul-like op, or None when the shapes do not say."""
    name = short_op_name(framework_op)
    shapes = [t.shape for t in tensors]
    try:
        if name in ("addmm", "baddbmm", "addbmm", "addmv") and len(shapes) >= 3:
            shapes = shapes[1:3]
        if len(shapes) < 2:
            return None
        a, b = shapes[0], shapes[1]
        if name == "linear":
            return 1, math.prod(a[:-1]), a[-1], b[0] if len(b) == 2 else 1
        if name in ("mm", "addmm", "_scaled_mm") and len(a) == 2 and len(b) == 2:
            return 1, a[0], a[1], b[1]
        if name in ("bmm", "baddbmm", "addbmm") and len(a) == 3 and len(b) == 3:
            return a[0], a[1], a[2], b[2]
        if name in ("mv", "addmv"):
            return 1, a[0], a[1], 1
        if name in ("dot", "vdot"):
            return 1, 1, a[0], 1
        if name == "matmul":
            m = a[-2] if len(a) >= 2 else 1
            n = b[-1] if len(b) >= 2 else 1
            batch = math.prod(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))) if len(a) > 2 or len(b) > 2 else 1
            return batch, m, a[-1], n
        if name == "dot_general" and len(a) >= 2 and len(b) >= 2:
            # Contracting dims are not in the shapes: take the usual layouts ([..., M, K] x
            # [..., K, N], or a transposed rhs [..., N, K]) and equal leading batch dims.
            batch = math.prod(a[:-2]) if tuple(a[:-2]) == tuple(b[:-2]) else 1
            if a[-1] == b[-2]:
                return batch, a[-2], a[-1], b[-1]
            if a[-1] == b[-1]:
                return batch, a[-2], a[-1], b[-2]
    except (IndexError, ValueError):
        return None
    return None


def _concrete(concrete_json: str, index: int) -> Any:
    values = _parse_json(concrete_json)
    if index >= len(values):
        return None
    value = values[index]
    if isinstance(value, str):
        try:
            return json.loads(value) if value not in ("", "None") else None
        except ValueError:
            return value
    return value


def _conv_cost(name: str, tensors: list[Tensor], concrete: str, dtype: str) -> Cost:
    if len(tensors) < 2 or len(tensors[0].shape) < 3:
        return UNKNOWN
    x, w = tensors[0], tensors[1]
    spatial = x.shape[2:]
    kernel = w.shape[2:]
    if len(kernel) != len(spatial):
        return UNKNOWN
    note = ""
    idx = _CONV_ARGS.get(name)
    stride = padding = dilation = None
    if idx and concrete:
        stride, padding, dilation = (_concrete(concrete, i) for i in idx)
    if stride is None:
        out = spatial
        note = "conv: stride/padding not recorded, assumed stride 1 'same' padding"
    else:
        def each(v: Any, default: int) -> list[int]:
            if isinstance(v, int):
                return [v] * len(spatial)
            if isinstance(v, list) and v and all(isinstance(i, int) for i in v):
                return v * len(spatial) if len(v) == 1 else v
            return [default] * len(spatial)
        if padding == "same":
            out = spatial
        else:
            s, p, d = each(stride, 1), each(padding, 0), each(dilation, 1)
            out = tuple((spatial[i] + 2 * p[i] - d[i] * (kernel[i] - 1) - 1) // s[i] + 1 for i in range(len(spatial)))
    n, cout = x.shape[0], w.shape[0]
    flops = 2.0 * n * cout * math.prod(out) * w.shape[1] * math.prod(kernel)
    nbytes = sum(t.nbytes(dtype) for t in tensors) + n * cout * math.prod(out) * DTYPE_BYTES.get(dtype, 4)
    return Cost(flops, float(nbytes), dtype, note)


def _attention_cost(name: str, tensors: list[Tensor], concrete: str, dtype: str) -> Cost:
    if len(tensors) < 3 or any(len(t.shape) != 4 for t in tensors[:3]):
        return UNKNOWN
    q, k, v = (t.shape for t in tensors[:3])
    if name.startswith(_BSHD_ATTENTION):  # [B, S, H, D]
        b, lq, h, dqk = q
        lk, dv = k[1], v[3]
    else:  # [B, H, S, D]
        b, h, lq, dqk = q
        lk, dv = k[2], v[3]
    flops = 2.0 * b * h * lq * lk * (dqk + dv)
    note = ""
    causal = _CAUSAL_ARG.get(name)
    if causal and concrete:
        flag = _concrete(concrete, causal[0])
        if str(flag).lower() == causal[1]:
            flops /= 2
            note = "causal: half the score matrix"
    out_bytes = b * h * lq * dv * DTYPE_BYTES.get(dtype, 2)
    nbytes = sum(t.nbytes(dtype) for t in tensors[:3]) + out_bytes
    return Cost(flops, float(nbytes), dtype, note)


def _broadcast_numel(tensors: list[Tensor]) -> int:
    try:
        return math.prod(np.broadcast_shapes(*(t.shape for t in tensors)))
    except ValueError:
        return max(t.numel for t in tensors)


def cost_of(framework_op: str, op_class: str, shapes_json: str, dtypes_json: str, concrete: str = "") -> Cost:
    """Cost of one op invocation from its recorded shapes (NaN fields when unknown)."""
    name = short_op_name(framework_op)
    tensors = tensors_of(shapes_json, dtypes_json)
    dtype = _main_dtype(tensors)
    base = name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name
    if base in _VIEW_OPS or name in _VIEW_OPS:
        return Cost(0.0, 0.0, dtype, "view: no data moved")
    if not tensors:
        return UNKNOWN
    size = DTYPE_BYTES.get(dtype, 4)
    in_bytes = float(sum(t.nbytes(dtype) for t in tensors))
    if name in _GEMM_OPS or (op_class == "matmul" and "conv" not in name):
        dims = gemm_dims(framework_op, tensors)
        if dims is None:
            return Cost(math.nan, in_bytes, dtype, "matmul: contraction not known from shapes")
        batch, m, k, n = dims
        note = "dot_general: contracting dims inferred" if name == "dot_general" else ""
        return Cost(2.0 * batch * m * k * n, in_bytes + batch * m * n * size, dtype, note)
    if "conv" in name or op_class == "conv":
        return _conv_cost(name, tensors, concrete, dtype)
    if op_class == "attention" or "attention" in name:
        return _attention_cost(name, tensors, concrete, dtype)
    first = tensors[0]
    if op_class == "norm":
        per = _RMS_FLOPS_PER_ELEMENT if "rms" in name else _NORM_FLOPS_PER_ELEMENT
        return Cost(per * first.numel, in_bytes + first.nbytes(dtype), dtype)
    if op_class == "softmax":
        return Cost(_SOFTMAX_FLOPS_PER_ELEMENT * first.numel, in_bytes + first.nbytes(dtype), dtype)
    if op_class == "elementwise":
        out = _broadcast_numel(tensors)
        return Cost(float(out), in_bytes + out * size, dtype)
    if op_class == "reduction":
        return Cost(float(first.numel), in_bytes, dtype)
    if op_class == "embedding" and len(tensors) >= 2:
        table = tensors[0]
        index = tensors[-1]
        row = table.numel / max(table.shape[0], 1)
        gathered = index.numel * row * DTYPE_BYTES.get(table.dtype or dtype, 4)
        return Cost(0.0, 2.0 * gathered + index.nbytes("int64"), table.dtype or dtype)
    if op_class == "copy":
        if name == "copy_" and len(tensors) >= 2:
            return Cost(0.0, float(tensors[0].nbytes(dtype) + tensors[1].nbytes(dtype)), tensors[0].dtype or dtype)
        return Cost(0.0, 2.0 * in_bytes, dtype)
    if op_class == "memset":
        return Cost(0.0, float(first.nbytes(dtype)), dtype)
    return Cost(math.nan, math.nan, dtype, f"no cost model for op class {op_class!r}")


def op_costs(ops: pd.DataFrame) -> pd.DataFrame:
    """flops, bytes, dtype and cost_note per op row (same index as ``ops``).

    Needs columns framework_op, op_class, input_shapes, dtypes; uses ``flops`` and ``bytes``
    when present and not NaN, and ``concrete_inputs`` (kineto's "Concrete Inputs" as a JSON
    list) when present. Costs are computed once per distinct (op, shapes, dtypes), so
    tables of many thousands of ops take milliseconds.
    """
    n = len(ops)

    def column(name: str) -> list:
        if name not in ops.columns:
            return [""] * n
        return ["" if not isinstance(v, str) else v for v in ops[name].to_numpy(dtype=object).tolist()]

    keys = list(zip(column("framework_op"), column("op_class"), column("input_shapes"),
                    column("dtypes"), column("concrete_inputs")))
    cache: dict[tuple, Cost] = {}
    costs = []
    for key in keys:
        cost = cache.get(key)
        if cost is None:
            cost = cache[key] = cost_of(*key)
        costs.append(cost)
    flops = np.fromiter((c.flops for c in costs), dtype=np.float64, count=n)
    nbytes = np.fromiter((c.bytes for c in costs), dtype=np.float64, count=n)
    if "flops" in ops.columns:
        given = ops["flops"].to_numpy(dtype=np.float64)
        flops = np.where(np.isnan(given), flops, given)
    if "bytes" in ops.columns:  # readers that know what an op moved (profilers.hlo_cost) say so
        given = ops["bytes"].to_numpy(dtype=np.float64)
        nbytes = np.where(np.isnan(given), nbytes, given)
    out = pd.DataFrame(
        {
            "flops": flops,
            "bytes": nbytes,
            "dtype": [c.dtype for c in costs],
            "cost_note": [c.note for c in costs],
        },
        index=ops.index,
    )
    return with_twin_costs(ops, out)


_TRANSFER = re.compile(r"(?i)^(memset|memcpy)")
TWIN_TIME_FACTOR = 1.5  # a twin's device time within this factor: same kernel, like-sized work


def _rows_by_value(values: np.ndarray, rows: np.ndarray) -> dict:
    """value -> the rows (ascending) holding it, among `rows`."""
    codes, uniq = pd.factorize(values[rows])
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    return {uniq[codes[chunk[0]]]: rows[chunk] for chunk in np.split(order, cuts) if len(chunk) and codes[chunk[0]] >= 0}


def with_twin_costs(ops: pd.DataFrame, costs: pd.DataFrame) -> pd.DataFrame:
    """Stand-in ops (``synthetic``: kernels no recorded op launched) carry no shapes. Where
    another op of the same trace launched exactly the same kernels, recorded shapes, and
    took a like time (within TWIN_TIME_FACTOR), the stand-in takes that twin's cost: the
    kernel name fixes the algorithm and the time says the problem is of like size.
    """
    need = {"synthetic", "kernels", "device_us", "kernel_count"}
    if not need <= set(ops.columns) or not ops["synthetic"].any():
        return costs
    known = ((costs["flops"].fillna(0) > 0) | (costs["bytes"].fillna(0) > 0)).to_numpy()
    synth = ops["synthetic"].to_numpy(bool)
    twin_rows = np.flatnonzero(known & ~synth & (ops["kernel_count"].to_numpy() > 0))
    if not len(twin_rows):
        return costs
    kernels = ops["kernels"].to_numpy(dtype=object)
    dev = ops["device_us"].to_numpy(np.float64)
    by_kernels = _rows_by_value(kernels, twin_rows)
    # A stand-in often holds one kernel of what a recorded op launched with a memset beside it.
    parts: dict[str, list[np.ndarray]] = {}
    for key, rows in by_kernels.items():
        for name in str(key).split("\n"):
            if name and not _TRANSFER.match(name):
                parts.setdefault(name, []).append(rows)
    by_name = {name: np.sort(np.concatenate(rows)) for name, rows in parts.items()}  # row order, as recorded
    src_rows, dst_rows = [], []
    for key, rows_a in _rows_by_value(kernels, np.flatnonzero(synth & ~known)).items():
        # all stand-ins with the same kernels against their candidates at once
        cand_rows = by_kernels.get(key, by_name.get(key))
        if cand_rows is None:
            continue
        per = np.maximum(dev[cand_rows], 1e-9)
        rows_a = rows_a[dev[rows_a] > 0]
        step = max(1, 4_000_000 // len(cand_rows))  # bounds the distance matrix
        for lo in range(0, len(rows_a), step):
            part = rows_a[lo:lo + step]
            j = np.argmin(np.abs(np.log(per[None, :] / dev[part][:, None])), axis=1)
            ratio = dev[cand_rows[j]] / dev[part]
            ok = (1 / TWIN_TIME_FACTOR <= ratio) & (ratio <= TWIN_TIME_FACTOR)
            src_rows.append(cand_rows[j[ok]])
            dst_rows.append(part[ok])
    if not src_rows:
        return costs
    src, dst = np.concatenate(src_rows), np.concatenate(dst_rows)
    out = costs.copy()
    for col in ("flops", "bytes", "dtype"):
        vals = costs[col].to_numpy(dtype=object if col == "dtype" else np.float64).copy()
        vals[dst] = vals[src]
        out[col] = pd.Series(vals, index=costs.index, dtype=costs[col].dtype)
    notes = costs["cost_note"].to_numpy(dtype=object).copy()
    fw = ops["framework_op"].to_numpy(dtype=object)
    notes[dst] = [f"from its kernel twin {f}" for f in fw[src].tolist()]
    out["cost_note"] = pd.Series(notes, index=costs.index, dtype=costs["cost_note"].dtype)
    return out
