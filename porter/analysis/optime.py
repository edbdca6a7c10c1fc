"""Which time each op is charged with when two runs are compared.

A trace with device activity charges ops their self device time (``device_us``). A
CPU-only trace has no kernels, so every ``device_us`` is 0; there the device *is* the
host, and an op is charged its self host time (its wall time minus its children's), so
that the ops' charges add up to the busy time of the run without double counting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

DEVICE = "device_us"
HOST_SELF = "host_self_us"


@dataclass(frozen=True)
class OpTimes:
    """Time charged per op (indexed by op_id) and the name of the basis used."""

    values: pd.Series
    basis: str  # DEVICE or HOST_SELF

    @property
    def total(self) -> float:
        return float(self.values.sum())


def host_self_us(ops: pd.DataFrame) -> pd.Series:
    """Wall time of each op minus the wall time of its direct children, clipped at 0."""
    host = pd.Series(ops["host_us"].to_numpy(dtype=np.float64), index=ops["op_id"].to_numpy())
    child = ops.loc[ops["parent_id"] >= 0].groupby("parent_id")["host_us"].sum()
    self_t = host.sub(child.reindex(host.index).fillna(0.0).to_numpy())
    return self_t.clip(lower=0.0)


def op_times(ops: pd.DataFrame) -> OpTimes:
    """Self device time when the run has any, else self host time (a CPU-only trace)."""
    dev = pd.Series(ops["device_us"].to_numpy(dtype=np.float64), index=ops["op_id"].to_numpy())
    if float(dev.sum()) > 0:
        return OpTimes(dev, DEVICE)
    return OpTimes(host_self_us(ops), HOST_SELF)
