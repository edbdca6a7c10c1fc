"""XLA/JAX XSpace protobuf (``*.xplane.pb``) from TPU, GPU and CPU runs.

Device work (profilers.xplane_events) becomes one kernels row per event. Op rows:
* GPU: consecutive kernels of one HLO op (stats ``hlo_op``, ``hlo_module``) on a stream
  form one op invocation; a repeat of a kernel already in the group starts the next
  invocation. Kernels without an HLO op (runtime copies) get a synthetic op each.
* TPU: one op per ``XLA Ops`` event (one HLO op execution each).
* XLA:CPU (no device planes): the CPU is the device, so a thunk is both kernel and op.

Each op's step is the number of the step marker around its launch (profilers.xplane_steps;
-1 when the capture marks none). Its module scope and jax primitive come from the HLO
op_name metadata in the HloProtos the XSpace carries on ``/host:metadata`` (profilers.xla_hlo). We walk the
protobuf ourselves (profilers.xspace_proto) rather than use xprof's hlo_stats tool: that
tool aggregates per HLO op (no per-invocation rows), writes cache files beside the input,
and returns nothing for XLA:CPU traces. (Tests use it as an independent cross-check.)
"""

from __future__ import annotations

from pathlib import Path

from profilers.base import ReadResult
from profilers.xplane_format import FORMAT, PLANE_NAMES

__all__ = ["FORMAT", "SUFFIX", "looks_like_xspace", "read", "sniff"]

SUFFIX = ".xplane.pb"


# ---------------------------------------------------------------- sniffing

def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while i < len(buf) and shift < 64:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i
    return -1, i


def looks_like_xspace(head: bytes) -> bool:
    """True when the bytes open with an XSpace's first plane and a known plane name."""
    if len(head) < 4 or head[0] != 0x0A:  # field 1 (planes), length-delimited
        return False
    length, i = _varint(head, 1)
    if length <= 0:
        return False
    if i < len(head) and head[i] == 0x08:  # plane id
        _, i = _varint(head, i + 1)
    if i >= len(head) or head[i] != 0x12:  # plane name
        return False
    n, i = _varint(head, i + 1)
    return n > 0 and head[i:i + n].startswith(PLANE_NAMES)


def sniff(path: Path, head: bytes) -> bool:
    return Path(path).name.endswith(SUFFIX) or looks_like_xspace(head)


def read(path: Path) -> ReadResult:
    """The reader itself (profilers/xplane_read.py) imports on first use: every trace command
    sniffs every format, and the XSpace reader's protobuf and HLO modules cost ~20 ms."""
    from profilers.xplane_read import read_xspace

    return read_xspace(path)
