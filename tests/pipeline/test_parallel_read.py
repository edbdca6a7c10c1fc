"""Two big traces are read in two forked processes; the bundles must be the ones a sequential
read gives, and a bad trace must still fail as one PorterError line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from porter.pipeline import inputs
from porter.core.errors import PorterError
from porter.bundles.ingest import open_any
from tests.conftest import FIXTURES


def test_parallel_read_equals_sequential(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    paths = [FIXTURES / "cpu_mlp.json.gz", FIXTURES / "xla_cpu_mlp.xplane.pb"]
    monkeypatch.setattr(inputs, "PARALLEL_MIN_BYTES", 0)
    specs = [inputs.classify(p, role) for p, role in zip(paths, inputs.SIDES)]
    assert inputs.parallel_read_pays(specs)  # this machine has two cores
    said: list[str] = []
    with inputs.resolve_pair(*paths, tmp_path, progress=said.append) as pair:
        got = [pair.source, pair.target]
    assert said == []  # nothing on stderr before a read error could be the one line
    for path, bundle in zip(paths, got):
        want = open_any(path)
        assert len(bundle.ops) > 10
        pd.testing.assert_frame_equal(bundle.ops, want.ops)
        pd.testing.assert_frame_equal(bundle.kernels, want.kernels)
        assert bundle.manifest["device"] == want.manifest["device"]
        assert bundle.path == path


def test_parallel_read_raises_the_childs_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{"traceEvents": [')
    monkeypatch.setattr(inputs, "PARALLEL_MIN_BYTES", 0)
    with pytest.raises(PorterError) as info:
        with inputs.resolve_pair(FIXTURES / "cpu_mlp.json.gz", bad, tmp_path):
            pass
    assert "broken.json" in str(info.value) and "\n" not in str(info.value)


def test_small_traces_are_read_in_process() -> None:
    specs = [inputs.classify(FIXTURES / "cpu_mlp.json.gz", "source"), inputs.classify(FIXTURES / "ort_mlp.json", "target")]
    assert not inputs.parallel_read_pays(specs)  # kilobytes: a fork would cost more than it saves


def test_parallel_read_relays_each_traces_progress(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Forked readers report their decompression to the parent's reporter: one bar per trace."""
    from profilers import progress

    src, tgt = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    src.write_bytes((FIXTURES / "cpu_mlp.json.gz").read_bytes())
    tgt.write_bytes((FIXTURES / "cpu_mlp.json.gz").read_bytes())
    monkeypatch.setattr(inputs, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(progress, "MIN_BYTES", 0)  # kilobyte fixtures: report them as if big
    seen: dict[Path, list[tuple[int, int]]] = {}
    progress.set_reporter(lambda path, done, total: seen.setdefault(path, []).append((done, total)))
    try:
        got = inputs.open_in_parallel([src, tgt])
    finally:
        progress.set_reporter(None)
    assert [b.path for b in got] == [src, tgt]
    assert set(seen) == {src, tgt}
    for path, reports in seen.items():
        size = path.stat().st_size
        assert reports[-1] == (size, size)  # the last report: every compressed byte consumed
        assert [d for d, _ in reports] == sorted(d for d, _ in reports)
