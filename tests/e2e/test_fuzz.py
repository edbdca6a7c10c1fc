"""The fuzz harness (tests/fuzz.py) in CI: 600 mutated corpus traces (each ingested and grouped
every `show` way: ~10 cases/s on 2 cores, a minute, as 2,000 ingest-only cases took), none may
crash, hang or blow up memory; and the harness's own watchdog and memory limit do fire.
BENCHMARKS.md records the long campaign."""

from __future__ import annotations

import pytest

import fuzz


@pytest.mark.slow
@pytest.mark.corpus
def test_six_hundred_mutated_traces_ingest_and_group_or_fail_in_one_line(corpus):
    got = fuzz.fuzz(600, workers=2, timeout=60, corpus=corpus)
    failures = [f"case {o.number} ({o.seed}): {o.kind}: {o.detail}" for o in got["failures"]]
    assert failures == [], "\n".join(failures[:20])
    counts = got["counts"]
    assert sum(counts.values()) == 600
    # Both outcomes occur: the mutations are neither all harmless nor all fatal.
    assert counts.get("ok", 0) > 150 and counts.get("error", 0) > 150, counts


@pytest.mark.corpus
def test_every_seed_reads_whole(corpus, tmp_path):
    """Undamaged seeds ingest: a failure in the fuzz is the mutation's doing."""
    from porter.bundles.ingest import ingest

    for seed in fuzz.seeds(corpus):
        path = tmp_path / f"seed{seed.suffix}"
        path.write_bytes(fuzz.gzip.compress(seed.data) if seed.gzipped else seed.data)
        assert ingest(path, tmp_path / "out").is_dir(), seed.name


@pytest.mark.corpus
def test_the_watchdog_counts_a_case_over_its_time_as_a_hang(corpus):
    got = fuzz.fuzz(2, workers=1, timeout=0.0001, corpus=corpus)
    assert got["counts"] == {"hang": 2}


@pytest.mark.corpus
def test_the_memory_limit_binds_in_the_workers(corpus):
    """An address-space limit 64 MB below what a worker already maps: no case can succeed, each
    is still counted (porter's own cap sees the limit and refuses to decompress, or an
    allocation fails), and the harness goes on."""
    got = fuzz.fuzz(4, workers=1, timeout=60, memory_mb=-64, corpus=corpus)
    assert sum(got["counts"].values()) == 4 and "ok" not in got["counts"], got["counts"]


@pytest.mark.corpus
def test_every_registered_reader_has_seeds(corpus):
    """Seeds are found by detection, so a reader registered later (profilers READER_MODULES)
    is fuzzed from its corpus files at once; one without a corpus file or fixture fails here."""
    from profilers.detect import readers

    found = fuzz.seeds(corpus)
    assert {s.fmt for s in found} == set(readers())
    assert len(found) >= 20 and all(s.data for s in found)


@pytest.mark.corpus
def test_sqlite_mutations_replay_from_their_case_number(corpus):
    """The SQLite damage (for the Nsight and rpd readers once registered) on the corpus's rpd
    file: deterministic per case, and it damages (a table or rows changed, or the file cut)."""
    import random
    import sqlite3
    import tempfile
    from pathlib import Path

    from mutation import SQLITE_MAGIC, Pick, mutate_sqlite

    data = (corpus / "rocpd" / "gfx90a_pytorch_matmul.rpd").read_bytes()
    assert data.startswith(SQLITE_MAGIC)
    changed = 0
    for n in range(8):
        a, b = (mutate_sqlite(data, Pick(rng=random.Random(n))) for _ in range(2))
        assert a == b, n
        changed += a != data
        if len(a) < len(data) and not a.startswith(SQLITE_MAGIC):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "db.rpd"
            path.write_bytes(a)
            con = sqlite3.connect(path)
            try:
                con.execute("SELECT name FROM sqlite_master").fetchall()  # still a database, or damaged as one
            except sqlite3.DatabaseError:
                pass
            finally:
                con.close()
    assert changed >= 6
