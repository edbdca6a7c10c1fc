"""`porter diagnose --from JOB --to JOB`: two multi-rank jobs, ranks paired by id, collectives
compared as their own class, the collective gap split into waiting and transfer.

The corpus holds one multi-rank job (8 V100 ranks of DLRM, NCCL): it is diagnosed against
itself (the same job recorded twice), and a job made from its rank 0 is diagnosed against the
same job with one rank's aten::mm slowed by a known 2 ms (benchmarks/replicate_ranks.py)."""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks.replicate_ranks import build
from tests.conftest import corpus_dir, run_porter

JOB = corpus_dir() / "multirank" / "v100_dlrm_8rank"
pytestmark = pytest.mark.skipif(not JOB.is_dir(), reason=f"multi-rank corpus set not found at {JOB} "
                                                         "(set PORTER_TRACE_CORPUS to ../shared/traces)")
DELAY_US = 2000.0


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A 4-rank job and the same job with rank 2 slowed by DELAY_US in aten::mm, diagnosed."""
    tmp = tmp_path_factory.mktemp("jobs")
    build(JOB / "rank-0.json.gz", tmp / "a", 4)
    build(JOB / "rank-0.json.gz", tmp / "b", 4, slow_rank=2, slow_op="aten::mm", delay_us=DELAY_US)
    r = run_porter("diagnose", "--from", str(tmp / "a"), "--to", str(tmp / "b"), "-o", str(tmp / "diag"))
    assert r.returncode == 0, r.stderr
    return tmp / "diag", json.loads((tmp / "diag" / "job.json").read_text()), r.stdout


def test_a_planted_straggler_is_the_job_pairs_finding_with_its_op_and_wait(planted):
    diag, job, stdout = planted
    assert job["world_size"] == 4 and [r["rank"] for r in job["ranks"]] == [0, 1, 2, 3]
    s = job["target"]["straggler"]
    assert (s["rank"], s["op"]) == (2, "aten::mm") and job["source"]["straggler"] is None
    assert s["wait_us"] == pytest.approx(DELAY_US, rel=0.05)
    # the other three ranks wait DELAY_US inside their collective: per rank, 3/4 of it, all of it waiting
    classes = {c["op_class"]: c for c in job["by_class"]}
    assert classes["collective"]["delta_us"] == pytest.approx(0.75 * DELAY_US, rel=0.05)
    assert classes["matmul"]["delta_us"] == pytest.approx(0.25 * DELAY_US, rel=0.05)
    assert all(c["target_transfer_us"] == pytest.approx(c["source_transfer_us"], abs=1.0) for c in job["collectives"])
    assert "mostly waiting: the target's straggler is rank 2 (behind in aten::mm" in job["communication"]
    # the straggler's own fix first; the collective fixes after it, marked as not the cause
    first = job["fixes"][0]
    assert first["ranks"] == [2] and first["note"].startswith("on the straggler, rank 2")
    comm = [f for f in job["fixes"] if f["op_classes"] == ["collective"]]
    assert {f["fix_id"] for f in comm} == {"collective-algorithm", "collective-overlap"}
    assert all(f["ranks"] == [0, 1, 3] and "waiting for rank 2, not transfer" in f["note"] for f in comm)
    assert job["fixes"].index(comm[0]) > 0
    # each rank pair is an ordinary diagnosis, with its reports
    for r in range(4):
        d = json.loads((diag / f"rank-{r}" / "diagnosis.json").read_text())
        assert (diag / f"rank-{r}" / "report.html").is_file()
        gap = {c["key"]: c["delta_us"] for c in d["by_class"]}
        assert gap["matmul" if r == 2 else "collective"] == pytest.approx(DELAY_US, rel=0.05)
    assert "straggler rank 2 (behind in aten::mm)" in stdout and (diag / "job.md").is_file()


def test_the_same_job_recorded_twice_diagnoses_to_no_gap_with_every_collective_matched(tmp_path):
    r = run_porter("diagnose", "--from", str(JOB), "--to", str(JOB), "-o", str(tmp_path / "d"), "--no-report")
    assert r.returncode == 0, r.stderr
    job = json.loads((tmp_path / "d" / "job.json").read_text())
    assert job["world_size"] == 8 and job["job"]["ratio"] == pytest.approx(1.0)
    assert all(abs(c["delta_us"]) < 1e-6 for c in job["by_class"]) and "collective" in {c["op_class"] for c in job["by_class"]}
    assert len(job["collectives"]) == 8 and job["collectives_one_sided"] == []
    assert job["source"]["straggler"]["rank"] == job["target"]["straggler"]["rank"] == 7
    assert [f for f in job["fixes"] if f["kind"] != "accuracy"] == []


def test_jobs_that_do_not_pair_fail_in_one_line_before_writing(tmp_path):
    four = tmp_path / "four"
    four.mkdir()
    for rank in range(4):
        shutil.copy(JOB / f"rank-{rank}.json.gz", four / f"rank-{rank}.json.gz")
    for args, words in [((str(four), str(JOB)), "4 ranks on the source, 8 on the target"),
                        ((str(JOB), str(JOB / "rank-0.json.gz")), "is a multi-rank job and"),
                        ((str(JOB / "rank-0.json.gz"), str(JOB)), "a job diagnoses against a job"),
                        ((str(JOB), str(JOB), "--perfetto"), "--perfetto applies to one pair of runs")]:
        out = tmp_path / "out"
        r = run_porter("diagnose", "--from", args[0], "--to", args[1], *args[2:], "-o", str(out))
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr
        assert not out.exists()
