"""The fuzz harness (tests/fuzz.py) in CI: 2,000 mutated corpus traces, none may crash,
hang or blow up memory; and the harness's own watchdog and memory limit do fire."""

from __future__ import annotations

import pytest

import fuzz


@pytest.mark.slow
@pytest.mark.corpus
def test_two_thousand_mutated_traces_ingest_or_fail_in_one_line(corpus):
    got = fuzz.fuzz(2000, workers=2, timeout=60, corpus=corpus)
    failures = [f"case {o.number} ({o.seed}): {o.kind}: {o.detail}" for o in got["failures"]]
    assert failures == [], "\n".join(failures[:20])
    counts = got["counts"]
    assert sum(counts.values()) == 2000
    # Both outcomes occur: the mutations are neither all harmless nor all fatal.
    assert counts.get("ok", 0) > 200 and counts.get("error", 0) > 200, counts


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
