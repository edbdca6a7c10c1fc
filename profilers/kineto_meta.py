"""Facts about the recorded run from a Kineto trace's top-level keys: device, versions."""

from __future__ import annotations

from typing import Any

from profilers.base import TraceMeta
from profilers.kineto_events import Document

_VERSION_KEYS = {
    "cupti_version": "cupti",
    "cuda_runtime_version": "cuda_runtime",
    "cuda_driver_version": "cuda_driver",
    "roctracer_version": "roctracer",
    "hip_runtime_version": "hip_runtime",
    "hip_driver_version": "hip_driver",
}
_AMD_NAME_HINTS = ("amd", "instinct", "radeon", "mi300", "mi250", "mi210", "mi100")


def first_device(doc: Document) -> dict[str, Any]:
    props = doc.deviceProperties
    if isinstance(props, list) and props and isinstance(props[0], dict):
        return props[0]
    return {}


def device_type(doc: Document, categories: list[str], runtime_names: list[str], has_device_work: bool) -> str:
    """cuda, rocm, mtia, or cpu when the trace holds no device activity at all."""
    if not has_device_work:
        return "cpu"
    if any(c.lower().startswith("mtia") for c in categories):
        return "mtia"
    if doc.roctracer_version is not None or doc.hip_runtime_version is not None or doc.hip_driver_version is not None:
        return "rocm"
    if any(n.startswith("hip") for n in runtime_names):
        return "rocm"
    name = str(first_device(doc).get("name", "")).lower()
    if any(h in name for h in _AMD_NAME_HINTS):
        return "rocm"
    return "cuda"


def _find_key(obj: Any, key: str, depth: int = 4) -> Any:
    """First value stored under `key` in nested dicts (not lists), or None."""
    if not isinstance(obj, dict) or depth < 0:
        return None
    if key in obj:
        return obj[key]
    for value in obj.values():
        found = _find_key(value, key, depth - 1)
        if found is not None:
            return found
    return None


def framework_versions(doc: Document) -> dict[str, str]:
    out: dict[str, str] = {}
    torch = _find_key(doc.metadata, "torch_version") or _find_key(doc.distributedInfo, "torch_version")
    if torch is not None:
        out["torch"] = str(torch)
    nccl = _find_key(doc.distributedInfo, "nccl_version")
    if nccl is not None:
        out["nccl"] = str(nccl)
    for key, label in _VERSION_KEYS.items():
        value = getattr(doc, key)
        if value is not None and not isinstance(value, (dict, list)):
            out[label] = str(value)
    return out


def device_name(doc: Document) -> str:
    name = first_device(doc).get("name")
    if isinstance(name, str) and name:
        return name
    gpus = _find_key(doc.metadata, "gpu")
    if isinstance(gpus, dict) and gpus:
        return str(next(iter(gpus.values())))
    return ""


def process_groups(config: Any) -> list[dict[str, Any]]:
    """distributedInfo pg_config as [{name, desc, size, ranks}]: which ranks each process group
    holds, so a job's collectives can be told apart by group (newer PyTorch only)."""
    if not isinstance(config, list):
        return []
    out = []
    for pg in config:
        if not isinstance(pg, dict):
            continue
        ranks = pg.get("ranks")
        out.append({"name": str(pg.get("pg_name", "")), "desc": str(pg.get("pg_desc", "")),
                    "size": int(pg["pg_size"]) if isinstance(pg.get("pg_size"), int) else None,
                    "ranks": [int(r) for r in ranks if isinstance(r, int)] if isinstance(ranks, list) else []})
    return out


def trace_meta(doc: Document, dtype: str, events_read: int, extra: dict[str, Any]) -> TraceMeta:
    info = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    extra = dict(extra)
    for key in ("rank", "world_size", "backend"):
        if key in info and not isinstance(info[key], (dict, list)):
            extra[key] = info[key]
    groups = process_groups(info.get("pg_config"))
    if groups:
        extra["process_groups"] = groups
    if isinstance(doc.traceName, str):
        extra["trace_name"] = doc.traceName
    return TraceMeta(
        profiler="kineto",
        device_type=dtype,
        device_name=device_name(doc),
        device_properties=first_device(doc) if dtype != "cpu" else {},
        framework_versions=framework_versions(doc),
        events_read=events_read,
        extra=extra,
    )
