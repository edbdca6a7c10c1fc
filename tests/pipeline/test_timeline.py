"""`porter export --perfetto` and `diagnose --perfetto`: the pair's timeline, parsed back with
Perfetto's own protos (its trace processor is a downloaded binary, so the structure is checked
here: the processes, the tracks per device stream, every slice nested, every group's flow)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from conftest import FIXTURES, run_porter
from porter.bundles.bundle import load_bundle

QWEN = ("kineto/h100_Qwen_Qwen1.5-0.5B-Chat.json.gz", "kineto/mi300x_Qwen_Qwen1.5-0.5B-Chat.json.gz")
TPU = "xplane/tpu_v6e_x4_inference.xplane.pb"
MLP_PAIR = ("--from", str(FIXTURES / "cpu_mlp.json.gz"), "--to", str(FIXTURES / "xla_cpu_mlp.xplane.pb"))


def parse(path: Path):
    """The trace as processes, tracks and slices (begin/end paired per track, in file order)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    trace = Trace.FromString(path.read_bytes())
    processes, tracks, open_, slices, last_ts = {}, {}, defaultdict(list), [], -1
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.HasField("process"):
                processes[d.uuid] = d.process.process_name
            else:
                tracks[d.uuid] = (d.name, d.parent_uuid)
        elif p.HasField("track_event"):
            e = p.track_event
            assert p.timestamp >= last_ts  # packets in time order
            last_ts = p.timestamp
            if e.type == TrackEvent.TYPE_SLICE_BEGIN:
                args = {}
                for a in e.debug_annotations:
                    args[a.name] = a.string_value if a.HasField("string_value") else (
                        a.int_value if a.HasField("int_value") else a.double_value)
                s = {"track": e.track_uuid, "name": e.name, "start": p.timestamp, "args": args,
                     "flow_out": list(e.flow_ids), "flow_in": list(e.terminating_flow_ids)}
                open_[e.track_uuid].append(s)
                slices.append(s)
            else:
                assert e.type == TrackEvent.TYPE_SLICE_END and open_[e.track_uuid], "an end with no open slice"
                open_[e.track_uuid].pop()["end"] = p.timestamp  # the innermost open slice: nesting holds
    assert not any(open_.values()), "slices left open"
    return processes, tracks, slices


def side_of(tracks: dict, processes: dict, slice_: dict) -> str:
    return processes[tracks[slice_["track"]][1]].split(":")[0]


@pytest.mark.corpus
def test_a_corpus_pair_exports_both_devices_every_stream_and_a_flow_per_matched_group(corpus, tmp_path):
    diag = tmp_path / "qwen"
    r = run_porter("diagnose", "--from", str(corpus / QWEN[0]), "--to", str(corpus / QWEN[1]), "-o", str(diag))
    assert r.returncode == 0, r.stderr
    r = run_porter("export", str(diag), "--perfetto")
    assert r.returncode == 0, r.stderr
    processes, tracks, slices = parse(diag / "pair.pftrace")
    assert sorted(processes.values()) == ["source: NVIDIA H100 80GB HBM3, kineto", "target: AMD Instinct MI300X VF, kineto"]
    doc = json.loads((diag / "diagnosis.json").read_text())
    linked = sum(1 for g in doc["groups"] if g["source_op_ids"] and g["target_op_ids"])
    assert f", {linked} matched groups linked)" in r.stdout
    for role in ("source", "target"):
        b = load_bundle(diag / role)
        pid_uuid = next(u for u, n in processes.items() if n.startswith(role))
        names = {n for n, parent in tracks.values() if parent == pid_uuid}
        streams = b.kernels[b.kernels.device_id >= 0][["device_id", "stream"]].drop_duplicates()
        assert {f"device {d} stream {s}" for d, s in streams.itertuples(index=False)} <= names
        assert "host: framework ops" in names and "largest gaps (top 10 groups)" in names
        # every kernel drawn once on its stream, with its own duration (to the ns)
        mine = [s for s in slices if tracks[s["track"]][1] == pid_uuid and tracks[s["track"]][0].startswith("device")]
        dev = b.kernels[b.kernels.device_id >= 0]
        assert len(mine) == len(dev)
        assert sum(s["end"] - s["start"] for s in mine) / 1e3 == pytest.approx(dev.dur_us.sum(), abs=len(dev) * 1e-3)
    # a flow per matched group that has ops on both sides: out of the source, into the target, tagged with the group
    groups = {g["group_id"]: g for g in doc["groups"] if g["source_op_ids"] and g["target_op_ids"]}
    outs = {f: s for s in slices for f in s["flow_out"]}
    ins = {f: s for s in slices for f in s["flow_in"]}
    assert set(outs) == set(ins) == {gid + 1 for gid in groups}
    for gid, g in groups.items():
        src, tgt = outs[gid + 1], ins[gid + 1]
        assert side_of(tracks, processes, src) == "source" and side_of(tracks, processes, tgt) == "target"
        assert src["args"]["group"] == tgt["args"]["group"] == gid
        assert src["args"]["group gap us"] == pytest.approx(g["delta_us"], abs=1e-3)
        assert src["args"]["group module"] == g["module"]
    # the largest gaps' track holds the ten worst groups, ranked
    worst = sorted(doc["groups"], key=lambda g: -abs(g["delta_us"]))[:10]
    on_track = {s["args"]["group"] for s in slices if tracks[s["track"]][0].startswith("largest gaps")}
    assert on_track == {g["group_id"] for g in worst}
    first = next(s for s in slices if tracks[s["track"]][0].startswith("largest gaps") and s["args"]["group"] == worst[0]["group_id"])
    assert first["name"].startswith(f"#1 gap {worst[0]['delta_us']:+.1f} us: ")


@pytest.mark.corpus
def test_a_tpu_xplane_exports_each_chip_as_its_own_streams_with_every_hlo_op_once(corpus, tmp_path):
    out = tmp_path / "tpu.pftrace"
    r = run_porter("export", str(corpus / TPU), "-o", str(out))
    assert r.returncode == 0, r.stderr
    processes, tracks, slices = parse(out)
    assert list(processes.values()) == ["run: TPU v6 Lite, xplane"]
    assert not any(n.startswith("host") for n, _ in tracks.values())  # an HLO op is its own device record: drawn once
    chips = {n.split()[1] for n, _ in tracks.values() if n.startswith("device")}
    assert chips == {"0", "1", "2", "3"}
    assert len(slices) == 6013  # xprof's hlo_stats occurrences on this file (tests/profilers/test_xplane_tpu.py)
    assert {s["args"]["kind"] for s in slices} >= {"kernel"}


def test_diagnose_perfetto_writes_the_timeline_and_a_rerun_without_it_removes_the_old_one(tmp_path):
    out = tmp_path / "d"
    r = run_porter("diagnose", *MLP_PAIR, "--perfetto", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "pair.pftrace" in r.stdout
    processes, tracks, slices = parse(out / "pair.pftrace")
    assert len(processes) == 2
    ops = pd.read_parquet(out / "source" / "ops.parquet")
    host = [s for s in slices if tracks[s["track"]][0] == "host: framework ops"]
    assert len(host) == int((ops.host_us > 0).sum())  # the eager side: every op with host time, nested
    assert any(s["flow_out"] for s in slices) and any(s["flow_in"] for s in slices)
    r = run_porter("diagnose", *MLP_PAIR, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert not (out / "pair.pftrace").exists()  # the last run's timeline is not this run's


def test_export_refuses_what_it_cannot_write_in_one_line_and_writes_nothing(tmp_path):
    bundle_less = tmp_path / "diag"
    bundle_less.mkdir()
    (bundle_less / "diagnosis.json").write_text(json.dumps({"groups": []}))
    for args, words in [((str(bundle_less),), "the diagnosis has no source bundle"),
                        ((str(FIXTURES / "cpu_mlp.json.gz"),), "name the file: -o run.pftrace"),
                        ((str(FIXTURES / "cpu_mlp.json.gz"), "-o", str(tmp_path)), "is a directory"),
                        ((str(FIXTURES / "cpu_mlp.json.gz"), "-o", str(tmp_path / "x.json")), "named *.pftrace"),
                        ((str(tmp_path / "missing"),), "no such file or directory")]:
        r = run_porter("export", *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, r.stderr)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["diag", "diagnosis.json"]
