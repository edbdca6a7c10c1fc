"""Precision ports: is a module's (or an op's) error what the target's dtype implies, or more?

A bf16 target differs from an fp32 source by design, so "over tolerance" alone cannot tell a
port that merely rounds from one whose formulation breaks in the lower precision. For a
module (or op) porter runs, on the CPU beside the target's own run:

* truth R: the module in float64 (weights, buffers and floating inputs promoted);
* implied I: the module in float64 on weights and inputs first rounded to the port's dtype,
  and the output of every leaf module inside it (and its own) rounded to it: what an exact
  machine that stores values in that dtype between modules returns, so a deep module is
  allowed the roundings its depth adds.
  A well-formulated module run in that dtype stays near it (torch and XLA accumulate
  reductions in float32); a fragile one (a one-pass variance, an overflow-prone exp) does not.

The verdict is porter.analysis.accuracy.oracle_verdict's rule with I in the source's place:
err(T, R) <= m * err(I, R) + tolerance / 10 (m = 3 for bf16/fp16, torch._dynamo's multiplier
for low precision, leaving room for the intermediate roundings a real run adds) means
"what the dtype implies"; above it, "more than the dtype implies". err(S, R) against
err(T, R) says which side is closer to the truth.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch.utils._pytree import tree_flatten, tree_map

from porter.analysis.accuracy import error_metrics, oracle_verdict
from porter.capture.precision import DTYPES


@dataclass(frozen=True)
class PrecisionVerdict:
    """One module's or op's error against float64, beside what its dtype implies."""

    dtype: str
    target_error: float  # rel L2 of the target's output vs the float64 truth
    source_error: float  # rel L2 of the source's output vs the float64 truth
    implied_error: float  # rel L2 of the dtype-rounded exact computation vs the truth
    bound: float  # multiplier * implied_error + tolerance / 10
    within: bool  # target_error <= bound

    @property
    def closer(self) -> str:
        if self.target_error == self.source_error:
            return "both equally"
        return "source" if self.source_error < self.target_error else "target"

    def row(self) -> dict[str, Any]:
        """The columns diagnosis.json's accuracy.modules (and op rows) carry."""
        return {"dtype_implied_rel_l2": self.implied_error, "dtype_bound": self.bound,
                "dtype_verdict": "implied" if self.within else "more",
                "fp64_source_rel_l2": self.source_error, "fp64_target_rel_l2": self.target_error,
                "closer_to_fp64": self.closer}

    def words(self) -> str:
        said = f"what {self.dtype} implies" if self.within else f"MORE than {self.dtype} implies"
        return (f"{said} (computed exactly on values rounded to {self.dtype}: {self.implied_error:.2e}, bound "
                f"{self.bound:.2e}); fp64 oracle: target {self.target_error:.2e}, source {self.source_error:.2e}, "
                f"{self.closer} closer")


def _floats(value: Any, fn: Any) -> Any:
    return tree_map(lambda t: fn(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, value)


def promote(value: Any) -> Any:
    """Every floating tensor leaf in float64 (exact for any narrower dtype)."""
    return _floats(value, lambda t: t.detach().double())


def rounded(value: Any, dtype: str) -> Any:
    """Every floating tensor leaf rounded to dtype, then held in float64."""
    dt = DTYPES[dtype]
    return _floats(value, lambda t: t.detach().to(dt).double())


def flat(value: Any) -> torch.Tensor:
    """The floating leaves of a pytree as one float64 vector (outputs compared as a whole)."""
    leaves = [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return torch.cat([t.detach().reshape(-1).double().cpu() for t in leaves]) if leaves else torch.zeros(0, dtype=torch.float64)


def judge(truth: Any, implied: Any, source: Any, target: Any, dtype: str) -> PrecisionVerdict | None:
    """The verdict over four outputs of one module or op (None when they do not line up)."""
    r, i, s, t = flat(truth), flat(implied), flat(source), flat(target)
    if not r.numel() or not (r.shape == i.shape == s.shape == t.shape):
        return None
    v = oracle_verdict(i, t, r, dtype=dtype)
    src = error_metrics(r, s).rel_l2
    return PrecisionVerdict(dtype, v.target_error, src, v.source_error, v.bound, bool(v.passed))


def module_verdict(module: torch.nn.Module, args: Any, kwargs: Any, source_out: Any, target_out: Any,
                   dtype: str, first_only: bool = False) -> PrecisionVerdict | None:
    """The module's verdict for a call recorded on the source (the caller suspends hooks).

    Runs torch.func.functional_call twice on the CPU with float64 weights: as given (truth)
    and rounded to dtype (implied); the module's own weights are left untouched.
    first_only: the outputs given are the first floating tensor of the module's output
    (what a bundle keeps of the model's output)."""
    state = dict(module.named_parameters())
    state.update(dict(module.named_buffers()))
    with torch.no_grad():
        truth = torch.func.functional_call(module, promote(state), tuple(promote(args)), promote(kwargs))
        with leaves_rounded(module, dtype):
            implied = rounded(torch.func.functional_call(module, rounded(state, dtype), tuple(rounded(args, dtype)),
                                                         rounded(kwargs, dtype)), dtype)
    if first_only:
        truth, implied = _first_float(truth), _first_float(implied)
    return judge(truth, implied, source_out, target_out, dtype)


@contextlib.contextmanager
def leaves_rounded(module: torch.nn.Module, dtype: str) -> Iterator[None]:
    """Every leaf module's output under module rounded to dtype (held in float64) for the duration."""
    handles = [m.register_forward_hook(lambda _m, _a, out: rounded(out, dtype))
               for m in module.modules() if m is not module and not any(True for _ in m.children())]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _first_float(value: Any) -> Any:
    return next((t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()), None)


def op_verdict(op: Any, args: Any, kwargs: Any, source_out: Any, target_out: Any, dtype: str) -> PrecisionVerdict | None:
    """One aten op's verdict, on the inputs the source handed it."""
    with torch.no_grad():
        truth = op(*promote(args), **promote(kwargs))
        implied = rounded(op(*rounded(args, dtype), **rounded(kwargs, dtype)), dtype)
    return judge(truth, implied, source_out, target_out, dtype)


def innermost_beyond(modules: list[str], verdicts: dict[str, PrecisionVerdict], share: float) -> set[str]:
    """Modules beyond what the dtype implies and not explained by a module inside them that is
    too (carrying at least `share` of this one's error against float64): the ones to look at."""
    more = {m for m, v in verdicts.items() if not v.within and math.isfinite(v.target_error)}
    out = set()
    for m in modules:
        if m not in more:
            continue
        prefix = f"{m}/" if m else ""
        if not any(c != m and c.startswith(prefix) and verdicts[c].target_error >= share * verdicts[m].target_error
                   for c in more):
            out.add(m)
    return out
