"""ONNX Runtime profile reader, on the committed fixture (a real export + ORT CPU profile)
and on a fresh profile from the onnxruntime installed here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, run_porter
from mutation import mutate, read_mutated
from porter.core.errors import TraceFormatError
from profilers import onnxruntime as ort_reader
from profilers.base import read_head
from profilers.detect import detect, read_trace

FIXTURE = FIXTURES / "ort_mlp.json"
SUBMODULES = {"fc1", "block/0", "block/1", "fc2"}  # MLP in fixtures/make_ort_trace.py


def node_events(path: Path) -> list[dict]:
    return [e for e in json.loads(path.read_text()) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]


def check_profile(path: Path) -> None:
    """What any real MLP profile must read as, whichever onnxruntime wrote it."""
    result = read_trace(path)
    events = node_events(path)
    runs = [e for e in json.loads(path.read_text()) if e.get("cat") == "Session" and e["name"] == "model_run"]
    assert len(result.ops) == len(result.kernels) == len(events) > 0
    assert result.ops["device_us"].sum() == pytest.approx(sum(e["dur"] for e in events), rel=1e-4)
    assert set(result.ops["module"]) == SUBMODULES
    assert "aten::linear" in set(result.ops["framework_op"])
    assert set(result.ops["step"]) == set(range(len(runs)))
    linear = result.ops[result.ops["framework_op"] == "aten::linear"]
    assert set(linear["op_class"]) == {"matmul"}
    assert result.meta.device_type == "cpu" and result.meta.device_name == "CPUExecutionProvider"


def test_fixture_detected_and_read() -> None:
    assert ort_reader.sniff(FIXTURE, read_head(FIXTURE))
    assert detect(FIXTURE) == "onnxruntime"
    check_profile(FIXTURE)


def test_without_side_file_ops_keep_onnx_types(tmp_path: Path) -> None:
    bare = tmp_path / "profile.json"
    bare.write_bytes(FIXTURE.read_bytes())
    result = read_trace(bare)
    assert set(result.ops["module"]) == {""}
    assert set(result.ops["framework_op"]) == {e["args"]["op_name"] for e in node_events(bare)}


def copy_fixture(dest: Path) -> Path:
    for suffix in ("", ort_reader.NODES_SUFFIX):
        Path(str(dest) + suffix).write_bytes(Path(str(FIXTURE) + suffix).read_bytes())
    return dest


def test_warmup_runs_named_by_side_file_are_not_steps(tmp_path: Path) -> None:
    path = copy_fixture(tmp_path / "profile.json")
    ort_reader.write_warmup_runs(path, 1)
    doc = json.loads(path.read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in doc if e.get("cat") == "Session" and e["name"] == "model_run")
    kept = [e for e in node_events(path) if any(a <= e["ts"] <= b for a, b in runs[1:])]
    result = read_trace(path)
    assert set(result.ops["step"]) == set(range(len(runs) - 1))
    assert len(result.ops) == len(result.kernels) == len(kept) < len(node_events(path))
    assert result.ops["device_us"].sum() == pytest.approx(sum(e["dur"] for e in kept), rel=1e-4)
    assert result.meta.extra["warmup_runs_dropped"] == 1


@pytest.mark.parametrize("bad", ['{"warmup_runs": -1}', '{"warmup_runs": "1"}', "[1]", "{"])
def test_bad_runs_side_file_is_a_format_error(tmp_path: Path, bad: str) -> None:
    path = copy_fixture(tmp_path / "profile.json")
    Path(str(path) + ort_reader.RUNS_SUFFIX).write_text(bad)
    with pytest.raises(TraceFormatError):
        read_trace(path)


def test_namespace_parsing() -> None:
    """Module names are relative to their parent; the aten overload is dropped."""
    scope = ort_reader.scope_from_namespace(
        ": pkg.M/blocks.0: pkg.Blk/blocks.0.fc: torch.nn.modules.linear.Linear/linear: aten.linear.default")
    assert scope == ort_reader.Scope("blocks.0/fc", "aten::linear")
    top = ort_reader.scope_from_namespace(": pkg.M/sum_1: aten.sum.dim_IntList")
    assert top == ort_reader.Scope("", "aten::sum")


def test_side_file_matches_exported_model() -> None:
    side = json.loads(Path(str(FIXTURE) + ".nodes.json").read_text())
    assert {v["module"] for v in side.values()} == SUBMODULES


@pytest.mark.slow
def test_fresh_export_and_profile(tmp_path: Path) -> None:
    """Export + profile with the installed torch/onnxruntime, then read it."""
    sys.path.insert(0, str(FIXTURES))
    try:
        from make_ort_trace import profile_mlp
    finally:
        sys.path.remove(str(FIXTURES))
    check_profile(profile_mlp(tmp_path / "fresh.json", runs=2))


def test_cli_ingest_and_show(tmp_path: Path) -> None:
    done = run_porter("ingest", str(FIXTURE), "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    shown = run_porter("show", str(next(tmp_path.iterdir())), "--by", "class")
    assert shown.returncode == 0, shown.stderr
    assert "matmul" in shown.stdout


@pytest.mark.parametrize("damage", ["no_dur", "string_dur"])
def test_damaged_durations_are_one_line_errors(tmp_path: Path, damage: str) -> None:
    events = json.loads(FIXTURE.read_text())
    for e in events:
        if damage == "no_dur":
            e.pop("dur", None)
        else:
            e["dur"] = str(e.get("dur"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(events))
    with pytest.raises(TraceFormatError, match="dur"):
        read_trace(bad, "onnxruntime")
    done = run_porter("show", str(bad))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_other_json_list_is_rejected(tmp_path: Path) -> None:
    other = tmp_path / "list.json"
    other.write_text(json.dumps([{"name": "x", "ts": 1}, 2, 3]))
    done = run_porter("show", str(other))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    with pytest.raises(TraceFormatError):
        read_trace(other, "onnxruntime")
    other.write_text(json.dumps([{"name": "x", "ts": 1, "dur": 2, "cat": "Other"}]))
    with pytest.raises(TraceFormatError, match="not an ONNX Runtime profile"):
        read_trace(other, "onnxruntime")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_profile_reads_or_fails_cleanly(data) -> None:
    read_mutated(mutate(FIXTURE.read_bytes(), data.draw), "onnxruntime", ".json")
