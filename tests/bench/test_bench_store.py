"""The benchmark history store: the same tests on SQLite and on a real PostgreSQL server.

PostgreSQL comes from $PORTER_TEST_POSTGRES_URL (.ci/run installs and starts a server
and exports it); each test gets its own schema.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from porter.bench.parquet import export_run, read_run
from porter.bench.records import CaseResult, RunRecord, new_run_id, now_iso
from porter.bench.regress import regress
from porter.bench.store import Store
from porter.core.errors import PorterError
from tests.bench_support import REPO, postgres_schema_url, postgres_url, recorded_runs


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield str(tmp_path / "bench.sqlite")
        return
    base = postgres_url()
    psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL store needs psycopg (pip install 'porter[team]')")
    url, schema = postgres_schema_url(base)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield url
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def make_run(samples=(0.010, 0.011, 0.012), started=None) -> RunRecord:
    ok = CaseResult("mlp", "cpu:eager", "cpu:Test CPU", {"model": "mlp", "threshold": 0.05}, samples_s=list(samples),
                    number=7, info={"device": {"name": "Test CPU"}})
    failed = CaseResult("mlp", "cuda:eager", "cuda:unknown", {"model": "mlp", "threshold": 0.05}, "failed",
                        "target cuda:eager is not available")
    return RunRecord(new_run_id(), "unit", started or now_iso(), now_iso(), {"host": "h", "versions": {"torch": "x"}},
                     {"load_average": [0.5, 0.4, 0.3]}, [ok, failed])


def test_a_run_round_trips_with_every_sample_and_its_failure(store_url):
    run = make_run()
    with Store(store_url) as store:
        assert store.write_run(run) is True
        assert store.write_run(run) is False  # the same run id lands once
        back = store.load_run(run.run_id)
        assert [r.samples_s for r in back.results] == [[0.010, 0.011, 0.012], []]
        assert back.results[0].number == 7 and back.results[1].error == "target cuda:eager is not available"
        assert back.environment == run.environment and back.context == run.context
        hist = store.histories()
        assert set(hist) == {"mlp | cpu:Test CPU | cpu:eager", "mlp | cuda:unknown | cuda:eager"}
        assert [e.status for e in hist["mlp | cuda:unknown | cuda:eager"]] == ["failed"]


def test_a_run_that_fails_mid_write_leaves_nothing(store_url):
    bad = make_run()
    bad.results.append(CaseResult("cnn", "cpu:eager", "cpu:Test CPU", {}, samples_s=[0.1, "not a number"]))
    with Store(store_url) as store:
        store.write_run(make_run())
        with pytest.raises(ValueError):
            store.write_run(bad)
        assert len(store.runs()) == 1
        assert all(e.run_id != bad.run_id for h in store.histories().values() for e in h)


def test_parquet_export_imports_into_any_store(store_url, tmp_path):
    run = make_run()
    path = export_run(run, tmp_path / "runs")
    assert read_run(path) == run
    with Store(store_url) as store:
        assert store.write_run(read_run(path))
        assert store.load_run(run.run_id) == run


def test_recorded_history_through_the_store_raises_no_alert(store_url):
    runs = [r for r in recorded_runs() if r.context["planted_slowdown"] == 0.0]
    with Store(store_url) as store:
        for r in reversed(runs):  # written out of order: history order comes from started_at
            store.write_run(r)
        hist = store.histories()
        (series,) = hist
        assert [e.run_id for e in hist[series]] == [r.run_id for r in runs]
        assert [e.samples_s for e in hist[series]] == [r.results[0].samples_s for r in runs]
        assert not regress(hist).regressions


WRITER = textwrap.dedent("""
    import sys
    from tests.bench.test_bench_store import make_run
    from porter.bench.store import Store
    store = Store(sys.argv[1])
    for i in range(int(sys.argv[2])):
        assert store.write_run(make_run(samples=[0.001 * (k + 1) for k in range(200)]))
""")


def test_two_concurrent_writers_both_land(store_url):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, store_url, "10"], cwd=REPO, env=env,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    with Store(store_url) as store:
        assert len(store.runs()) == 20
        assert all(len(e.samples_s) in (0, 200) for h in store.histories().values() for e in h)


def test_a_bad_store_is_one_line_error(tmp_path):
    with pytest.raises(PorterError, match="PostgreSQL"):
        Store("postgresql://nobody:wrong@127.0.0.1:1/none")
    (tmp_path / "not.sqlite").write_text("this is not a database")
    with pytest.raises(PorterError):
        Store(tmp_path / "not.sqlite")
    with pytest.raises(PorterError, match="not a Parquet file"):
        read_run(tmp_path / "not.sqlite")
