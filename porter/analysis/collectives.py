"""Collectives as their own class: which device activity is one, what kind, how many bytes.

NCCL and RCCL name their kernels `ncclKernel_AllReduce_RING_LL_Sum_float` or
`ncclDevKernel_AllGather_RING_LL(...)` (algorithm and protocol in the name), XLA names its ops
`all-reduce.3`, `reduce-scatter-start`, PyTorch's annotations say `nccl:all_reduce` and its c10d
ops `c10d::allgather_`. All of them map to one kind vocabulary here, so that a CUDA job's
all-reduce meets a ROCm or TPU job's all-reduce. Bytes come from the launching op's recorded
input shapes and dtypes (the `nccl:*` annotation carries the tensor), when the trace recorded
shapes.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv",
         "collective_permute", "barrier")

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((k, re.compile(p, re.IGNORECASE)) for k, p in (
    ("reduce_scatter", r"reduce[-_]?scatter"),
    ("all_reduce", r"all[-_]?reduce"),
    ("all_gather", r"all[-_]?gather"),
    ("all_to_all", r"all[-_]?to[-_]?all|alltoall"),
    ("collective_permute", r"collective[-_]?permute"),
    ("broadcast", r"broadcast"),
    ("send_recv", r"send[-_]?recv|sendrecv|nccl:send|nccl:recv|\bsend\b|\brecv\b"),
    ("barrier", r"barrier"),
    ("reduce", r"nccl:reduce|ncclKernel_Reduce|ncclDevKernel_Reduce|c10d::reduce_"),
))
_COMM_LIBRARY = re.compile(r"nccl|rccl|c10d::|^(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)",
                           re.IGNORECASE)
_ALGO_PROTO = re.compile(r"_(RING|TREE|COLLNET\w*?|NVLS\w*?|PAT)_(LL128|LL|SIMPLE)", re.IGNORECASE)

DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "c10::half": 2, "half": 2, "c10::bfloat16": 2,
               "bfloat16": 2, "bf16": 2, "f16": 2, "f32": 4, "long int": 8, "long": 8, "int64": 8, "int": 4,
               "int32": 4, "short int": 2, "signed char": 1, "unsigned char": 1, "char": 1, "bool": 1, "int8": 1,
               "uint8": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1}

# bus bandwidth = algorithm bandwidth x this factor, n ranks (NCCL's own convention, nccl-tests PERFORMANCE.md)
_BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
               "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


def kind_of(name: str) -> str | None:
    """The collective kind a kernel or op name states, None when it names no collective."""
    if not _COMM_LIBRARY.search(name):
        return None
    for kind, pattern in _PATTERNS:
        if pattern.search(name):
            return kind
    return None


def algorithm_protocol(kernel: str) -> tuple[str, str]:
    """NCCL/RCCL algorithm and protocol from a kernel name (RING, LL), ('', '') when it says none."""
    m = _ALGO_PROTO.search(kernel)
    return (m.group(1).upper(), m.group(2).upper()) if m else ("", "")


def bus_factor(kind: str, n: int) -> float:
    """Bus bandwidth over algorithm bandwidth for a collective of n ranks."""
    return _BUS_FACTOR.get(kind, lambda n: 1.0)(max(n, 1))


def tensor_bytes(shapes: str, dtypes: str) -> float:
    """Bytes of the first tensor input recorded (NaN when no shape or an unknown dtype)."""
    try:
        dims, types = json.loads(shapes) if shapes else [], json.loads(dtypes) if dtypes else []
    except ValueError:
        return float("nan")
    for d, t in zip(dims, types):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            size = DTYPE_BYTES.get(str(t).lower())
            return float(np.prod(d, dtype=np.float64) * size) if size else float("nan")
    return float("nan")


COLUMNS = ("op_id", "step", "name", "kind", "start_us", "end_us", "dur_us", "bytes", "dtype", "algorithm",
           "protocol", "stream")  # collective_kernels' table


def is_collective(kernels: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Which kernel rows are communication: named as a collective by their library, or launched
    by an op of class collective."""
    named = np.array([kind_of(n) is not None for n in kernels["name"].to_numpy()], dtype=bool)
    op_class = ops.set_index("op_id")["op_class"].reindex(kernels["op_id"].to_numpy()).to_numpy()
    return named | ((op_class == "collective") & (kernels["kind"].to_numpy() == "kernel"))


def _message(op_id: int, by_id: pd.DataFrame, levels: int = 3) -> tuple[float, str]:
    """Bytes and dtype of a collective's message: the launching op's or its nearest enclosing
    op's recorded message size (record_param_comms), else the first tensor's shape and dtype."""
    chain, at = [], op_id
    for _ in range(levels + 1):
        if at not in by_id.index:
            break
        chain.append(by_id.loc[at])
        at = int(chain[-1]["parent_id"])
    for op in chain:
        if np.isfinite(op["bytes"]) and op["bytes"] > 0:
            return float(op["bytes"]), ""
    for op in chain:
        nbytes = tensor_bytes(str(op["input_shapes"]), str(op["dtypes"]))
        if np.isfinite(nbytes):
            return nbytes, str(json.loads(op["dtypes"])[0])
    return float("nan"), ""


def collective_kernels(kernels: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """One row per collective kernel, in device order: kind (the launching op's name first: NCCL
    runs an all-to-all as SendRecv kernels), bytes, algorithm and protocol."""
    mask = is_collective(kernels, ops)
    k = kernels[mask].sort_values("start_us", kind="stable")
    by_id = ops.set_index("op_id")
    rows = []
    for r in k.itertuples(index=False):
        op_name = str(by_id.loc[r.op_id, "name"]) if r.op_id in by_id.index else ""
        kind = kind_of(op_name) or kind_of(r.name) or "other"
        nbytes, dtype = _message(int(r.op_id), by_id)
        algo, proto = algorithm_protocol(r.name)
        rows.append((int(r.op_id), int(r.step), r.name, kind, float(r.start_us), float(r.start_us + r.dur_us),
                     float(r.dur_us), nbytes, dtype, algo, proto, int(r.stream)))
    return pd.DataFrame(rows, columns=list(COLUMNS))
