"""The benchmark history: SQLite (stdlib, WAL) by default, the same schema on PostgreSQL.

Tables: ``environments`` (machine + software, deduplicated by hash), ``runs`` (one per
`porter bench`), ``cases`` (one per case x target in a run, with its series key, status
and noise verdict) and ``samples`` (every raw sample). A run is written in one
transaction, so a reader, a crash or a Ctrl-C sees all of a run or none of it; SQLite
writers take the write lock up front (BEGIN IMMEDIATE) and wait for each other, so two
`porter bench` processes on one file both land.

Where: ``--db PATH`` (SQLite file), ``--db postgresql://user:pass@host/db`` (psycopg 3),
else $PORTER_BENCH_DB, else ``$XDG_DATA_HOME/porter/bench.sqlite``
(``~/.local/share/porter/bench.sqlite``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from porter.bench.records import CaseResult, RunRecord
from porter.core.errors import PorterError

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS environments (id TEXT PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, suite TEXT NOT NULL, started_at TEXT NOT NULL,"
    " finished_at TEXT NOT NULL, environment_id TEXT NOT NULL REFERENCES environments(id), context TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS cases (id TEXT PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id),"
    " series TEXT NOT NULL, case_name TEXT NOT NULL, device_class TEXT NOT NULL, target TEXT NOT NULL,"
    " spec TEXT NOT NULL, status TEXT NOT NULL, error TEXT NOT NULL, number INTEGER NOT NULL,"
    " unstable INTEGER NOT NULL, info TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS samples (case_id TEXT NOT NULL REFERENCES cases(id), idx INTEGER NOT NULL,"
    " seconds DOUBLE PRECISION NOT NULL, PRIMARY KEY (case_id, idx))",
    "CREATE INDEX IF NOT EXISTS cases_series ON cases (series)",
    "CREATE INDEX IF NOT EXISTS cases_run ON cases (run_id)",
    "CREATE INDEX IF NOT EXISTS runs_started ON runs (started_at)",
)
SCHEMA_LOCK = 7_170_017  # PostgreSQL advisory lock id: concurrent first runs create the tables once
# (the last object SCHEMA creates is the runs_started index: when it exists, so does the rest)


def default_db() -> str:
    if os.environ.get("PORTER_BENCH_DB"):
        return os.environ["PORTER_BENCH_DB"]
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return str(base / "porter" / "bench.sqlite")


def runs_dir(url: str) -> Path:
    """Where a run's Parquet artifact goes unless --export says: beside a SQLite store
    (``bench.sqlite`` -> ``bench-runs/``), else the user's data folder; never the current
    directory, which a user did not ask porter to write into."""
    if not is_postgres(url):
        path = Path(url.removeprefix("sqlite:///")).expanduser()
        return path.with_name(f"{path.stem}-runs")
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "porter" / "bench-runs"


def safe_url(url: str) -> str:
    """A store's address fit to print: the password masked."""
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


@dataclass(frozen=True)
class RunRow:
    id: str
    suite: str
    started_at: str
    finished_at: str
    environment_id: str


@dataclass
class HistoryEntry:
    """One run of one series, in history order."""

    run_id: str
    started_at: str
    status: str
    unstable: bool
    threshold: float
    samples_s: list[float]
    error: str = ""


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _wal(conn: sqlite3.Connection, wait_s: float = 120.0) -> None:
    """Switch a store to WAL, waiting for another writer: SQLite answers a journal-mode change
    that races a second process opening a new file with "database is locked" at once, without
    its busy handler (two `porter bench` runs starting together failed so)."""
    deadline = time.monotonic() + wait_s
    delay = 0.01
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


class Store:
    """A history store at a SQLite path or a PostgreSQL URL (see module doc)."""

    def __init__(self, url: str | Path | None = None) -> None:
        self.url = str(url or default_db())
        self.postgres = is_postgres(self.url)
        self.conn: Any = self._connect()
        with self._tx() as cur:
            if self.postgres:  # DDL on a table in use would lock against writers: run it only once
                cur.execute("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))
                if cur.execute("SELECT to_regclass('runs_started')").fetchall()[0][0] is not None:
                    return
            for stmt in SCHEMA:
                cur.execute(stmt)

    def _connect(self) -> Any:
        if self.postgres:
            try:
                import psycopg
            except ImportError:
                raise PorterError("a PostgreSQL store needs psycopg", hint="pip install 'psycopg>=3.1'") from None
            try:
                return psycopg.connect(self.url, connect_timeout=10)
            except psycopg.Error as exc:
                raise PorterError(f"cannot connect to the PostgreSQL store: {' '.join(str(exc).split())}") from None
        path = Path(self.url.removeprefix("sqlite:///"))
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(path, timeout=120, isolation_level=None)
            _wal(conn)
            conn.execute("PRAGMA busy_timeout=120000")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise PorterError(f"cannot open the SQLite store: {exc}", path=path) from None
        return conn

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        """One transaction; yields something with execute/executemany taking '?' placeholders."""
        if self.postgres:
            with self.conn.transaction():
                yield _PgCursor(self.conn.cursor())
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.postgres:
            with self.conn.transaction():
                return self.conn.execute(sql.replace("?", "%s"), params).fetchall()
        return self.conn.execute(sql, params).fetchall()

    # ---- writing ----
    def write_run(self, run: RunRecord) -> bool:
        """Store run in one transaction; False (and nothing written) when its id is already there."""
        with self._tx() as cur:
            if cur.execute("SELECT 1 FROM runs WHERE id = ?", (run.run_id,)).fetchall():
                return False
            cur.execute("INSERT INTO environments (id, body) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
                        (run.environment_id, _dumps(run.environment)))
            cur.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?)",
                        (run.run_id, run.suite, run.started_at, run.finished_at, run.environment_id, _dumps(run.context)))
            for i, r in enumerate(run.results):
                case_id = f"{run.run_id}:{i}"
                cur.execute("INSERT INTO cases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (case_id, run.run_id, r.key.text, r.case, r.device_class, r.target, _dumps(r.spec),
                             r.status, r.error, r.number, int(r.unstable), _dumps(r.info)))
                if r.samples_s:
                    cur.executemany("INSERT INTO samples VALUES (?, ?, ?)",
                                    [(case_id, k, float(s)) for k, s in enumerate(r.samples_s)])
        return True

    # ---- reading ----
    def runs(self) -> list[RunRow]:
        rows = self._query("SELECT id, suite, started_at, finished_at, environment_id FROM runs ORDER BY started_at, id")
        return [RunRow(*row) for row in rows]

    def load_run(self, run_id: str) -> RunRecord:
        rows = self._query("SELECT r.suite, r.started_at, r.finished_at, e.body, r.context FROM runs r "
                           "JOIN environments e ON e.id = r.environment_id WHERE r.id = ?", (run_id,))
        if not rows:
            raise PorterError(f"no run {run_id} in the store", hint=safe_url(self.url))
        suite, started, finished, env, ctx = rows[0]
        samples = self._samples("WHERE c.run_id = ?", (run_id,))
        rows = self._query("SELECT id, case_name, device_class, target, spec, status, error, number, unstable, info "
                           "FROM cases WHERE run_id = ?", (run_id,))
        rows.sort(key=lambda row: int(row[0].rpartition(":")[2]))  # the order the run wrote them in
        results = [
            CaseResult(name, target, dev, json.loads(spec), status, error, samples.get(cid, []), number, bool(unstable),
                       json.loads(info))
            for cid, name, dev, target, spec, status, error, number, unstable, info in rows
        ]
        return RunRecord(run_id, suite, started, finished, json.loads(env), json.loads(ctx), results)

    def _samples(self, where: str, params: tuple[Any, ...]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for cid, seconds in self._query(
                f"SELECT s.case_id, s.seconds FROM samples s JOIN cases c ON c.id = s.case_id {where} "
                "ORDER BY s.case_id, s.idx", params):
            out.setdefault(cid, []).append(float(seconds))
        return out

    def histories(self) -> dict[str, list[HistoryEntry]]:
        """Every series' runs in history order (started_at, then run id), with raw samples."""
        samples = self._samples("", ())
        out: dict[str, list[HistoryEntry]] = {}
        for cid, series, run_id, started, status, unstable, spec, error in self._query(
                "SELECT c.id, c.series, c.run_id, r.started_at, c.status, c.unstable, c.spec, c.error FROM cases c "
                "JOIN runs r ON r.id = c.run_id ORDER BY r.started_at, r.id, c.id"):
            threshold = float(json.loads(spec).get("threshold", 0.05))
            out.setdefault(series, []).append(
                HistoryEntry(run_id, started, status, bool(unstable), threshold, samples.get(cid, []), error))
        return out


class _PgCursor:
    """A psycopg cursor that takes the '?' placeholders the SQLite side uses."""

    def __init__(self, cur: Any) -> None:
        self.cur = cur

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.cur.execute(sql.replace("?", "%s"), params)

    def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self.cur.executemany(sql.replace("?", "%s"), rows)


__all__ = ["HistoryEntry", "RunRow", "Store", "default_db", "is_postgres", "safe_url"]
