"""XPlane reader on real XSpace files: the committed XLA:CPU capture, a fresh capture with
the installed jax, and the MI300X trace from the corpus.

Expectations come from outside the reader: the scope names the fixture script uses, the
jaxlib C++ XSpace parser (jax.profiler.ProfileData), and xprof's hlo_stats tool.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, hlo_stats, run_porter
from porter.core.errors import TraceFormatError
from porter.core.opclass import classify_kernel
from profilers import xplane
from profilers.base import read_head
from profilers.detect import detect, read_trace
from profilers.xla_hlo import scope_and_op

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

CPU_FIXTURE = FIXTURES / "xla_cpu_mlp.xplane.pb"
FIXTURE_SCOPES = {"fc1", "act", "fc2"}  # the jax.named_scope names in fixtures/make_xla_cpu_trace.py
MI300X = "xplane/mi300x_jax_conv3d.xplane.pb"


def profile_data(path: Path):
    """The trace as jaxlib's own C++ XSpace parser sees it."""
    from jax.profiler import ProfileData

    return ProfileData.from_file(str(path))


def thunk_events_us(path: Path) -> list[float]:
    """Durations of XLA:CPU thunk executions (events with an hlo_op stat on /host:CPU),
    leaving out thunks that enclose others on their thread (a while loop around its body)."""
    durs = []
    for plane in profile_data(path).planes:
        if plane.name == "/host:CPU":
            for line in plane.lines:
                spans = [(e.start_ns, e.start_ns + e.duration_ns) for e in line.events if "hlo_op" in dict(e.stats)]
                durs += [(b - a) / 1e3 for a, b in spans
                         if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]
    return durs


def device_events_us(path: Path) -> float:
    return sum(e.duration_ns / 1e3 for plane in profile_data(path).planes if plane.name.startswith("/device:")
               for line in plane.lines for e in line.events)


# ---------------------------------------------------------------- op_name parsing

@pytest.mark.parametrize("op_name, expected", [
    ("jit(f)/jit(main)/blocks.0/attn/dot_general", ("blocks.0/attn", "dot_general")),
    ("jit(loss)/transpose(jvp(outer))/inner/transpose", ("outer/inner", "transpose")),
    ("jit(step)/jvp(fc1)/dot_general", ("fc1", "dot_general")),
    ("pjit(f)/vmap(enc/layer.0)/add", ("enc/layer.0", "add")),
    # names jax 0.10 writes for scan/cond/checkpoint under grad (scopes rnn, cell, gate, blk)
    ("jit(f)/jvp(rnn)/while/body/closed_call/cell/tanh", ("rnn/cell", "tanh")),
    ("jit(f)/transpose(jvp(rnn))/while/cond/lt", ("rnn", "lt")),
    ("jit(f)/jvp(gate)/cond/branch_0_fun/sub", ("gate", "sub")),
    ("jit(f)/transpose(jvp(blk))/jvp(blk)/checkpoint/rematted_computation/sin", ("blk", "sin")),
    ("jit(f)/transpose(jvp())/broadcast_in_dim", ("", "broadcast_in_dim")),
    ("jit(f)/body/add", ("body", "add")),  # a user scope named like jax internals stays
    ("jit(f)/conv_general_dilated", ("", "conv_general_dilated")),
    ("x", ("", "")),
    ("", ("", "")),
])
def test_scope_and_op(op_name, expected):
    assert scope_and_op(op_name) == expected


def test_im2col_kernels_class_conv():
    assert classify_kernel("Im3d2Col.kd") == "conv"
    assert classify_kernel("im2col_kernel") == "conv"


# ---------------------------------------------------------------- XLA:CPU

def test_cpu_fixture_scopes_classes_and_time():
    r = read_trace(CPU_FIXTURE)
    ops, kernels = r.ops, r.kernels
    assert r.meta.profiler == "xplane" and r.meta.device_type == "cpu"
    assert "jax" in r.meta.framework_versions
    assert set(ops["module"]) == FIXTURE_SCOPES
    dots = ops[ops["framework_op"] == "dot_general"]
    assert set(dots["module"]) == {"fc1", "fc2"}
    assert (dots["op_class"] == "matmul").all()
    assert not ops["synthetic"].any()
    # one op and one kernel per thunk execution, as jaxlib's parser counts them
    thunks = thunk_events_us(CPU_FIXTURE)
    assert len(ops) == len(kernels) == len(thunks)
    assert kernels["dur_us"].sum() == pytest.approx(sum(thunks), rel=1e-9)
    assert ops["device_us"].sum() == pytest.approx(kernels["dur_us"].sum(), rel=1e-12)
    assert ops["device_us"].sum() > 0
    assert r.meta.events_read >= len(thunks)


def test_fresh_capture_with_installed_jax(tmp_path):
    """Capture a tiny jitted grad now, so the reader meets what this jax writes."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def loss(w, x):
        with jax.named_scope("outer"):
            with jax.named_scope("inner"):
                h = x @ w
        with jax.named_scope("post"):
            return jnp.sum(jnp.tanh(h) ** 2)

    step = jax.jit(jax.grad(loss))
    w, x = jnp.asarray(np.ones((32, 16), np.float32)), jnp.asarray(np.ones((8, 32), np.float32))
    step(w, x).block_until_ready()
    with jax.profiler.trace(str(tmp_path / "log")):
        for _ in range(2):
            step(w, x).block_until_ready()
    (path,) = (tmp_path / "log").rglob("*.xplane.pb")
    r = read_trace(path)
    ops = r.ops
    # forward and backward ops both land in the scopes used above (jvp/transpose unwrapped)
    assert set(ops["module"]) <= {"outer/inner", "post"} and "outer/inner" in set(ops["module"])
    assert (ops.loc[ops["module"] == "outer/inner", "op_class"] == "matmul").all()
    thunks = thunk_events_us(path)
    assert len(r.kernels) == len(thunks) > 0
    assert r.kernels["dur_us"].sum() == pytest.approx(sum(thunks), rel=1e-9)


def test_fresh_capture_loop_counts_body_not_while(tmp_path):
    """XLA:CPU runs a fori_loop as a while thunk around its body thunks: count the body only."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def rnn(w, x):
        def body(i, h):
            with jax.named_scope("cell"):
                return jnp.tanh(h @ w)
        with jax.named_scope("rnn"):
            return jax.lax.fori_loop(0, 3, body, x)

    f = jax.jit(rnn)
    w, x = jnp.asarray(np.full((16, 16), 1 / 16, np.float32)), jnp.asarray(np.ones((4, 16), np.float32))
    f(w, x).block_until_ready()
    with jax.profiler.trace(str(tmp_path / "log")):
        f(w, x).block_until_ready()
    (path,) = (tmp_path / "log").rglob("*.xplane.pb")
    r = read_trace(path)
    thunks = thunk_events_us(path)
    assert r.meta.extra["container_events_skipped"] >= 1
    assert len(r.kernels) == len(thunks)
    assert r.kernels["dur_us"].sum() == pytest.approx(sum(thunks), rel=1e-9)
    dots = r.ops[r.ops["op_class"] == "matmul"]
    assert len(dots) == 3 and set(dots["module"]) == {"rnn/cell"}


def step_thunks_us(path: Path) -> dict[int, list[float]]:
    """Thunk durations per step, by jaxlib's parser: a thunk belongs to the host event with a
    step_num stat whose window holds its start (the annotation wraps block_until_ready)."""
    planes = [p for p in profile_data(path).planes if p.name == "/host:CPU"]
    events = [e for p in planes for line in p.lines for e in line.events]
    windows = {dict(e.stats)["step_num"]: (e.start_ns, e.start_ns + e.duration_ns)
               for e in events if "step_num" in dict(e.stats)}
    out: dict[int, list[float]] = {n: [] for n in windows}
    for e in events:
        if "hlo_op" in dict(e.stats):
            for n, (a, b) in windows.items():
                if a <= e.start_ns <= b:
                    out[n].append(e.duration_ns / 1e3)
    return out


def test_step_annotations_give_steps(tmp_path):
    """StepTraceAnnotation (what porter's xla stack writes) numbers each op's step."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    f = jax.jit(lambda w, x: jnp.tanh(x @ w) @ w.T)
    w, x = jnp.asarray(np.ones((32, 16), np.float32)), jnp.asarray(np.ones((8, 32), np.float32))
    f(w, x).block_until_ready()
    f(w, x).block_until_ready()  # outside the trace: not a step
    with jax.profiler.trace(str(tmp_path / "log")):
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("porter_step", step_num=i):
                f(w, x).block_until_ready()
    (path,) = (tmp_path / "log").rglob("*.xplane.pb")
    r = read_trace(path)
    expected = step_thunks_us(path)
    assert sorted(expected) == [0, 1, 2]
    assert sorted(set(r.ops["step"])) == [0, 1, 2]
    assert (r.kernels["step"].to_numpy() == r.ops.set_index("op_id").loc[r.kernels["op_id"], "step"].to_numpy()).all()
    for n, durs in expected.items():
        mine = r.ops[r.ops["step"] == n]
        assert len(mine) == len(durs) > 0
        assert mine["device_us"].sum() == pytest.approx(sum(durs), rel=1e-9) and mine["device_us"].sum() > 0
    # the same program each step: the same HLO ops in the same order
    names = [tuple(r.ops[r.ops["step"] == n].sort_values("start_us")["name"]) for n in range(3)]
    assert names[0] == names[1] == names[2]
    assert r.meta.extra["steps"] == "host step_num markers"


def test_traces_without_step_markers_keep_step_minus_one():
    r = read_trace(CPU_FIXTURE)  # captured without StepTraceAnnotation
    assert (r.ops["step"] == -1).all() and (r.kernels["step"] == -1).all()
    assert r.meta.extra["steps"] == "none marked"


# ---------------------------------------------------------------- MI300X (corpus)

def test_mi300x_device_time_classes_and_xprof(corpus, tmp_path):
    path = corpus / MI300X
    r = read_trace(path)
    ops, kernels = r.ops, r.kernels
    assert r.meta.device_type == "rocm"
    assert r.meta.device_properties["device_vendor"] == "AMD"
    total = kernels["dur_us"].sum()
    assert total == pytest.approx(device_events_us(path), rel=1e-9)
    assert ops["device_us"].sum() == pytest.approx(total, rel=1e-12)
    assert (ops["step"] == -1).all()  # this capture marks no steps
    by_class = ops.groupby("op_class")["device_us"].sum() / total
    assert by_class.get("other", 0.0) < 0.05
    assert by_class.get("conv", 0.0) > 0.5  # a 3-D convolution model

    # xprof's hlo_stats (its own converter) on a copy: same self time per HLO op
    rows = hlo_stats(path, tmp_path)
    assert rows
    mine = ops[~ops["synthetic"]].groupby("name").agg(us=("device_us", "sum"), kernels=("kernel_count", "sum"),
                                                     fw=("framework_op", "first"))
    assert set(mine.index) == {row["hlo_op_name"] for row in rows}
    for row in rows:
        got = mine.loc[row["hlo_op_name"]]
        assert got["us"] == pytest.approx(row["total_self_time"], rel=1e-6)
        assert got["kernels"] == row["occurrences"]
        tf_op = row["tf_op_name"].rstrip(":")
        if "/" in tf_op:
            assert got["fw"] == tf_op.rsplit("/", 1)[-1]


# ---------------------------------------------------------------- CLI

def _cli_ok(trace: Path, out: Path, expect: str) -> None:
    res = run_porter("ingest", str(trace), "-o", str(out))
    assert res.returncode == 0, res.stderr
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["profiler"] == "xplane"
    for by in ("module", "class"):
        shown = run_porter("show", str(bundle), "--by", by)
        assert shown.returncode == 0, shown.stderr
        if by == "module":
            assert expect in shown.stdout


def test_cli_cpu_fixture(tmp_path):
    _cli_ok(CPU_FIXTURE, tmp_path / "b", "fc1")


def test_cli_mi300x(corpus, tmp_path):
    _cli_ok(corpus / MI300X, tmp_path / "b", "(no module)")


# ---------------------------------------------------------------- detection and bad input

def test_sniff_by_content_not_name(tmp_path):
    renamed = tmp_path / "capture.pb"
    shutil.copyfile(CPU_FIXTURE, renamed)
    assert xplane.sniff(renamed, read_head(renamed))
    assert detect(renamed) == "xplane"
    gz_json = FIXTURES / "cpu_mlp.json.gz"
    assert not xplane.sniff(gz_json, read_head(gz_json))


def _bad_files(tmp_path: Path) -> list[Path]:
    noise = tmp_path / "x.xplane.pb"
    noise.write_bytes(random.Random(0).randbytes(4096))
    data = CPU_FIXTURE.read_bytes()
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(data[: len(data) // 2])
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")
    return [noise, cut, empty]


def test_bad_input_exit_2_one_line_no_bundle(tmp_path):
    out = tmp_path / "bundles"
    for bad in _bad_files(tmp_path):
        res = run_porter("ingest", str(bad), "-o", str(out))
        assert res.returncode == 2, (bad, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and str(bad) in lines[0], res.stderr
        with pytest.raises(TraceFormatError):
            xplane.read(bad)
    assert not out.exists() or not any(out.iterdir())


def test_protobuf_that_is_not_xspace(tmp_path):
    other = tmp_path / "other.xplane.pb"
    other.write_bytes(b"\x0a\x02\x08\x01")  # one message with only an id: no named planes
    with pytest.raises(TraceFormatError, match="not an XSpace"):
        xplane.read(other)


_DATA = CPU_FIXTURE.read_bytes()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, len(_DATA)), flips=st.lists(st.tuples(st.integers(0, len(_DATA) - 1), st.integers(0, 7)),
                                                      max_size=4))
def test_damaged_copies_read_or_refuse(cut, flips):
    data = bytearray(_DATA)
    for pos, bit in flips:
        data[pos] ^= 1 << bit
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "damaged.xplane.pb"
        path.write_bytes(bytes(data[:cut]) if cut < len(_DATA) else bytes(data))
        try:
            result = xplane.read(path)
        except TraceFormatError as exc:
            assert exc.path == str(path)
            return
        result.validated()
