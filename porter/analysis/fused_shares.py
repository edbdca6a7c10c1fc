"""A fused op's share per member op call: measured on the other side where it can be.

A fused op (an inductor kernel, an XLA fusion, an ORT fused node) lists its member op calls
with an estimated cost each (``ops.call_members``: shapes times a cost per element,
porter.core.elementcost). Those estimates cannot tell what the work costs on a machine: a
BatchNorm's four elementwise nodes outweighed the erfinv fused after them, which took 150x
longer than the BatchNorm in eager. The other side of a live pair ran the same calls unfused
and measured each (porter.analysis.call_times), so a member call's share is its measured time
there against the other measured members'. A member is priced by its estimate instead when
nothing pairs (the other side has no such call, or fused it too) or when this side also ran
the call as an op of its own (a convolution's extern kernel: the other side's milliseconds for
that call are not the layout write this kernel does for it). Estimated members keep their
estimated share of the op; measured ones share the rest in proportion to their measured times.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

CallKey = tuple[str, str, int]


@dataclass(frozen=True)
class CallShare:
    module: str
    call: str  # '<op>#<k>'
    share: float  # of the fused op's time; a fused op's shares add up to 1
    measured: bool  # priced by the other side's time for the same call (else by estimate)

    @property
    def op(self) -> str:
        return self.call.rpartition("#")[0]


def _key(module: str, call: str) -> CallKey | None:
    op, _, k = call.rpartition("#")
    return (module, op, int(k)) if op and k.isdigit() else None


def call_shares(call_members: str, measured: dict[CallKey, float], apart: set[tuple[str, str]]) -> list[CallShare]:
    """The members of one fused op (its call_members JSON) with their shares; [] when none of
    them pairs with a measurement (the estimate stands alone: porter.analysis.split_fused)."""
    members = json.loads(call_members) if call_members else []
    norm = sum(float(m[2]) for m in members) or 1.0
    timed: dict[int, float] = {}
    for i, (module, call, _) in enumerate(members):
        key = _key(module, call)
        if key is not None and (module, call) not in apart and measured.get(key, 0.0) > 0:
            timed[i] = measured[key]
    if not timed:
        return []
    rest = 1.0 - sum(float(m[2]) / norm for i, m in enumerate(members) if i not in timed)
    total = sum(timed.values())
    return [CallShare(module, call, rest * timed[i] / total, True) if i in timed
            else CallShare(module, call, float(share) / norm, False)
            for i, (module, call, share) in enumerate(members)]


def encode(shares: list[CallShare]) -> str:
    """[[module, call, share, measured], ...]: the ``call_split`` column split_fused writes."""
    return json.dumps([[s.module, s.call, round(s.share, 9), int(s.measured)] for s in shares])


def decode(text: str) -> list[CallShare]:
    return [CallShare(m, c, float(s), bool(meas)) for m, c, s, meas in json.loads(text)] if text else []
