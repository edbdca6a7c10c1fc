"""A bounded record of one activation: exact summaries plus a fixed-seed sample of elements.

A capture keeps, per module output, its norm, largest magnitude, NaN/Inf counts and the
values at SAMPLES positions drawn with a fixed seed from the element count alone, so two
captures of the same model on different hosts sample the same positions and their samples
correspond element for element. Memory is SAMPLES values per module, whatever the model's
size: nothing is capped or skipped. Full tensors are saved only for the modules named with
``porter capture --modules`` (the suspects a sketch comparison points at).

Torch-free apart from the tensor helpers' argument types; stacks compute the same fields
in their own array library (the XLA stack inside its jitted program).
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

SAMPLES = 1024  # sampled elements per module output; the sampling error of rel-L2 scales as 1/sqrt(k)
SEED = 0x5EED
SKETCH_FILE = "sketch.safetensors"  # module path -> float64 samples
SUMMARY_FILE = "sketch.json"  # module path -> Summary fields
CALL_SEP = "#"  # full tensors: "<path>#in<i>" (tensor leaves of (args, kwargs)), "<path>#out<i>"


@functools.lru_cache(maxsize=256)
def positions(numel: int, k: int = SAMPLES) -> np.ndarray:
    """Sorted flat element indices sampled for a tensor of numel elements (all when numel <= k)."""
    if numel <= k:
        return np.arange(numel, dtype=np.int64)
    rng = np.random.default_rng([SEED, numel])
    return np.sort(rng.choice(numel, size=k, replace=False)).astype(np.int64)


@dataclass(frozen=True)
class Summary:
    shape: list[int]
    dtype: str
    numel: int
    l2: float  # over finite elements
    max_abs: float  # over finite elements
    nan: int
    inf: int


def torch_sketch(t: Any) -> tuple[Summary, np.ndarray]:
    """Summary and samples of a torch tensor (any device, any float dtype), as float64."""
    import torch

    flat = t.detach().reshape(-1)
    finite = torch.isfinite(flat)
    clean = torch.where(finite, flat, torch.zeros((), dtype=flat.dtype, device=flat.device)).double()
    idx = torch.from_numpy(positions(flat.numel())).to(flat.device)
    samples = flat[idx].double().cpu().numpy()
    summary = Summary(
        shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""), numel=int(flat.numel()),
        l2=float(torch.linalg.vector_norm(clean)), max_abs=float(clean.abs().max()) if flat.numel() else 0.0,
        nan=int(torch.isnan(flat).sum()), inf=int(torch.isinf(flat).sum()),
    )
    return summary, samples


def save_sketches(folder: Path, summaries: dict[str, Summary], samples: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v, dtype=np.float64) for k, v in samples.items()}, str(folder / SKETCH_FILE))
    (folder / SUMMARY_FILE).write_text(json.dumps({k: asdict(v) for k, v in summaries.items()}, indent=1) + "\n")


def call_key(path: str, side: str, i: int) -> str:
    """Safetensors key of the i-th tensor leaf of a module's call (side 'in') or output ('out')."""
    return f"{path}{CALL_SEP}{side}{i}"
