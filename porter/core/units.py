"""Human-readable numbers shared by the CLI and the reports."""

from __future__ import annotations

import json


def fmt_us(us: float | None) -> str:
    """Microseconds as us / ms / s with three significant-ish digits; '-' when unknown."""
    if us is None or us != us:  # None or NaN
        return "-"
    sign = "-" if us < 0 else ""
    us = abs(us)
    if us >= 1e6:
        return f"{sign}{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{sign}{us / 1e3:.2f} ms"
    return f"{sign}{us:.1f} us"


def fmt_ratio(r: float | None) -> str:
    """A time ratio as '1.23x'; '-' when unknown."""
    if r is None or r != r:
        return "-"
    if 0 < abs(r) < 0.1:  # 0.0022x, not 0.00x: a far faster target still shows by how much
        return f"{r:.2g}x"
    return f"{r:.2f}x"


def fmt_pct(share: float | None, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage; '-' when unknown."""
    if share is None or share != share:
        return "-"
    return f"{share * 100:.{digits}f}%"


def fmt_sci(v: float | None) -> str:
    """An error magnitude in short scientific form; '-' when unknown."""
    if v is None or v != v:
        return "-"
    return f"{v:.2e}"


def fmt_days(lo: float, hi: float) -> str:
    """An effort range in engineer-days."""
    if lo == hi:
        return f"{lo:g} d"
    return f"{lo:g}\u2013{hi:g} d"


SHORT_DTYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
                "long int": "int64", "int": "int32", "bool": "bool", "c10::Float8_e4m3fn": "fp8"}


def short_shapes(shapes: str) -> str:
    """'[[16,559,1],[],[]]' -> '[[16,559,1]]': trailing scalar arguments say nothing. One cut
    (a trace's shapes may be a megabyte of ',[]': cutting one at a time was quadratic)."""
    if not shapes.endswith(",[]]"):
        return shapes
    end = len(shapes) - 1  # the closing ']'
    while shapes.startswith(",[]", end - 3, end):
        end -= 3
    return shapes[:end] + "]"


DISPLAY_CHARS = 8000  # longer names are shown elided (tables keep them whole); real C++ kernel names reach ~5,100
ELIDED = "\u2026[{n:,} chars elided]\u2026"


def elide(text: str, limit: int = DISPLAY_CHARS) -> str:
    """Text for display: whole up to `limit` characters, else its head and tail around a marker
    saying how much was left out. Traces come from anywhere (a 200 MB kernel name, a megabyte of
    input shapes); tables, bundles and diagnosis.json keep the whole value, only views elide."""
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 2)
    head, tail = keep - keep // 4, keep // 4
    return text[:head] + ELIDED.format(n=len(text) - head - tail) + text[len(text) - tail:]


def short_dtypes(dtypes: str) -> str:
    """The distinct tensor dtypes of a call, short ('bf16'; 'fp32,bf16' for a cast)."""
    try:
        names = json.loads(dtypes) if dtypes else []
    except ValueError:
        return dtypes
    seen: list[str] = []
    for n in names if isinstance(names, list) else []:
        if isinstance(n, str) and n and n not in ("Scalar", "ScalarList", "TensorList", "") and n not in seen:
            seen.append(n)
    return ",".join(SHORT_DTYPES.get(n, n) for n in seen)
