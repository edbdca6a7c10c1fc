"""benchmarks/replicate.py: an N-fold trace reads back as N times its source.

Expectations come from the source file parsed with plain json, and from porter's reader
on the unreplicated source; the replicated file must give N times each, with every
launch still linked to its own kernels (correlation ids unique per replica).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.replicate import main as replicate_cli
from benchmarks.replicate import replicate
from conftest import FIXTURES, corpus_files
from profilers.detect import read_trace

N = 3
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
SOURCES = [FIXTURES / "cpu_mlp.json.gz",
           *corpus_files("kineto", "mi250_minitoy_train.json.gz"),
           *corpus_files("kineto", "h100_gaunernst_bert-small-uncased.json.gz")]


def raw_events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def is_envelope(e: dict) -> bool:
    """Written once, not replicated: metadata and events outside any process."""
    return e.get("ph") == "M" or not isinstance(e.get("pid"), int)


def device_time(events: list[dict]) -> float:
    return sum(e["dur"] for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS)


def linked_launches(events: list[dict]) -> int:
    """Device events whose correlation id names exactly one runtime call."""
    calls = Counter(e["args"]["correlation"] for e in events
                    if e.get("cat") in {"cuda_runtime", "cuda_driver"} and "correlation" in e.get("args", {}))
    return sum(1 for e in events if e.get("cat") in DEVICE_CATS and calls.get(e["args"].get("correlation")) == 1)


@pytest.fixture(scope="module", params=SOURCES, ids=lambda p: p.name)
def pair(request, tmp_path_factory):
    src: Path = request.param
    out = tmp_path_factory.mktemp("rep") / f"x{N}_{src.name}"
    replicate(src, out, N)
    return src, out


def test_raw_events_replicated(pair) -> None:
    src, out = pair
    a, b = raw_events(src), raw_events(out)
    env = sum(map(is_envelope, a))
    assert sum(map(is_envelope, b)) == env
    assert len(b) == env + N * (len(a) - env)
    assert device_time(b) == pytest.approx(N * device_time(a), rel=1e-4)
    assert linked_launches(b) == N * linked_launches(a)
    corr = [e["args"]["correlation"] for e in b if e.get("cat") in DEVICE_CATS]
    assert len(corr) == len(set(corr))
    flows = Counter((e["ph"], e["id"]) for e in b if e.get("ph") in ("s", "f"))
    assert len(flows) == N * len({(e["ph"], e["id"]) for e in a if e.get("ph") in ("s", "f")})


def test_reads_back_as_n_times_source(pair) -> None:
    src, out = pair
    a, b = read_trace(src), read_trace(out)
    env = sum(map(is_envelope, raw_events(src)))
    assert b.meta.events_read == env + N * (a.meta.events_read - env)
    assert len(b.ops) == N * len(a.ops)
    assert len(b.kernels) == N * len(a.kernels) > 0
    assert b.kernels["dur_us"].sum() == pytest.approx(N * a.kernels["dur_us"].sum(), rel=1e-4)
    assert b.ops["device_us"].sum() == pytest.approx(N * a.ops["device_us"].sum(), rel=1e-4)
    linked = b.kernels["correlation"][b.kernels["correlation"] >= 0]
    assert linked.is_unique
    assert int((b.kernels["op_id"] >= 0).sum()) == N * int((a.kernels["op_id"] >= 0).sum())
    # Same module paths and op names, each N times; N times as many steps.
    assert Counter(b.ops["module"]) == Counter({k: N * v for k, v in Counter(a.ops["module"]).items()})
    assert Counter(b.ops["name"]) == Counter({k: N * v for k, v in Counter(a.ops["name"]).items()})
    steps_a = set(a.ops["step"]) - {-1}
    assert len(set(b.ops["step"]) - {-1}) == N * len(steps_a)


def test_cli_sizes_by_event_count(tmp_path: Path) -> None:
    src = FIXTURES / "cpu_mlp.json.gz"
    body = sum(not is_envelope(e) for e in raw_events(src))
    out = tmp_path / "big.json"
    replicate_cli([str(src), str(out), "--events", str(2 * body + 1)])
    events = json.loads(out.read_text())["traceEvents"]
    assert sum(not is_envelope(e) for e in events) == 3 * body
