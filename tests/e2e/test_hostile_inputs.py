"""Issue 31's five inputs, from real corpus traces: a megabyte shapes arg, a time or id past
int64, a 200 MB kernel name (past the per-field limit), a path porter may not read (or that is no file), and a run
killed while its output is staged. Each ends in a result or one line and exit 2."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import orjson
import pytest

from conftest import FIXTURES, REPO, run_porter
from porter.core.errors import TraceFormatError
from porter.core.units import DISPLAY_CHARS, ELIDED
from profilers.detect import read_trace

MARKER = ELIDED.split("{")[0]  # the elision marker's fixed start
HUGE_DIMS = "[" + "[1024,1024]," * 90_000 + "[]]"  # ~1 MB: one op's Input Dims
ORT = FIXTURES / "ort_mlp.json"


def _one_line_error(done: subprocess.CompletedProcess, name: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("porter: error:") and name in lines[0] and "Usage" not in done.stderr, lines[0]
    return lines[0]


def _kineto(corpus: Path, name: str) -> dict:
    return orjson.loads(gzip.decompress((corpus / "kineto" / name).read_bytes()))


# ---------------------------------------------------------------- 1. a megabyte shapes arg

@pytest.fixture(scope="module")
def huge_dims_trace(corpus, tmp_path_factory) -> Path:
    doc = _kineto(corpus, "h100_gaunernst_bert-small-uncased.json.gz")
    for ev in doc["traceEvents"]:  # every addmm: ops with device time, so the diagnosis's op-shape tables hold them
        if ev.get("cat") == "cpu_op" and ev.get("name") == "aten::addmm":
            ev["args"]["Input Dims"] = HUGE_DIMS
    path = tmp_path_factory.mktemp("dims") / "h100_huge_dims.json.gz"
    path.write_bytes(gzip.compress(orjson.dumps(doc), 1))
    return path


def test_op_shape_grouping_of_a_megabyte_input_dims_arg_stays_small(huge_dims_trace):
    """Was: np.unique over a '<U' copy of every op's signature, rows x longest (here 479 rows x
    1.08M chars, 2 GB; 9.3 GiB in the issue's trace): MemoryError. The key keeps the shapes whole."""
    from porter.analysis.views import time_by

    r = read_trace(huge_dims_trace)
    tracemalloc.start()
    try:
        table = time_by(r.ops, r.kernels, "op-shape")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak / 1e6:.0f} MB"
    assert table["key"].str.contains("[1024,1024],[1024,1024]", regex=False).any()
    assert table["key"].str.len().max() > len(HUGE_DIMS) - 10  # kept whole in the table
    assert abs(table["device_us"].sum() - r.kernels["dur_us"].sum()) < 1e-6 * r.kernels["dur_us"].sum()


def test_show_by_op_shape_elides_the_megabyte_key(huge_dims_trace):
    done = run_porter("show", str(huge_dims_trace), "--by", "op-shape", "--top", "400", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert MARKER in done.stdout and len(done.stdout) < 400_000, len(done.stdout)


def test_diagnose_keeps_the_megabyte_shapes_in_diagnosis_json_and_elides_them_in_reports(corpus, huge_dims_trace,
                                                                                          tmp_path):
    other = corpus / "kineto" / "mi300x_gaunernst_bert-small-uncased.json.gz"
    out = tmp_path / "diag"
    done = run_porter("diagnose", "--from", str(huge_dims_trace), "--to", str(other), "-o", str(out), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    needle = "[1024,1024]," * 2000  # 24 kB of the shapes: more than any view may show
    assert needle in (out / "diagnosis.json").read_text()
    for name in ("report.html", "report.md", "summary.md"):
        text = (out / name).read_text()
        assert needle not in text, name
    assert MARKER in (out / "report.html").read_text()
    assert needle not in done.stdout


# ---------------------------------------------------------------- 2. past int64

def _xspace_with(corpus: Path, tmp_path: Path, damage) -> Path:
    from profilers.xspace_proto import parse_xspace

    space = parse_xspace((corpus / "xplane" / "mi300x_jax_conv3d.xplane.pb").read_bytes())
    damage(space)
    path = tmp_path / "damaged.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return path


def _correlations(space):
    for plane in space.planes:
        if plane.name.startswith(b"/device:"):
            ids = {e.key for e in plane.stat_metadata if e.value.name == b"correlation_id"}
            for line in plane.lines:
                for ev in line.events:
                    for i, stat in enumerate(ev.stats):
                        if stat.metadata_id in ids:
                            yield ev, i, stat


def test_xplane_correlation_past_int64_is_an_input_error_naming_the_column(corpus, tmp_path):
    """Was: OverflowError in the schema's coercion ('Python int too large to convert to C
    long'): one kernel's uint64 correlation id 2**64 - 1 beside a kernel with none (-1)."""
    def damage(space):
        (ev0, _, stat0), (ev1, i1, _) = list(_correlations(space))[:2]
        stat0.uint64_value = 2**64 - 1
        del ev1.stats[i1]

    path = _xspace_with(corpus, tmp_path, damage)
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    message = str(info.value)
    assert str(path) in message and "kernels.correlation" in message and "18446744073709551615" in message
    assert "\n" not in message
    _one_line_error(run_porter("ingest", str(path), "-o", str(tmp_path / "out")), "kernels.correlation")


def test_xplane_uint64_correlation_alone_is_refused_not_wrapped(corpus, tmp_path):
    """Was: read, with the id wrapped to -1 (numpy's uint64 -> int64 cast)."""
    def damage(space):
        next(_correlations(space))[2].uint64_value = 2**63

    with pytest.raises(TraceFormatError, match=r"kernels\.correlation: value 9223372036854775808"):
        read_trace(_xspace_with(corpus, tmp_path, damage))


def test_xplane_line_timestamp_at_int64_min_reads(corpus, tmp_path):
    """A line at -2**63 ns: its times are relative to the first event, so the trace still reads."""
    def damage(space):
        for plane in space.planes:
            if plane.name.startswith(b"/device:"):
                plane.lines[0].timestamp_ns = -(2**63)
                return

    r = read_trace(_xspace_with(corpus, tmp_path, damage))
    assert len(r.kernels) > 0 and (r.kernels["dur_us"] >= 0).all()


# ---------------------------------------------------------------- 3. a 200 MB kernel name

def _with_kernel_name(corpus: Path, path: Path, name: str) -> Path:
    doc = _kineto(corpus, "mi210_gpu_only.json.gz")
    ev = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    ev["name"] = name
    path.write_bytes(orjson.dumps(doc))
    return path


def test_a_200_mb_kernel_name_is_one_line_naming_the_field_within_seconds(corpus, tmp_path):
    """Was a MemoryError inside rich's table layout after 83 s (64 s of it in the kernel class
    rules' regex searches); then an elided table after 6.8 s. Past the per-field limit
    (porter.core.checked.MAX_FIELD_CHARS) it is now refused by name."""
    path = _with_kernel_name(corpus, tmp_path / "huge_kernel.json", "k" * 200_000_000)
    t0 = time.perf_counter()
    done = run_porter("show", str(path), "--by", "kernel", "--top", "50", timeout=300)
    seconds = time.perf_counter() - t0
    line = _one_line_error(done, "huge_kernel.json")
    assert ".name: one value is 200,000,000 characters long" in line and "PORTER_MAX_FIELD_CHARS=0" in line
    assert seconds < 20, seconds


def test_a_long_kernel_name_under_the_limit_prints_an_elided_table(corpus, tmp_path):
    path = _with_kernel_name(corpus, tmp_path / "long_kernel.json", "k" * 3_000_000)
    done = run_porter("show", str(path), "--by", "kernel", "--top", "50", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert MARKER in done.stdout and len(done.stdout) < 20 * DISPLAY_CHARS + 20_000
    assert "kkkk" in done.stdout and "2,99" in done.stdout  # the marker says how much was left out


# ---------------------------------------------------------------- 4. paths

def _as_nobody() -> list[str] | None:
    """A command prefix that drops root to nobody (chmod 000 binds then), or None."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import porter, typer"], cwd=REPO, capture_output=True)
    return prefix if probe.returncode == 0 else None


PATH_COMMANDS = {
    "ingest": lambda p, t: ["ingest", p, "-o", str(t / "out")],
    "show": lambda p, t: ["show", p],
    "diagnose --from": lambda p, t: ["diagnose", "--from", p, "--to", str(ORT), "-o", str(t / "d")],
    "diagnose --catalogue": lambda p, t: ["diagnose", "--from", str(ORT), "--to", str(ORT), "--catalogue", p,
                                          "-o", str(t / "d")],
    "report": lambda p, t: ["report", p],
    "bench import": lambda p, t: ["bench", "import", p, "--db", str(t / "h.sqlite")],
}


@pytest.mark.parametrize("what", ["file", "directory"])
def test_unreadable_paths_get_porters_one_line_for_every_command(request, what):
    """Was (as a user without root): typer's three-line usage block '... is not readable.'."""
    prefix = _as_nobody()
    if prefix is None:
        pytest.skip("running as root, where chmod 000 does not bind, and setpriv cannot drop to nobody here")
    tmp_path = Path(tempfile.mkdtemp(prefix="porter-unreadable-", dir="/tmp"))  # pytest's own is root's alone
    request.addfinalizer(lambda: shutil.rmtree(tmp_path, ignore_errors=True))
    tmp_path.chmod(0o777)
    path = tmp_path / ("secret.json" if what == "file" else "secret")
    if what == "file":
        path.write_bytes(ORT.read_bytes())
    else:
        path.mkdir()
        (path / "manifest.json").write_text("{}")
    path.chmod(0)
    env = dict(os.environ, COLUMNS="160", HOME=str(tmp_path))
    for name, args in PATH_COMMANDS.items():
        done = subprocess.run([*prefix, sys.executable, "-m", "porter", *args(str(path), tmp_path)], cwd=REPO,
                              capture_output=True, text=True, env=env, timeout=120)
        line = _one_line_error(done, str(path))
        if name != "report":  # report of a file: 'no diagnosis.json here', which is as true
            assert "denied" in line or "directory" in line or "Parquet" in line, (name, line)


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_paths_that_are_no_readable_file_get_one_line_for_every_command(tmp_path, kind):
    path = tmp_path / "input.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    for name, args in PATH_COMMANDS.items():
        if kind == "directory" and name == "bench import":
            continue  # a folder of Parquet files is a valid import (pyarrow reads it as one dataset)
        _one_line_error(run_porter(*args(str(path), tmp_path), timeout=60), str(path))


# ---------------------------------------------------------------- 5. staging

STAGE_AND_SIGNAL = """
import os, signal, sys
from pathlib import Path
from porter.bundles.bundle import staging
from porter.cli.process import staging_removed_on_signals
staging_removed_on_signals()
with staging(Path(sys.argv[1])) as tmp:
    (tmp / "ops.parquet").write_bytes(b"partial")
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))
    raise SystemExit("not reached: the signal ends the process")
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_signal_mid_write_removes_the_staged_folder(tmp_path, sig):
    """Was: SIGTERM's default action left `.porter-new-PID-...` with a partial file."""
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run([sys.executable, "-c", STAGE_AND_SIGNAL, str(out / "run"), sig], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == -getattr(signal, sig), done.stderr[-2000:]  # died of the signal, as it would have
    assert list(out.iterdir()) == []


def test_a_folder_left_by_kill_9_is_cleaned_by_the_next_command_run_there(tmp_path):
    """Was: left until the next write into that folder; now any porter command started in the
    directory (here a `show`, which writes nothing) removes it."""
    bundles = tmp_path / "bundles"  # ingest's default output folder
    bundles.mkdir()
    code = STAGE_AND_SIGNAL.replace("staging_removed_on_signals()\n", "")
    done = subprocess.run([sys.executable, "-c", code, str(bundles / "run"), "SIGKILL"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == -signal.SIGKILL
    (left,) = bundles.iterdir()
    assert left.name.startswith(".porter-new-") and (left / "ops.parquet").read_bytes() == b"partial"
    keep = bundles / "mine.txt"
    keep.write_text("not porter's")
    env = dict(os.environ, COLUMNS="160", PYTHONPATH=str(REPO))
    shown = subprocess.run([sys.executable, "-m", "porter", "show", str(ORT)], cwd=tmp_path, capture_output=True,
                           text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert [p.name for p in bundles.iterdir()] == ["mine.txt"]
