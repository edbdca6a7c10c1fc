"""Do the two runs share enough to be compared at all?

Two different models still align a little (every transformer has GEMMs and softmaxes), so a
Qwen trace against a BERT trace would otherwise yield a confident "116 times as fast" from
8% of the time. The check reads what the alignment already measured: the share of each
side's time in matched groups. Runs of one model on two stacks match >= 90% (the corpus
pairs and live captures match 94-100%), so half is a wide margin. Op-name and module
overlap are reported beside it: they explain a refusal but do not decide it, since a
torch run and an XLA run share no op names at all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from porter.analysis.align import Alignment
from porter.analysis.attribute import with_module_kind

MIN_COVERAGE = 0.5  # matched share of time, on the side matched least


@dataclass(frozen=True)
class PairCheck:
    coverage: float  # matched share of time on the side matched least
    op_overlap: float  # share of time on framework ops the other side also runs (side that shares least)
    module_overlap: float | None  # same for module kinds; None when a side names no modules
    ok: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _shared_share(a: pd.DataFrame, b: pd.DataFrame, key: str, times_a: pd.Series) -> float:
    """Share of a's time on values of key that b also has (time-weighted, a's own times)."""
    t = times_a.reindex(a["op_id"].to_numpy()).fillna(0.0).to_numpy()
    total = t.sum()
    if total <= 0:
        return float("nan")
    keys = set(b[key].tolist()) - {""}
    hit = a[key].isin(keys).to_numpy() & (a[key] != "").to_numpy()
    return float(t[hit].sum() / total)


def check_pair(al: Alignment) -> PairCheck:
    cov = al.coverage(less_outside=True)  # the runtime's own work says nothing about the model's
    coverage = float(min(cov["source"], cov["target"]))
    s, t = al.source_ops, al.target_ops
    st, tt = al.source_times.values, al.target_times.values
    op = min(_shared_share(s, t, "framework_op", st), _shared_share(t, s, "framework_op", tt))
    mods = None
    if (s["module"] != "").any() and (t["module"] != "").any():
        sk, tk = with_module_kind(s), with_module_kind(t)  # once per distinct path, not per op
        mods = min(_shared_share(sk, tk, "module_kind", st), _shared_share(tk, sk, "module_kind", tt))
    ok = coverage >= MIN_COVERAGE
    reason = "" if ok else (
        f"the two runs share too little to compare: {coverage:.0%} of time aligns (needs {MIN_COVERAGE:.0%}), "
        f"{op:.0%} of time is on op names both run"
        + (f", {mods:.0%} on module kinds both have" if mods is not None else "")
        + "; they look like different models or different work")
    return PairCheck(coverage, op, mods, ok, reason)
