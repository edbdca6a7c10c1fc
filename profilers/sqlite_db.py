"""Profiler databases (Nsight Systems exports, rocpd): opened read-only, damage told in one line.

A database reader must never write beside its input (no journal, no -shm), so the file is
opened `immutable`; a file that is not SQLite, is truncated or malformed, lacks a table or a
column, or holds text where an id belongs becomes a TraceFormatError, never sqlite3's traceback.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import quote

import numpy as np

from porter.core.errors import TraceFormatError
from profilers.limits import check_regular

MAGIC = b"SQLite format 3\x00"


def is_sqlite(head: bytes) -> bool:
    return head.startswith(MAGIC)


@dataclass
class Database:
    """An open profiler database and what to call it in errors ('Nsight Systems 2022.2.1 export')."""

    path: Path
    conn: sqlite3.Connection
    tables: frozenset[str]
    what: str = "database"

    def fail(self, problem: str, hint: str | None = None) -> TraceFormatError:
        return TraceFormatError(f"{self.what}: {problem}", path=self.path, hint=hint)

    def damaged(self, exc: sqlite3.Error) -> TraceFormatError:
        """sqlite3's message on one line, cut: it may quote a damaged value (an environment
        variable's shell function, a megabyte of text)."""
        text = " ".join(str(exc).split())
        return self.fail(f"damaged or unexpected database ({text if len(text) <= 160 else text[:157] + '...'})")

    def require(self, *tables: str, hint: str | None = None) -> None:
        missing = [t for t in tables if t not in self.tables]
        if missing:
            raise self.fail(f"has no {', '.join(missing)} table{'s' if len(missing) > 1 else ''}", hint)

    def columns(self, table: str) -> frozenset[str]:
        return frozenset(str(r[1]) for r in self.rows(f'PRAGMA table_info("{table}")'))

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self.damaged(exc) from None

    def close(self) -> None:
        self.conn.close()


@dataclass
class DeviceWork:
    """GPU activities read from a database, one entry per kernel, copy or set (ns)."""

    name: list[str]
    kind: list[str]  # kernel, memcpy, memset
    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    bytes: np.ndarray


def _connect(path: Path) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
    return sqlite3.connect(uri, uri=True, check_same_thread=False)


def table_names(path: Path) -> frozenset[str] | None:
    """The tables and views of an SQLite file, None when it does not open as one (for sniffing)."""
    try:
        conn = _connect(Path(path))
        try:
            return frozenset(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')"))
        finally:
            conn.close()
    except (sqlite3.Error, OSError, ValueError):
        return None


def open_db(path: Path, what: str = "database") -> Database:
    path = Path(path)
    check_regular(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(MAGIC))
    except OSError as exc:
        raise TraceFormatError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if not is_sqlite(head):
        raise TraceFormatError("not an SQLite database", path=path)
    try:
        conn = _connect(path)
        tables = frozenset(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')"))
    except sqlite3.Error as exc:
        raise TraceFormatError(f"damaged SQLite database ({exc})", path=path) from None
    return Database(path, conn, tables, what)


def ints(values: Iterable[Any], name: str, db: Database, default: int | None = None) -> np.ndarray:
    """An integer column as int64; NULL becomes `default` (an error when None), text an error."""
    vals = list(values)
    if default is not None:
        vals = [default if v is None else v for v in vals]
    bad = next((i for i, v in enumerate(vals) if type(v) is not int), None)  # an index: the value may be None
    if bad is not None:
        value = vals[bad]
        what = "NULL" if value is None else f"{type(value).__name__} value {_short(value)}"
        raise db.fail(f"column {name} holds {what} where an integer belongs")
    out = next((v for v in vals if not -(2**63) <= v < 2**63), None)
    if out is not None:
        raise db.fail(f"column {name} holds {out} where an int64 belongs")
    return np.array(vals, dtype=np.int64) if vals else np.zeros(0, dtype=np.int64)


def nullable_ints(values: Iterable[Any], name: str, db: Database) -> np.ndarray:
    """An integer column that may be NULL, as float64 with NaN for NULL; text an error."""
    vals = list(values)
    bad = next((i for i, v in enumerate(vals) if v is not None and type(v) is not int), None)
    if bad is not None:
        raise db.fail(f"column {name} holds {type(vals[bad]).__name__} value {_short(vals[bad])} where an integer belongs")
    return np.array([np.nan if v is None else float(v) for v in vals], dtype=np.float64)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def intervals(starts: np.ndarray, ends: np.ndarray, name: str, db: Database) -> None:
    """Every row ends at or after it starts."""
    if len(starts) and (ends < starts).any():
        i = int(np.argmax(ends < starts))
        raise db.fail(f"{name} row ends before it starts ({int(starts[i])} > {int(ends[i])} ns)")


def texts(ids: np.ndarray, strings: dict[int, str]) -> list[str]:
    """String ids through the database's string table ('' for an id it lacks)."""
    return [strings.get(int(i), "") for i in ids]
