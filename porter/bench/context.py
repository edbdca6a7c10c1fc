"""Who, where and with what a benchmark ran: the series key and the per-run context.

A series is (case, device class, target): only runs of the same series are compared.
Everything else that can move a number (library versions, driver and firmware, the
commit of the model code, load average, clocks) is recorded per run, outside the key,
so a regression report can say what changed between the runs it compares. The
environment part (machine + software) is hashed so identical environments share a row.

Torch-free: versions come from package metadata, devices from files and vendor tools.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

VERSIONED = ("torch", "jax", "jaxlib", "torchax", "onnxruntime", "onnx", "numpy", "triton")
SEP = " | "


@dataclass(frozen=True)
class SeriesKey:
    case: str
    device_class: str  # e.g. "cpu:AMD EPYC 9654", "cuda:NVIDIA H100 80GB HBM3"
    target: str  # e.g. "cpu:inductor"

    @property
    def text(self) -> str:
        return SEP.join((self.case, self.device_class, self.target))

    @classmethod
    def parse(cls, text: str) -> "SeriesKey":
        case, device_class, target = text.split(SEP)
        return cls(case, device_class, target)


def device_class(device: str, device_name: str) -> str:
    """The device kind and model, never its serial or index: runs on two identical GPUs compare."""
    return f"{device}:{device_name or 'unknown'}"


def versions() -> dict[str, str]:
    """Installed versions of the frameworks a number depends on (absent ones left out)."""
    found = {}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def clocks() -> dict[str, Any]:
    """CPU frequency and governor where the kernel exposes them (often not in containers)."""
    base = "/sys/devices/system/cpu/cpu0/cpufreq/"
    out: dict[str, Any] = {}
    for key, name in (("cur_khz", "scaling_cur_freq"), ("max_khz", "cpuinfo_max_freq"), ("governor", "scaling_governor")):
        value = _read(base + name)
        if value:
            out[key] = int(value) if value.isdigit() else value
    return out


def _tool(args: list[str]) -> str:
    if not shutil.which(args[0]):
        return ""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def drivers() -> dict[str, str]:
    """GPU driver and firmware (VBIOS) versions from nvidia-smi / rocm-smi, where present."""
    out = {}
    nv = _tool(["nvidia-smi", "--query-gpu=name,driver_version,vbios_version", "--format=csv,noheader"])
    if nv:
        out["nvidia"] = nv.splitlines()[0]
    amd = _tool(["rocm-smi", "--showdriverversion", "--showvbios", "--json"])
    if amd:
        out["rocm"] = " ".join(amd.split())[:400]
    return out


def git_commit(path: Path) -> str:
    """HEAD of the git work tree holding path, with '+dirty' when it has changes; '' outside git."""
    folder = path if path.is_dir() else path.parent
    head = _tool(["git", "-C", str(folder), "rev-parse", "HEAD"])
    if not head:
        return ""
    dirty = _tool(["git", "-C", str(folder), "status", "--porcelain", "--", str(path)])
    return head + ("+dirty" if dirty else "")


def model_commit(model: str) -> str:
    """Commit of the code defining model: its file's repository, or porter's for built-ins."""
    ref = model.rpartition(":")[0]
    if ref and (ref.endswith(".py") or "/" in ref):
        return git_commit(Path(ref).resolve())
    return git_commit(Path(__file__).resolve().parents[1] / "capture" / "models")


def environment(device_infos: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The machine and software of a run (hashed into the environment id)."""
    return {
        "host": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "versions": versions(),
        "drivers": drivers(),
        "devices": {k: device_infos[k] for k in sorted(device_infos)},
    }


def environment_id(env: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(env, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_context(models: list[str], threads: int) -> dict[str, Any]:
    """What may differ between runs on one environment: commits, load, threads, clocks."""
    return {
        "model_commits": {m: model_commit(m) for m in sorted(set(models))},
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else [],
        "threads": threads,
        "clocks": clocks(),
    }


__all__ = ["SEP", "SeriesKey", "device_class", "environment", "environment_id", "run_context", "versions"]
