"""On-disk bundle: manifest.json + ops.parquet + kernels.parquet + raw/ (+ activations/).

Every bundle is built in a hidden sibling directory and renamed into place, so an
interrupted write leaves either the old bundle or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from porter import __version__
from porter.errors import BundleError
from porter.schema import SCHEMA_VERSION, coerce_kernels, coerce_ops, validate

MANIFEST = "manifest.json"
OPS = "ops.parquet"
KERNELS = "kernels.parquet"
RAW = "raw"
ACTIVATIONS = "activations"


@dataclass
class Bundle:
    path: Path
    manifest: dict[str, Any]
    ops: pd.DataFrame
    kernels: pd.DataFrame

    @property
    def label(self) -> str:
        return self.manifest.get("label") or self.path.name

    @property
    def device_name(self) -> str:
        return self.manifest.get("device", {}).get("name", "")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def staging(dest: Path) -> Iterator[Path]:
    """Yield a temporary directory beside dest; on success it replaces dest atomically."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        yield tmp
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.rename(dest, old)
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def base_manifest(**fields: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "porter_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"node": platform.node(), "python": platform.python_version()},
    }
    manifest.update(fields)
    return manifest


def write_tables(dirpath: Path, ops: pd.DataFrame, kernels: pd.DataFrame) -> None:
    """Validate and write both tables into dirpath (a staging directory)."""
    ops, kernels = coerce_ops(ops), coerce_kernels(kernels)
    validate(ops, kernels)
    ops.to_parquet(dirpath / OPS, index=False)
    kernels.to_parquet(dirpath / KERNELS, index=False)


def write_manifest(dirpath: Path, manifest: dict[str, Any]) -> None:
    (dirpath / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")


def is_bundle(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()


def has_activations(b: Bundle) -> bool:
    """Whether a live capture saved module outputs (a recorded trace never has them)."""
    return (b.path / ACTIVATIONS / "outputs.safetensors").is_file()


def load_bundle(path: Path) -> Bundle:
    path = Path(path)
    if not path.is_dir():
        raise BundleError("not a bundle directory", path=path)
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise BundleError(f"no {MANIFEST} in it; not a porter bundle", path=path)
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as exc:
        raise BundleError(f"unreadable {MANIFEST} ({exc})", path=path) from None
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BundleError(
            f"bundle has schema version {version}, this porter reads version {SCHEMA_VERSION}",
            path=path,
            hint="re-ingest its raw trace (raw/) with this porter",
        )
    try:
        ops = pd.read_parquet(path / OPS)
        kernels = pd.read_parquet(path / KERNELS)
    except (OSError, ValueError) as exc:
        raise BundleError(f"unreadable tables ({exc})", path=path) from None
    ops, kernels = coerce_ops(ops), coerce_kernels(kernels)
    return Bundle(path=path, manifest=manifest, ops=ops, kernels=kernels)
