"""Slice-wise decoding of Kineto traces and the sized gunzip: the memory-saving paths must
give exactly what one whole-document decode gives, and word errors the same way.

Small slices (a few KB) force dozens of cuts per real trace, so every cut guess, right or
wrong, is exercised; the expected event counts come from plain json.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import fields
from pathlib import Path

import msgspec
import numpy as np
import pytest

from conftest import FIXTURES, corpus_files
from profilers.base import gunzip, read_bytes
from profilers.kineto_events import Split, decode, split

CPU_MLP = FIXTURES / "cpu_mlp.json.gz"
TRACES = [CPU_MLP, *corpus_files("kineto", "*.json.gz")]
WHOLE = 1 << 40  # one slice: the whole array


def _split(data: bytes, slice_bytes: int) -> Split:
    return split(decode(data), slice_bytes)


def _same(a: Split, b: Split) -> None:
    for role in ("ops", "runtime", "device", "modules"):
        ca, cb = getattr(a, role), getattr(b, role)
        for f in fields(ca):
            va, vb = getattr(ca, f.name), getattr(cb, f.name)
            assert (va is None) == (vb is None), (role, f.name)
            if va is not None:
                assert len(va) == len(vb) and np.array_equal(va, vb, equal_nan=va.dtype.kind == "f"), (role, f.name)
    assert list(a.device_kind) == list(b.device_kind)
    assert a.categories == b.categories and a.events_read == b.events_read


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_small_slices_decode_like_one(path):
    data = read_bytes(path)
    whole = _split(data, WHOLE)
    assert whole.events_read == len(json.loads(data)["traceEvents"])
    _same(_split(data, 4096), whole)


def _hostile(path: Path) -> bytes:
    """A real trace re-written compactly with `},` inside strings and nested objects in
    every event, so most cut guesses land inside an event."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for i, e in enumerate(doc["traceEvents"]):
        e.setdefault("args", {})["porter_test"] = {"nested": {"x": i}, "text": "},{" * (i % 12)}
        if e.get("ph") == "X" and i % 3 == 0:
            e["name"] = e.get("name", "") + "},"
    return json.dumps(doc, separators=(",", ":")).encode()


def test_cut_guesses_inside_events_are_caught():
    data = _hostile(CPU_MLP)
    whole = _split(data, WHOLE)
    assert whole.events_read == len(json.loads(data)["traceEvents"])
    for size in (1, 300, 5000):
        _same(_split(data, size), whole)


def test_errors_name_the_event_in_the_document():
    doc = json.loads(gzip.decompress(CPU_MLP.read_bytes()))
    k = len(doc["traceEvents"]) - 5
    doc["traceEvents"][k]["ts"] = "late"
    data = json.dumps(doc).encode()
    for size in (WHOLE, 2000):
        with pytest.raises(msgspec.ValidationError, match=rf"\$\.traceEvents\[{k}\]\.ts"):
            _split(data, size)
    with pytest.raises(msgspec.ValidationError, match=r"\$\.traceEvents`"):
        _split(b'{"traceEvents": {"ph": "X"}}', 10)
    with pytest.raises(msgspec.DecodeError):
        _split(data[: len(data) // 2] + b"]}", 2000)


def test_gunzip_matches_stdlib_including_multi_member():
    raw = gzip.decompress(CPU_MLP.read_bytes())
    single = gzip.compress(raw)
    assert gunzip(single) == raw
    # Several members (concatenated gzip files): the trailer is the last member's.
    for parts in ([raw, raw], [raw[:1000], raw[1000:]], [b"", raw]):
        data = b"".join(gzip.compress(p) for p in parts)
        assert gunzip(data) == b"".join(parts) == gzip.decompress(data)
    padded = single + b"\0" * 100  # gzip allows zero padding after a member
    assert gunzip(padded) == raw == gzip.decompress(padded)
    for cut in (len(single) // 2, len(single) - 3):  # stopped mid-member, as the stdlib says
        with pytest.raises(EOFError):
            gzip.decompress(single[:cut])
        with pytest.raises(EOFError):
            gunzip(single[:cut])
    with pytest.raises(zlib.error):  # not a second member
        gunzip(single + b"garbage after the member")
