"""Random damage to real trace files, for checking that readers fail cleanly.

A reader given a damaged file must return valid tables or raise TraceFormatError;
any other exception is a porter bug.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
from hypothesis import strategies as st

from porter.errors import TraceFormatError
from profilers.detect import read_trace

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def containers(doc, out=None) -> list:
    """Every (container, key) slot in a parsed JSON document."""
    out = [] if out is None else out
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        out.append((doc, key))
        containers(value, out)
    return out


def mutate(data: bytes, draw) -> bytes:
    """Truncate, flip bytes, or delete/replace one value somewhere in the document."""
    how = draw(st.sampled_from(["truncate", "flip", "delete", "replace"]))
    if how == "truncate":
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "flip":
        buf = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
        return bytes(buf)
    doc = orjson.loads(data)
    slots = containers(doc)
    parent, key = slots[draw(st.integers(0, len(slots) - 1))]
    if how == "delete":
        del parent[key]
    else:
        parent[key] = draw(JSON_VALUES)
    return orjson.dumps(doc)


def read_mutated(data: bytes, fmt: str, suffix: str) -> None:
    """The reader either returns valid tables or raises TraceFormatError: nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"mutated{suffix}"
        path.write_bytes(data)
        try:
            read_trace(path, fmt)
        except TraceFormatError:
            pass
