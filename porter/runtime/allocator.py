"""Freed memory stays with the process while a live pair is measured (glibc's malloc).

By default glibc hands large freed blocks back to the kernel (blocks over its mmap threshold
are unmapped; the heap top is trimmed past 128 KiB), so the next allocation of that size
page-faults on every page again. Eager PyTorch on the CPU allocates each op's output afresh:
GPT-2 at hidden 512 (2x128x2048 activations, one thread), its GELU's eight eager ops took
7.8-10.8 ms per forward with 1472-2496 minor faults in 7 of 15 forwards and 2.5-5.1 ms with
0-864 in the others, the same forward switching between the two from one call to the next.
That measures the allocator's bookkeeping, not the ops, and none of the accelerators porter
ports between pays it (their caching allocators keep device memory). So a live pair keeps
freed memory in the process, as a caching allocator does: the mmap threshold at glibc's
largest (32 MiB) and no trimming below 1 GiB; the same GELU then took 3.2-6.0 ms with 0-640
faults (0 in 9 of 15). Once set, glibc keeps these values for the life of the process. PORTER_MALLOC=os
leaves glibc's defaults; elsewhere than glibc nothing is changed.

Kept memory still faults once, when the heap first grows into it, and a profiler's own records
grow the heap at every step: under torch.profiler, BERT's eager GELU (hidden 512) faulted its
2 MiB output's pages in 1-4 of 12 forwards and took 1.3-1.6 ms in those against 0.45-0.6 ms
(six of nine profiled steps of one live capture). So the policy also touches the heap's first
HEAP_WARM_MB (256 MiB by default, PORTER_HEAP_WARM_MB) once and frees it at once: the heap top
keeps those pages resident (nothing is trimmed below 1 GiB), and the same forwards then
faulted in none.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from typing import Any

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed on 64-bit (HEAP_MAX / 2)
TRIM_THRESHOLD = 1 << 30
TOP_PAD = 64 << 20
HEAP_WARM_MB = 256
WARM_BLOCK = 8 << 20  # under the mmap threshold: from the heap, not a mapping of its own
_warmed_mb = 0  # MiB this process has touched up front


@dataclass(frozen=True)
class HeapPolicy:
    kept: bool  # freed memory stays with the process
    why: str
    warmed_mb: int = 0  # heap pages touched once up front (resident from then on)

    def to_dict(self) -> dict[str, Any]:
        return {"kept": self.kept, "why": self.why, "warmed_mb": self.warmed_mb}


def _glibc() -> Any:
    name = ctypes.util.find_library("c")
    if not name or os.name != "posix":
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: musl and macOS have no mallopt of these numbers
        return libc
    except (OSError, AttributeError):
        return None


def keep_freed_memory(setting: str | None = None) -> HeapPolicy:
    """Apply the policy (see the module doc) unless PORTER_MALLOC=os; say what was done."""
    setting = (setting if setting is not None else os.environ.get("PORTER_MALLOC", "keep")).strip().lower()
    if setting == "os":
        return HeapPolicy(False, "PORTER_MALLOC=os: glibc's defaults")
    libc = _glibc()
    if libc is None:
        return HeapPolicy(False, "not glibc: the allocator left as it is")
    ok = all(libc.mallopt(k, v) == 1 for k, v in ((M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                                                  (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD)))
    if not ok:
        return HeapPolicy(False, "glibc refused mallopt: the allocator left as it is")
    global _warmed_mb
    if not _warmed_mb:  # once per process: the touched top stays resident (nothing is trimmed)
        _warmed_mb = _warm_heap(libc, _warm_mb())
    warmed = _warmed_mb
    return HeapPolicy(True, f"glibc keeps freed memory in the process (mmap threshold 32 MiB, no trim below "
                            f"1 GiB, {warmed} MiB of heap touched up front; PORTER_MALLOC=os for its defaults)", warmed)


def warmed_mb() -> int:
    """MiB of heap this process touched up front (0: keep_freed_memory has not run here)."""
    return _warmed_mb


def _warm_mb() -> int:
    raw = os.environ.get("PORTER_HEAP_WARM_MB", "").strip()
    try:
        return max(int(raw), 0) if raw else HEAP_WARM_MB
    except ValueError:
        return HEAP_WARM_MB


def _warm_heap(libc: Any, mb: int) -> int:
    """Touch mb MiB of heap in blocks, then free them: they join the heap top, which stays
    resident under the policy. Returns the MiB touched."""
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = []
    for _ in range(mb * (1 << 20) // WARM_BLOCK):
        p = libc.malloc(WARM_BLOCK)
        if not p:
            break
        ctypes.memset(p, 0, WARM_BLOCK)
        blocks.append(p)
    for p in reversed(blocks):
        libc.free(p)
    return len(blocks) * WARM_BLOCK >> 20
