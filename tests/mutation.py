"""Random damage to real trace files, for checking that readers fail cleanly.

A reader given a damaged file must return valid tables or raise TraceFormatError;
any other exception is a porter bug. The same mutations drive the hypothesis tests
(through `mutate(data, draw)`) and the fuzz harness `tests/fuzz.py` (through a seeded
`random.Random`), so a crash the harness finds replays from its case number.
"""

from __future__ import annotations

import gzip
import json
import random
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import orjson
from hypothesis import strategies as st

from porter.core.errors import TraceFormatError
from profilers.detect import read_trace

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)

# Values a field should never hold: outside int64/float64, non-finite, negative, of the
# wrong type, or strings that look like markup, paths or terminal control.
EXTREME_NUMBERS: tuple[Any, ...] = (
    10**30, -(10**30), 2**63, 2**64, -(2**63) - 1, 1e30, -1e30, 1e308, -1e308, 5e-324,
    -1, -1.5, 0, float("nan"), float("inf"), float("-inf"), 2**53 + 1,
)
WRONG_VALUES: tuple[Any, ...] = (
    None, True, False, "", "x", "12", "1e999", [], {}, [1, "a"], {"a": 1}, [[[]]],
    "[red]x[/red]", "[/b]", "a/../b", "\x1b[2J\n\r\x00", "\ud800" * 2, "x" * 5000,
)
# Values a trace may hold that are absurd in size, not in kind: a megabyte-long name, shape
# list or dtype list (Kineto traces come from anywhere).
HUGE_VALUES: tuple[Any, ...] = (
    "k" * 1_000_000, "[" + "[1024,1024]," * 90_000 + "[]]", "[[]" + ",[]" * 300_000 + "]",
    '["float"' + ', "c10::BFloat16"' * 60_000 + "]",
)
DEEP = "\x00porter-deep\x00"  # placeholder replaced by nested brackets in the text


class Pick:
    """The choices a mutation makes, from hypothesis's `draw` or a seeded random.Random."""

    def __init__(self, draw: Callable | None = None, rng: random.Random | None = None):
        self._draw, self._rng = draw, rng

    def int(self, lo: int, hi: int) -> int:
        return self._draw(st.integers(lo, hi)) if self._draw else self._rng.randint(lo, hi)

    def choice(self, options: Sequence) -> Any:
        return options[self.int(0, len(options) - 1)]

    def json_value(self) -> Any:
        if self._draw:
            return self._draw(JSON_VALUES)
        return self.choice(EXTREME_NUMBERS + WRONG_VALUES)


def containers(doc, out=None) -> list:
    """Every (container, key) slot in a parsed JSON document (iteratively: no recursion limit)."""
    out = [] if out is None else out
    stack = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            out.append((node, key))
            stack.append(value)
    return out


def _dumps(doc: Any, depth: int) -> bytes:
    """JSON text; the stdlib writes the >64-bit ints and NaN/Infinity the mutations put in
    (orjson refuses them), and DEEP markers become `depth` nested arrays."""
    text = json.dumps(doc)
    if DEEP in text or json.dumps(DEEP) in text:
        text = text.replace(json.dumps(DEEP), "[" * depth + "1" + "]" * depth)
    return text.encode("utf-8", "surrogatepass")


def mutate_bytes(data: bytes, pick: Pick) -> bytes:
    """Damage without parsing: truncate, overwrite bytes, or repeat/cut a span (works on
    any format, including protobuf)."""
    how = pick.choice(["truncate", "flip", "flip", "splice"])
    if how == "truncate":
        return data[: pick.int(0, len(data) - 1)]
    buf = bytearray(data)
    if how == "flip":
        for _ in range(pick.int(1, 8)):
            buf[pick.int(0, len(buf) - 1)] = pick.int(0, 255)
        return bytes(buf)
    a = pick.int(0, len(buf) - 1)
    b = min(len(buf), a + pick.int(1, 64))
    if pick.int(0, 1):
        return bytes(buf[:b] + buf[a:b] * pick.int(1, 50) + buf[b:])
    return bytes(buf[:a] + buf[b:])


def mutate_json(data: bytes, pick: Pick) -> bytes:
    """Damage a JSON document: bytes, or one value somewhere (deleted, replaced by a wrong
    or extreme value, nested absurdly deep, or an object duplicated in its list)."""
    how = pick.choice(["bytes", "delete", "replace", "replace", "deep", "duplicate", "numbers", "huge"])
    if how == "bytes":
        return mutate_bytes(data, pick)
    doc = orjson.loads(data)
    slots = containers(doc)
    if not slots:
        return mutate_bytes(data, pick)
    parent, key = slots[pick.int(0, len(slots) - 1)]
    depth = 2
    if how == "delete":
        del parent[key]
    elif how == "replace":
        parent[key] = pick.json_value()
    elif how == "huge":  # a string somewhere (a name, Input Dims, Input type) made huge
        strings = [(p, k) for p, k in slots if isinstance(p[k], str)] or [(parent, key)]
        p, k = strings[pick.int(0, len(strings) - 1)]
        p[k] = pick.choice(HUGE_VALUES)
    elif how == "deep":
        parent[key], depth = DEEP, pick.choice([200, 1100, 5000, 100_000])
    elif how == "duplicate":
        lists = [(p, k) for p, k in slots if isinstance(p, list)]
        if lists:
            parent, key = lists[pick.int(0, len(lists) - 1)]
            for _ in range(pick.int(1, 3)):
                parent.insert(key, parent[key])
    else:  # every number in one object's subtree becomes one extreme value
        numbers = [(p, k) for p, k in slots if type(p[k]) in (int, float)]
        value = pick.choice(EXTREME_NUMBERS)
        for p, k in numbers[: pick.int(1, 20)] if numbers else ():
            p[k] = value
    return _dumps(doc, depth)


PROTO_INTS = (2**63 - 1, -(2**63), -1, 0, 10**15)
PROTO_UINTS = (2**64 - 1, 0, 2**63)
PROTO_DOUBLES = (float("nan"), float("inf"), float("-inf"), 1e308, -1.0)
PROTO_BYTES = (b"Stream #" + b"9" * 25 + b"(Kernel)", b"/device:GPU:" + b"9" * 25, b"XLA Ops", b"Steps", b"[red]x",
               b"\xff\xfe\x00", b"", b"x" * 10_000, b"jit_f(" + b"9" * 25 + b")", b"12345678901234567890123")


def mutate_xspace(data: bytes, pick: Pick) -> bytes:
    """Damage an XSpace protobuf where a byte flip rarely reaches: one field somewhere set
    to an extreme int, a non-finite double or an odd name, or a repeated message
    duplicated or dropped; then serialised again (valid protobuf, wrong content)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    from profilers.xspace_proto import parse_xspace

    space = parse_xspace(data)
    slots, stack = [], [space]
    while stack:
        msg = stack.pop()
        for fd, value in msg.ListFields():
            slots.append((msg, fd))
            if fd.type == F.TYPE_MESSAGE:
                stack.extend(value if fd.is_repeated else [value])
    msg, fd = slots[pick.int(0, len(slots) - 1)]
    field = getattr(msg, fd.name)
    if fd.is_repeated:
        if len(field) and fd.type == F.TYPE_MESSAGE:
            i = pick.int(0, len(field) - 1)
            if pick.int(0, 1):
                field.add().CopyFrom(field[i])
            else:
                del field[i]
        elif len(field):
            del field[pick.int(0, len(field) - 1)]
    elif fd.type in (F.TYPE_INT64, F.TYPE_INT32):
        setattr(msg, fd.name, pick.choice(PROTO_INTS))
    elif fd.type in (F.TYPE_UINT64, F.TYPE_UINT32):
        setattr(msg, fd.name, pick.choice(PROTO_UINTS))
    elif fd.type == F.TYPE_DOUBLE:
        setattr(msg, fd.name, pick.choice(PROTO_DOUBLES))
    elif fd.type == F.TYPE_BYTES:
        setattr(msg, fd.name, pick.choice(PROTO_BYTES))
    return space.SerializeToString()


SQLITE_MAGIC = b"SQLite format 3\x00"
SQL_VALUES: tuple[Any, ...] = (None, "x", "", "12", 2**63 - 1, -(2**63), -1, 1e308, float("nan"), b"\xff\x00",
                               "k" * 1_000_000, "[red]x")


def mutate_sqlite(data: bytes, pick: Pick) -> bytes:
    """Damage an SQLite database (Nsight exports, rocpd/rpd files) where byte flips rarely
    reach: a table dropped or emptied, a column renamed, one column of some rows set to a
    wrong type or an extreme value, one row given a megabyte of text, or the file cut at a
    page boundary. Any reader of an SQLite format is fuzzed with it once registered."""
    import sqlite3

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "db.sqlite"
        path.write_bytes(data)
        con = sqlite3.connect(path)
        try:
            tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                                "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
            how = pick.choice(["drop", "empty", "rename", "values", "values", "huge", "cut"])
            if not tables or how == "cut":
                con.close()
                page = 4096
                return data[: page * pick.int(1, max(1, len(data) // page - 1))]
            table = pick.choice(tables)
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            if how == "drop":
                con.execute(f'DROP TABLE "{table}"')
            elif how == "empty":
                con.execute(f'DELETE FROM "{table}"')
            elif how == "rename" and cols:
                con.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{pick.choice(cols)}" TO "porter_fuzz"')
            elif cols:
                col = pick.choice(cols)
                value = "k" * 1_000_000 if how == "huge" else pick.choice(SQL_VALUES)
                limit = 1 if how == "huge" else pick.int(1, 50)
                rows = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
                con.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE rowid IN (SELECT rowid FROM "{table}" '
                            f'LIMIT {limit} OFFSET {pick.int(0, max(rows - 1, 0))})', (value,))  # replayable: no random()
            con.commit()
        except sqlite3.Error:
            pass  # a damage the schema refuses (a view over the column...): the database as it is
        finally:
            con.close()
        return path.read_bytes()


def mutate(data: bytes, draw) -> bytes:
    """One hypothesis-driven mutation of a JSON document (for the per-reader tests)."""
    return mutate_json(data, Pick(draw=draw))


def regzip(data: bytes, pick: Pick) -> bytes:
    """Compress again; sometimes damage the compressed stream itself."""
    packed = gzip.compress(data, compresslevel=1, mtime=0)
    return mutate_bytes(packed, pick) if pick.int(0, 9) == 0 else packed


def read_mutated(data: bytes, fmt: str, suffix: str) -> None:
    """The reader either returns valid tables or raises TraceFormatError: nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"mutated{suffix}"
        path.write_bytes(data)
        try:
            read_trace(path, fmt)
        except TraceFormatError as exc:
            message = str(exc)
            assert "\n" not in message and str(path) in message, message
