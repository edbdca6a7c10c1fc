"""Multi-rank jobs on the corpus's real 8-rank DLRM set: ranks checked as one job, per-rank time
that adds up to each step, collectives with bytes, a planted straggler found, bad directories
refused in one line with nothing written."""

from __future__ import annotations

import gzip
import importlib.util
import shutil
from pathlib import Path

import pytest

from benchmarks.replicate_ranks import build
from porter.bundles.job import is_job
from porter.core.jobranks import JobError, rank_from_name
from porter.pipeline.job import ingest_job, view_job
from tests.conftest import corpus_dir, run_porter

JOB = corpus_dir() / "multirank" / "v100_dlrm_8rank"
pytestmark = pytest.mark.skipif(not JOB.is_dir(), reason=f"multi-rank corpus set not found at {JOB} "
                                                         "(set PORTER_TRACE_CORPUS to ../shared/traces)")


@pytest.fixture(scope="module")
def dlrm():
    return view_job(JOB, engine="serial")


@pytest.mark.parametrize("name,rank", [("rank-3.json.gz", 3), ("trace_rank_12.pt.trace.json", 12),
                                       ("worker_rank7.json", 7), ("h100.json.gz", None), ("franks-2.json", None)])
def test_rank_from_file_name(name, rank):
    assert rank_from_name(name) == rank


def test_every_rank_adds_up_to_its_step(dlrm):
    job, view = dlrm
    assert job.world_size == 8 and job.backend == "nccl" and job.steps == (10,)
    assert [r.rank for r in view.ranks] == list(range(8))
    for r in view.ranks:
        assert r.compute_us + r.exposed_us + r.idle_us == pytest.approx(r.step_us, abs=1e-6)
        assert 0 < r.exposed_us <= r.communication_us
    assert view.ranks[0].step_us == pytest.approx(14455.0)  # ProfilerStep#10's host range on rank 0
    # one host: the raw clocks agree to microseconds, and alignment says so
    assert max(view.clock.raw_skew_us.values()) < 5 and view.clock.anchors == 8


def test_collectives_carry_kind_bytes_and_algorithm(dlrm):
    _, view = dlrm
    kinds = [f"{c.kind}#{c.kind_seq}" for c in view.collectives]
    assert kinds.count("all_reduce#0") == 1 and sum(k.startswith("all_to_all") for k in kinds) == 5
    ar = next(c for c in view.collectives if c.kind == "all_reduce" and c.kind_seq == 0)
    assert ar.bytes == 394241 * 4 and (ar.algorithm, ar.protocol) == ("RING", "LL")  # nccl:all_reduce [[394241]] float
    assert ar.bus_gbps is not None and 1 < ar.bus_gbps < 300  # V100 NVLink


def test_planted_straggler_is_named_with_its_op_and_wait(tmp_path):
    planted = build(JOB / "rank-0.json.gz", tmp_path / "job", 8, clock_step_us=1_370_000.0, slow_rank=5,
                    slow_op="aten::mm", delay_us=2000.0)
    _, view = view_job(tmp_path / "job", engine="serial")
    s = view.straggler
    assert (s.rank, s.op, s.kind) == (5, "aten::mm", "all_reduce")
    assert s.wait_us == pytest.approx(planted.delay_us, rel=0.05)
    assert all(w == pytest.approx(2000.0, rel=0.05) for w in s.waits_us.values()) and 5 not in s.waits_us
    assert view.clock.offsets_us[7] == pytest.approx(-7 * 1_370_000.0, abs=1.0)  # hosts' clocks undone
    assert any("more than a step off" in f for f in view.findings)


def test_ingest_writes_one_bundle_per_rank_and_reads_back_the_same(tmp_path, dlrm):
    dest, job = ingest_job(JOB, tmp_path / "out", engine="serial")
    assert is_job(dest) and sorted(p.name for p in dest.iterdir() if p.is_dir()) == [f"rank-{r}" for r in range(8)]
    assert view_job(dest, engine="serial")[1] == dlrm[1]


def test_cli_show_by_rank_and_ingest(tmp_path):
    done = run_porter("show", str(JOB), "--by", "rank")
    assert done.returncode == 0, done.stderr
    assert "8 ranks (nccl)" in done.stdout and "straggler (*): rank 7" in done.stdout
    done = run_porter("ingest", str(JOB), "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "job of 8 ranks" in done.stdout and is_job(tmp_path / JOB.name)


def _job_dir(tmp_path: Path, names: dict[str, Path]) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    for name, src in names.items():
        shutil.copy(src, d / name)
    return d


def _ranks(*ranks: int) -> dict[str, Path]:
    return {f"rank-{r}.json.gz": JOB / f"rank-{r}.json.gz" for r in ranks}


@pytest.mark.parametrize("files,message", [
    (lambda: _ranks(*range(7)), "1 of 8 ranks missing: rank 7"),
    (lambda: {**_ranks(*range(8)), "copy_of_rank_0.json.gz": JOB / "rank-0.json.gz"}, "rank 0 appears 2 times"),
    (lambda: {**_ranks(*range(8)), "other_rank_0.json.gz": corpus_dir() / "kineto" / "a100_nccl_rank0_of2.json.gz"},
     "ranks of different jobs"),
    (lambda: {**_ranks(*range(7)), "rank-7.json.gz": JOB / "rank-3.json.gz"}, "file name says rank 7"),
])
def test_bad_job_directories_fail_in_one_line_and_write_nothing(tmp_path, files, message):
    d = _job_dir(tmp_path, files())
    with pytest.raises(JobError, match=message):
        ingest_job(d, tmp_path / "out", engine="serial")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_truncated_rank_fails_in_one_line_and_writes_nothing(tmp_path):
    d = _job_dir(tmp_path, _ranks(*range(8)))
    data = gzip.decompress((d / "rank-4.json.gz").read_bytes())
    (d / "rank-4.json.gz").write_bytes(gzip.compress(data[: len(data) // 2]))
    out = tmp_path / "out"
    done = run_porter("ingest", str(d), "-o", str(out))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "rank-4.json.gz" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not any(out.iterdir())


def test_local_pool_gives_the_serial_view(dlrm):
    assert view_job(JOB, engine="local", workers=2)[1] == dlrm[1]


def test_unknown_engine_is_one_line():
    done = run_porter("show", str(JOB), "--by", "rank", "--engine", "dask")
    assert done.returncode == 2 and "--engine must be one of local, serial, ray" in done.stderr
    assert "Traceback" not in done.stderr


# Ray: a real local instance (ray.init with two CPUs), started by each call as `--engine ray` does.
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="--engine ray needs ray: pip install 'porter[distributed]' (the test command installs it)")


@needs_ray
def test_ray_gives_the_serial_view_and_the_same_job_bundle(tmp_path, dlrm):
    assert view_job(JOB, engine="ray", workers=2)[1] == dlrm[1]
    dest, job = ingest_job(JOB, tmp_path / "ray", engine="ray", workers=2)
    serial, _ = ingest_job(JOB, tmp_path / "serial", engine="serial")
    import pandas as pd

    for r in range(8):  # each rank's bundle as its Ray worker wrote it, table for table
        for table in ("ops.parquet", "kernels.parquet"):
            pd.testing.assert_frame_equal(pd.read_parquet(dest / f"rank-{r}" / table),
                                          pd.read_parquet(serial / f"rank-{r}" / table))
    assert job.world_size == 8


@needs_ray
def test_ray_from_the_cli_prints_what_the_default_engine_prints_and_nothing_of_rays(tmp_path):
    local = run_porter("show", str(JOB), "--by", "rank")
    on_ray = run_porter("show", str(JOB), "--by", "rank", "--engine", "ray")
    assert on_ray.returncode == local.returncode == 0, on_ray.stderr
    assert on_ray.stdout == local.stdout and "straggler (*): rank 7" in on_ray.stdout
    assert on_ray.stderr == ""  # Ray's start-up lines stay out of porter's output


@needs_ray
def test_a_truncated_rank_on_ray_is_the_readers_one_line(tmp_path):
    d = _job_dir(tmp_path, _ranks(*range(8)))
    data = gzip.decompress((d / "rank-2.json.gz").read_bytes())
    (d / "rank-2.json.gz").write_bytes(gzip.compress(data[: len(data) // 3]))
    done = run_porter("ingest", str(d), "-o", str(tmp_path / "out"), "--engine", "ray")
    assert done.returncode == 2 and "rank-2.json.gz" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not any((tmp_path / "out").iterdir())
