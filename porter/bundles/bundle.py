"""On-disk bundle: manifest.json + ops.parquet + kernels.parquet + raw/ (+ activations/).

Every bundle is built in a staged sibling directory (porter.core.atomic) and renamed into
place, so an interrupted write leaves either the old bundle or the new one, never half of
either.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import json
import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Union

from porter import __version__

from porter.core import columns
from porter.core.atomic import cannot_write, clean_stale, exchange, forget, staged_path, track, writable_dir
from porter.core.errors import BundleError
from porter.core.run import Run
from porter.core.checked import FieldOutOfRange
from porter.core.schema import KERNEL_COLUMNS, OPS_COLUMNS, SCHEMA_VERSION, SchemaViolation, coerce_kernels, coerce_ops

if TYPE_CHECKING:  # pandas loads when a bundle is read into DataFrames, not to write one
    import pandas as pd

MANIFEST = "manifest.json"
OBJECT_FIELDS = ("device", "source", "stats", "host", "trace_meta", "model", "target")  # objects when set
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

    @property
    def rank(self) -> int | None:
        """The job's rank this bundle holds alone (manifest rank); None for a single-rank run."""
        rank = self.manifest.get("rank")
        return int(rank) if isinstance(rank, int) and not isinstance(rank, bool) else None


def run_of(bundle: Bundle, role: str) -> Run:
    """The Run the pipeline passes around for one bundle (porter.core.run)."""
    target = bundle.manifest.get("target") or {}
    stack = target.get("stack") if isinstance(target, dict) else None
    return Run(ops=bundle.ops, kernels=bundle.kernels, label=bundle.label, role=role, rank=bundle.rank,
               stack=str(stack) if stack else None, manifest=bundle.manifest)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_porter_bundle(path: Path) -> bool:
    """A directory porter wrote: its manifest is an object naming a porter version. Only
    these are ever replaced by a new bundle."""
    path = Path(path)
    if path.is_symlink() or not is_bundle(path):
        return False
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and "porter_version" in manifest


@contextlib.contextmanager
def staging(dest: Path) -> Iterator[Path]:
    """Yield an empty staged directory beside dest; when the block succeeds it replaces
    dest in one step (the old bundle stays whole until the new one is), else it is removed.

    dest must be missing or a porter bundle: anything else there is the user's and is
    never touched (BundleError). Stale staged entries of killed runs are cleaned first;
    OSErrors become one-line OutputErrors naming dest."""
    dest = Path(dest)
    writable_dir(dest.parent)
    clean_stale(dest.parent)
    if (dest.exists() or dest.is_symlink()) and not is_porter_bundle(dest):
        raise BundleError("exists and is not a porter bundle; porter only replaces its own bundles", path=dest,
                          hint="move it away or choose another output")
    tmp = staged_path(dest)
    try:
        os.mkdir(track(tmp))
    except OSError as exc:
        forget(tmp)
        raise cannot_write(exc, dest) from None
    try:
        yield tmp
        _move_into_place(tmp, dest)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise cannot_write(exc, dest) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        forget(tmp)


def _move_into_place(tmp: Path, dest: Path) -> None:
    """Rename the finished tmp to dest; over an old bundle, swap the two in one step
    (tmp then holds the old one, removed after), or where the file system cannot swap,
    move the old one to a staged name first (clean_stale puts it back after a kill)."""
    if not dest.exists():
        try:
            os.rename(tmp, dest)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not is_porter_bundle(dest):
                raise  # another run made dest meanwhile: replace it as below
    if exchange(tmp, dest):
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = staged_path(dest, "old")
    os.rename(dest, old)
    os.rename(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)


def base_manifest(**fields: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "porter_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"node": platform.node(), "python": platform.python_version()},
    }
    manifest.update(fields)
    return manifest


def encode_tables(ops: Union["pd.DataFrame", columns.Table],
                  kernels: Union["pd.DataFrame", columns.Table]) -> dict[str, bytes]:
    """Both tables (DataFrames or numpy columns) validated and encoded as Parquet, in memory:
    file name -> bytes, ready before a staged folder is made (a kill while they encode leaves
    nothing behind)."""
    ops_t = columns.coerce_ops(columns.as_columns(ops))
    kernels_t = columns.coerce_kernels(columns.as_columns(kernels))
    columns.validate(ops_t, kernels_t)
    return {OPS: columns.parquet_bytes(ops_t, OPS_COLUMNS), KERNELS: columns.parquet_bytes(kernels_t, KERNEL_COLUMNS)}


def write_files(dirpath: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (dirpath / name).write_bytes(data)


def write_tables(dirpath: Path, ops: Union["pd.DataFrame", columns.Table],
                 kernels: Union["pd.DataFrame", columns.Table]) -> None:
    """Validate and write both tables into dirpath (a staging directory)."""
    write_files(dirpath, encode_tables(ops, kernels))


def write_manifest(dirpath: Path, manifest: dict[str, Any]) -> None:
    (dirpath / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")


def is_bundle(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()


def has_activations(b: Bundle) -> bool:
    """Whether a live capture saved its per-module activation record (a recorded trace never has one)."""
    return (b.path / ACTIVATIONS / "sketch.json").is_file()


def load_manifest(path: Path) -> dict[str, Any]:
    """A bundle's manifest, checked (a directory porter wrote, in this schema version); the
    tables stay unread (no pandas)."""
    path = Path(path)
    if not path.is_dir():
        raise BundleError("not a bundle directory", path=path)
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise BundleError(f"no {MANIFEST} in it; not a porter bundle", path=path)
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as exc:
        raise BundleError(f"unreadable {MANIFEST} ({getattr(exc, 'strerror', None) or exc})", path=path) from None
    if not isinstance(manifest, dict):
        raise BundleError(f"{MANIFEST} holds a {type(manifest).__name__}, not an object; not a porter bundle", path=path)
    for key in OBJECT_FIELDS:
        if manifest.get(key) is not None and not isinstance(manifest[key], dict):
            raise BundleError(f"{MANIFEST} field {key!r} is a {type(manifest[key]).__name__}, not an object; "
                              "the bundle is damaged", path=path, hint="re-ingest its raw trace (raw/)")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BundleError(
            f"bundle has schema version {version}, this porter reads version {SCHEMA_VERSION}",
            path=path,
            hint="re-ingest its raw trace (raw/) with this porter",
        )
    return manifest


def load_bundle(path: Path) -> Bundle:
    path = Path(path)
    manifest = load_manifest(path)
    if manifest.get("kind") == "job":  # porter.bundles.job
        raise BundleError(f"a job bundle of {len(manifest.get('ranks') or [])} ranks, not one run's", path=path,
                          hint="porter show DIR --by rank; or one rank's bundle DIR/rank-N")
    import pandas as pd

    try:
        ops = pd.read_parquet(path / OPS)
        kernels = pd.read_parquet(path / KERNELS)
        ops, kernels = coerce_ops(ops), coerce_kernels(kernels)
    except (OSError, ValueError, TypeError, OverflowError, SchemaViolation, FieldOutOfRange) as exc:
        text = " ".join(str(exc).split())[:200]
        raise BundleError(f"unreadable tables ({text}); the bundle is damaged", path=path,
                          hint="re-ingest its raw trace (raw/)") from None
    return Bundle(path=path, manifest=manifest, ops=ops, kernels=kernels)
