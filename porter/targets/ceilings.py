"""Measured device ceilings and device facts, taken once per capture.

A roofline needs what this device actually reaches, not a datasheet: a large matmul's
FLOP/s in the model's dtype and a large copy's bytes/s. Sizes are picked to finish well
under a second on a laptop CPU; GPUs run more repeats of the same sizes.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any, Callable

import torch

CPU_BUDGET_S = 0.25  # per measurement, keeps both under a second on CPU


def torch_device(device: str) -> torch.device:
    """porter device -> torch device (ROCm builds of torch expose HIP as 'cuda')."""
    return torch.device({"rocm": "cuda", "cuda": "cuda", "mps": "mps"}.get(device, "cpu"))


def torch_sync(device: str) -> None:
    if device in ("cuda", "rocm"):
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def torch_device_info(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"type": device}
    if device in ("cuda", "rocm") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            name=torch.cuda.get_device_name(0),
            runtime=f"hip {torch.version.hip}" if torch.version.hip else f"cuda {torch.version.cuda}",
            memory_bytes=int(props.total_memory),
            multiprocessors=int(props.multi_processor_count),
        )
    elif device == "mps":
        info.update(name="Apple MPS", runtime=platform.mac_ver()[0])
    else:
        info.update(name=cpu_model_name(), runtime=f"{platform.system()} {platform.release()}",
                    threads=torch.get_num_threads())
    return info


def _best_seconds(fn: Callable[[], Any], device: str, budget_s: float) -> float:
    """Best of repeated timings of fn (after one warm-up), within budget_s."""
    fn()
    torch_sync(device)
    best, spent = float("inf"), 0.0
    while spent < budget_s or best == float("inf"):
        t0 = time.perf_counter()
        fn()
        torch_sync(device)
        dt = time.perf_counter() - t0
        best, spent = min(best, dt), spent + dt
        if spent > budget_s:
            break
    return best


def torch_ceilings(device: str, dtype: torch.dtype) -> dict[str, Any]:
    dev = torch_device(device)
    on_cpu = dev.type == "cpu"
    n = 512 if on_cpu else 8192
    if not dtype.is_floating_point:
        dtype = torch.float32
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)
    budget = CPU_BUDGET_S if on_cpu else 1.0
    t_mm = _best_seconds(lambda: torch.mm(a, b), device, budget)
    elems = (16 if on_cpu else 256) * (1 << 20) // 4  # 16 MiB (CPU) / 256 MiB (GPU) of fp32
    src = torch.empty(elems, device=dev, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    t_cp = _best_seconds(lambda: dst.copy_(src), device, budget)
    return {
        "matmul_flops_per_s": 2.0 * n**3 / t_mm,
        "matmul_shape": [n, n, n],
        "matmul_dtype": str(dtype).replace("torch.", ""),
        "copy_bytes_per_s": 2.0 * src.numel() * src.element_size() / t_cp,  # read + write
        "copy_bytes": int(src.numel() * src.element_size()),
        "method": "best of repeats, synchronised, torch",
    }
