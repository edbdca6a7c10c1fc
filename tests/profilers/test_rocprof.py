"""rocprofv3 JSON reader, checked against the real rocprofiler-sdk trace in the corpus."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_porter
from mutation import mutate, read_mutated
from porter.core.errors import TraceFormatError
from porter.core.opclass import classify_kernel
from profilers import rocprof
from profilers.base import read_head
from profilers.detect import detect, read_trace

ROCPROF = "rocprof/rocprofv3_908_results.json.gz"


@pytest.fixture(scope="module")
def raw(corpus: Path) -> dict:
    """The trace parsed with plain json, for expectations independent of the reader."""
    with gzip.open(corpus / ROCPROF, "rt") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def result(corpus: Path):
    return read_trace(corpus / ROCPROF)


def test_sniffed_as_rocprofv3(corpus: Path) -> None:
    path = corpus / ROCPROF
    assert rocprof.sniff(path, read_head(path))
    assert detect(path) == "rocprofv3"


def test_kernels_match_raw_records(raw: dict, result) -> None:
    """Every dispatch and copy record is one kernels row; durations agree to 0.01%."""
    procs = raw["rocprofiler-sdk-tool"]
    records = [r for p in procs for kind in ("kernel_dispatch", "memory_copy") for r in p["buffer_records"].get(kind, [])]
    expected_us = sum(r["end_timestamp"] - r["start_timestamp"] for r in records) / 1000.0
    assert len(result.kernels) == len(records) > 40_000
    assert len(result.ops) == len(records)
    assert result.kernels["dur_us"].sum() == pytest.approx(expected_us, rel=1e-4)
    assert result.ops["device_us"].sum() == pytest.approx(expected_us, rel=1e-4)
    assert result.meta.events_read >= len(records)


def test_kernel_names_from_symbol_table(raw: dict, result) -> None:
    """The first dispatch's row carries the formatted name of its kernel_id's symbol."""
    proc = raw["rocprofiler-sdk-tool"][0]
    first = min(proc["buffer_records"]["kernel_dispatch"], key=lambda r: r["start_timestamp"])
    sym = next(s for s in proc["kernel_symbols"] if s["kernel_id"] == first["dispatch_info"]["kernel_id"])
    row = result.kernels.iloc[0]
    assert row["name"] == sym["formatted_kernel_name"]
    assert row["correlation"] == first["correlation_id"]["internal"]
    assert row["stream"] == first["dispatch_info"]["queue_id"]["handle"]
    assert row["start_us"] == 0.0
    assert row["dur_us"] == pytest.approx((first["end_timestamp"] - first["start_timestamp"]) / 1000.0)


def test_device_and_classes(raw: dict, result) -> None:
    gpus = [a for a in raw["rocprofiler-sdk-tool"][0]["agents"] if a["type"] == 2]
    assert result.meta.device_type == "rocm"
    assert result.meta.device_name and result.meta.device_name == gpus[0]["product_name"]
    assert result.meta.device_properties["wave_front_size"] == gpus[0]["wave_front_size"]
    by_class = result.ops.groupby("op_class")["device_us"].sum()
    assert by_class.get("other", 0.0) / by_class.sum() < 0.05
    # No HIP API records in this trace: every op stands in for its own kernel.
    assert not raw["rocprofiler-sdk-tool"][0]["buffer_records"]["hip_api"]
    assert result.ops["synthetic"].all()
    assert (result.ops["framework_op"] == "").all()


def test_rocm_kernel_rules() -> None:
    """Rules added for ROCm training kernels seen in the rocprofv3 trace."""
    assert classify_kernel("void at::native::(anonymous namespace)::cuComputePartGradGammaBeta<float, float, false>(float const*)") == "norm"
    assert classify_kernel("void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, float>(float const*, int)") == "reduction"


@pytest.mark.slow
def test_cli_ingest_and_show(corpus: Path, tmp_path: Path) -> None:
    done = run_porter("ingest", str(corpus / ROCPROF), "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    bundle = next(tmp_path.iterdir())
    shown = run_porter("show", str(bundle), "--by", "class")
    assert shown.returncode == 0, shown.stderr
    assert "collective" in shown.stdout


def test_truncated_gzip_is_one_line_error(corpus: Path, tmp_path: Path) -> None:
    data = (corpus / ROCPROF).read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError):
        read_trace(bad, "rocprofv3")
    done = run_porter("show", str(bad))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


# --- mutated input: a real subset of the trace, damaged at random ---------------------


@pytest.fixture(scope="module")
def small_doc(raw: dict) -> bytes:
    """The first 150 dispatches with the tables that name them (a real, small trace)."""
    proc = dict(raw["rocprofiler-sdk-tool"][0])
    dispatches = proc["buffer_records"]["kernel_dispatch"][:150]
    used = {r["dispatch_info"]["kernel_id"] for r in dispatches}
    proc["buffer_records"] = {"kernel_dispatch": dispatches, "hip_api": [], "memory_copy": []}
    proc["kernel_symbols"] = [s for s in proc["kernel_symbols"] if s["kernel_id"] in used]
    proc["strings"] = {"buffer_records": proc["strings"]["buffer_records"]}
    return orjson.dumps({"rocprofiler-sdk-tool": [proc]})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_trace_reads_or_fails_cleanly(small_doc: bytes, data) -> None:
    read_mutated(mutate(small_doc, data.draw), "rocprofv3", ".json")


def test_hip_api_call_links_to_its_dispatch(small_doc: bytes, tmp_path: Path) -> None:
    """The corpus trace has no HIP API records, so add one (rocprofiler-sdk's record layout)
    for the first dispatch's correlation id: the op then starts at the call and its host time
    is the call's duration; the unlinked ops stay synthetic."""
    doc = orjson.loads(small_doc)
    proc = doc["rocprofiler-sdk-tool"][0]
    first = proc["buffer_records"]["kernel_dispatch"][0]
    launch = proc["strings"]["buffer_records"][5]["operations"].index("hipLaunchKernel")
    proc["buffer_records"]["hip_api"] = [{
        "size": 56, "kind": 5, "operation": launch, "thread_id": first["thread_id"],
        "correlation_id": dict(first["correlation_id"]),
        "start_timestamp": first["start_timestamp"] - 9000, "end_timestamp": first["start_timestamp"] - 4000}]
    path = tmp_path / "with_api.json"
    path.write_bytes(orjson.dumps(doc))
    result = read_trace(path)
    op = result.ops.iloc[0]
    assert op["start_us"] == 0.0 and op["host_us"] == pytest.approx(5.0) and not op["synthetic"]
    assert result.kernels.iloc[0]["start_us"] == pytest.approx(9.0)
    assert result.ops["synthetic"].iloc[1:].all()
