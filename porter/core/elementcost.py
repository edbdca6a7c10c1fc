"""Relative cost of one output element by op, for the estimates that split a fused kernel.

Readers and capture stacks price each member of a fusion (an XLA fusion's instructions, an
inductor kernel's FX nodes, an ORT fused node's originals) by its shapes; for elementwise work
that was its output elements, which priced an erfinv like an add: an inductor kernel holding a
BatchNorm's four elementwise nodes and one erfinv gave the BatchNorm four fifths of the time
the erfinv took. These weights are rough per-element costs against an add on a CPU's vector
units (a polynomial plus a range reduction for exp/tanh/erf, erfinv's two branches with a log
and a sqrt, a division's latency), not measurements: porter.analysis.split_fused uses them
only where the other side measured nothing for a member. Names are matched on whole
snake-case tokens (porter.core.opclass.op_tokens), so aten, HLO and ONNX spellings all work.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from porter.core.opclass import op_tokens

# (weight per output element, tokens), first match wins
_RULES: tuple[tuple[float, str], ...] = (
    (40.0, r"erfinv|erf_inv|lgamma|digamma|polygamma|igamma|igammac|i0|bessel\w*"),
    (12.0, r"exp|exp2|expm1|exponential|exponential_minus_one|log|log1p|log2|log10|tanh|sigmoid|logistic|erf|erfc"
           r"|gelu|silu|mish|elu|selu|celu|softplus|log_sigmoid|sin|cos|tan|sine|cosine|asin|acos|atan|atan2"
           r"|sinh|cosh|asinh|acosh|atanh|pow|power|cbrt"),
    (4.0, r"div|true_divide|reciprocal|sqrt|rsqrt|remainder|fmod|floor_divide|divide"),
    (4.0, r"cumsum|cumprod|cummax|cummin|logcumsumexp|scan|reduce_window"),
)
_SORTS = re.compile(r"(?:^|_)(?:sort|argsort|topk|kthvalue|median|nanmedian|msort|unique|mode)(?:_|$)")
_COMPILED = tuple((w, re.compile(rf"(?:^|_)(?:{p})(?:_|$)")) for w, p in _RULES)
SORT_DEFAULT = 16.0  # a sort's compares per element when its length is unknown (~log2 of 64k)


@lru_cache(maxsize=16384)
def _weight(op: str) -> float:
    short = op_tokens(op)[1]
    for w, pattern in _COMPILED:
        if pattern.search(short):
            return w
    return 1.0


def element_weight(op: str, length: int = 0) -> float:
    """Cost of one output element of op against an add's (1.0); a sort-like op costs
    log2(length) compares per element when the sorted length is known."""
    if _SORTS.search(op_tokens(op)[1]):
        return max(math.log2(length), 1.0) if length > 1 else SORT_DEFAULT
    return _weight(op)
