"""Writes that a kill cannot leave half done, and output folders checked before writing.

Everything porter writes is first staged under a name only porter uses,
`.porter-new-<pid>-<random>-<name>` (and, while an old bundle is being swapped out,
`.porter-old-...`), then renamed over the destination: a reader sees the old file or the
new one, never half of either. A run killed mid-write leaves only such staged entries;
the next write into that folder removes them (or puts an old bundle back) when their
process is gone and they are older than the current process (the CLI also cleans, at the
start of every command, the working directory and the folders its command line names). A
staged path is made only once its first byte is ready, and is tracked until it is renamed, so
a signal handler (remove_live, installed by the CLI) takes it away on SIGTERM/SIGHUP. Nothing
else there is ever deleted or renamed. Directory-sized outputs use porter.bundles.bundle.staging(); files use
atomic_write_bytes/atomic_write_text.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import secrets
import shutil
import time
from pathlib import Path

from porter.core.errors import PorterError

STAGED = re.compile(r"^\.porter-(new|old)-(\d+)-([0-9a-f]{8})-(.+)$")
PROCESS_START = time.time()  # staged entries older than this and of a dead process are stale
_NAME_ROOM = 180  # of a file name's 255 bytes, kept for the destination's name in a staged name


class OutputError(PorterError):
    """An output path that cannot be written (read-only, a file, under a file, disk full)."""


def staged_path(dest: Path, kind: str = "new") -> Path:
    """A fresh staged name beside dest, for this process. A name too long to carry whole
    is cut, and then never used to put an old bundle back (it would not be dest's)."""
    raw = dest.name.encode("utf-8", "surrogateescape")
    name = raw[:_NAME_ROOM].decode("utf-8", "ignore")
    if name.encode("utf-8", "surrogateescape") != raw:
        kind = "new"
    return dest.with_name(f".porter-{kind}-{os.getpid()}-{secrets.token_hex(4)}-{name}")


_LIVE: set[str] = set()  # staged paths this process made and has not yet renamed or removed


def track(path: Path) -> Path:
    """Note a staged path this process just made, so remove_live() can take it away on a signal."""
    _LIVE.add(os.fspath(path))
    return path


def forget(path: Path) -> None:
    _LIVE.discard(os.fspath(path))


def remove_live() -> list[str]:
    """Remove every staged path this process made and still holds: what a signal handler calls
    before the process dies (the CLI installs it: porter.cli.process). Only this process's own
    names (a forked child inherits the set but not the paths); never an `old` bundle."""
    mine = f".porter-new-{os.getpid()}-"
    gone = []
    for path in sorted(_LIVE):
        if os.path.basename(path).startswith(mine):
            _remove(Path(path))
            gone.append(path)
    _LIVE.difference_update(gone)
    return gone


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clean_stale(directory: Path) -> list[Path]:
    """Remove what killed porter runs left staged in `directory` (only porter's own
    names, of processes no longer running, older than this process); an old bundle whose
    destination is missing is renamed back instead. Returns the paths removed or restored."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    done = []
    for entry in entries:
        m = STAGED.match(entry.name)
        if not m or entry.is_symlink():
            continue
        pid = int(m.group(2))
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if pid == os.getpid() or mtime >= PROCESS_START or _process_alive(pid):
            continue
        path, home = Path(entry.path), Path(directory) / m.group(4)
        try:
            if m.group(1) == "old" and not home.exists() and not home.is_symlink():
                os.rename(path, home)  # killed between moving the old bundle out and the new one in
            else:
                _remove(path)
        except OSError:
            continue  # another run got there first
        done.append(path)
    return done


def writable_dir(path: Path) -> Path:
    """`path` as a directory to write into (created with its parents when missing), or an
    OutputError in one line: a file is in the way, or the system refused (read-only...)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError("is a file, not a directory", path=path, hint="choose another output directory") from None
    except NotADirectoryError:
        raise OutputError("a parent of it is a file, not a directory", path=path,
                          hint="choose another output directory") from None
    except OSError as exc:
        raise OutputError(f"cannot create the output directory: {exc.strerror or exc}", path=path) from None
    if not path.is_dir():
        raise OutputError("is not a directory", path=path, hint="choose another output directory")
    return path


def check_output_dir(path: Path) -> Path:
    """Fail early, creating nothing, when `path` cannot become an output directory: it or
    a parent is a file, or its nearest existing ancestor is read-only (permissions or a
    read-only mount). writable_dir() at write time has the last word."""
    path = Path(path)
    here = path
    while not here.exists() and not here.is_symlink() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        where = "is a file, not a directory" if here == path else f"a parent of it ({here}) is a file, not a directory"
        raise OutputError(where, path=path, hint="choose another output directory")
    if os.statvfs(here).f_flag & os.ST_RDONLY or not os.access(here, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write into {'it' if here == path else here}: read-only", path=path,
                          hint="choose another output directory")
    return path


def cannot_write(exc: OSError, path: Path) -> OutputError:
    """An OSError while writing an output, as the one-line error it is for the user."""
    return OutputError(f"cannot write: {exc.strerror or exc}", path=path,
                       hint="check the output directory's permissions and free space")


_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux renameat2); False where the
    system or file system cannot, so the caller falls back to two renames."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write data to a staged file beside path, flush it to disk, then rename it over path."""
    path = Path(path)
    writable_dir(path.parent)
    clean_stale(path.parent)
    if path.is_dir():
        raise OutputError("is a directory; porter writes a file here", path=path, hint="choose another output name")
    tmp = track(staged_path(path))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise cannot_write(exc, path) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        forget(tmp)
    return path


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8") -> Path:
    """atomic_write_bytes for text (UTF-8 by default)."""
    return atomic_write_bytes(path, text.encode(encoding))
