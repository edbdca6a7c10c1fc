"""Issue #15: no crash on damaged traces, no data lost on any output path, faults handled.

Each test here reproduces one failure seen before the fix (named in its docstring) and
checks porter's promise instead: a bundle, or one line on stderr naming the file, exit 2.
"""

from __future__ import annotations

import gzip
import json
import os
import time
import zlib
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, REPO, run_porter
from mutation import Pick, mutate, mutate_xspace, read_mutated
from porter.core.atomic import atomic_write_text, clean_stale, staged_path
from porter.bundles.bundle import MANIFEST, is_porter_bundle, load_bundle, staging
from porter.core.errors import BundleError, PorterError, TraceFormatError
from porter.bundles.ingest import bundle_name_for, ingest
from profilers.detect import read_trace
from profilers.xspace_proto import parse_xspace

ORT = FIXTURES / "ort_mlp.json"
CPU_MLP_FIXTURE = FIXTURES / "cpu_mlp.json.gz"


def _one_line_error(done, name: str) -> str:
    """The CLI failed as promised: exit 2, one stderr line naming `name`, no traceback."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("porter: error:") and name in lines[0], lines[0]
    return lines[0]


def _kineto_doc(corpus: Path) -> dict:
    return orjson.loads(gzip.decompress((corpus / "kineto" / "h100_gaunernst_bert-small-uncased.json.gz").read_bytes()))


# ---------------------------------------------------------------- readers: overflow and recursion

@pytest.mark.corpus
def test_correlation_outside_int64_is_a_missing_id(corpus, tmp_path):
    """Was: OverflowError in kineto_events.ints (a `correlation` of 1e30)."""
    doc = _kineto_doc(corpus)
    hit = [e for e in doc["traceEvents"] if isinstance(e.get("args"), dict) and "correlation" in e["args"]]
    for e in hit[:10]:
        e["args"]["correlation"] = 10**30
    hit[10]["args"]["stream"] = "99999999999999999999999"
    path = tmp_path / "big_ids.json"
    path.write_text(json.dumps(doc))
    kernels = read_trace(path).kernels
    assert len(kernels) > 0 and kernels["correlation"].between(-1, 2**63 - 1).all()


@pytest.mark.corpus
def test_step_number_outside_int64_is_not_a_step(corpus, tmp_path):
    """Was: OverflowError in kineto_scopes.separate_markers (`ProfilerStep#9999999999999999999999999`)."""
    doc = _kineto_doc(corpus)
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert steps
    steps[0]["name"] = "ProfilerStep#" + "9" * 25
    path = tmp_path / "big_step.json"
    path.write_text(json.dumps(doc))
    ops = read_trace(path).ops
    assert len(ops) > 0 and ops["step"].max() < 2**62
    assert not ops["name"].str.startswith("ProfilerStep#").any()


@pytest.mark.corpus
def test_xplane_stream_number_outside_int64_falls_back_to_the_line_id(corpus, tmp_path):
    """Was: OverflowError in schema._coerce (an XPlane line named `Stream #99999999999999999999999`)."""
    space = parse_xspace((corpus / "xplane" / "mi300x_jax_conv3d.xplane.pb").read_bytes())
    renamed = 0
    for plane in space.planes:
        for line in plane.lines:
            if line.display_name.startswith(b"Stream #") or line.name.startswith(b"Stream #"):
                line.display_name = line.name = b"Stream #" + b"9" * 23 + b"(Kernel)"
                renamed += 1
    assert renamed
    path = tmp_path / "big_stream.xplane.pb"
    path.write_bytes(space.SerializeToString())
    kernels = read_trace(path).kernels
    assert len(kernels) > 0 and kernels["stream"].max() < 2**63 - 1


def test_ort_shape_nested_absurdly_deep_is_no_shape(tmp_path):
    """Was: RecursionError in onnxruntime._shapes (deeply nested `input_type_shape`)."""
    doc = orjson.loads(ORT.read_bytes())
    node = next(e for e in doc if e.get("cat") == "Node" and "input_type_shape" in e.get("args", {}))
    node["args"]["input_type_shape"] = [{"float": "DEEP"}]
    path = tmp_path / "deep_shape.json"
    path.write_bytes(json.dumps(doc).replace('"DEEP"', "[" * 1000 + "]" * 1000).encode())
    (tmp_path / "deep_shape.json.nodes.json").write_bytes((REPO / "fixtures" / "ort_mlp.json.nodes.json").read_bytes())
    ops = read_trace(path, "onnxruntime").ops
    assert len(ops) > 0 and "[[[[" not in "".join(ops["input_shapes"])


def test_number_nested_absurdly_deep_is_one_line_error(tmp_path):
    """Was: RecursionError in jsonio.number (a deeply nested `ts`): the message printed the value."""
    doc = orjson.loads(ORT.read_bytes())
    doc[3]["ts"] = "DEEP"
    path = tmp_path / "deep_ts.json"
    path.write_bytes(json.dumps(doc).replace('"DEEP"', "[" * 1000 + "]" * 1000).encode())
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, "onnxruntime")
    assert str(path) in str(info.value) and "not a number" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["1e999", "-1e999", "NaN", "Infinity", str(10**400)])
def test_numbers_outside_float_range_are_one_line_errors(tmp_path, value):
    """Non-finite and out-of-range timestamps: an input error naming the field and file."""
    text = ORT.read_text()
    doc = orjson.loads(text)
    doc[3]["ts"] = "NUMBER"
    path = tmp_path / "odd_number.json"
    path.write_text(json.dumps(doc).replace('"NUMBER"', value))
    with pytest.raises(TraceFormatError) as info:
        read_trace(path, "onnxruntime")
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_kineto_nested_too_deep_for_the_parser_is_one_line_error(tmp_path):
    """Nesting is bounded by the parsers (orjson's fixed 1024 levels, msgspec's guard), never
    reaching porter's own code: 100,000 levels in a Kineto metadata field."""
    doc = orjson.loads(gzip.decompress(CPU_MLP_FIXTURE.read_bytes()))
    doc["deviceProperties"] = "DEEP"
    path = tmp_path / "deep_meta.json"
    path.write_bytes(json.dumps(doc).replace('"DEEP"', "[" * 100_000 + "]" * 100_000).encode())
    with pytest.raises(TraceFormatError, match="nested too deeply") as info:
        read_trace(path)
    assert str(path) in str(info.value)


# ---------------------------------------------------------------- output paths

@pytest.mark.parametrize("name", ["..json.gz", "...json.gz", ".json.gz", "a\nb.json.gz", "x\\y.json.gz", "\x1b[2J.json"])
def test_bundle_names_are_one_safe_directory_name(name):
    got = bundle_name_for(Path(name))
    assert got not in ("", ".", "..") and not got.startswith(".")
    assert "/" not in got and "\\" not in got and all(c.isprintable() for c in got)


@pytest.mark.parametrize("name", ["..json.gz", "...json.gz"])
def test_dot_named_trace_never_touches_the_output_directory(tmp_path, name):
    """Was: `..json.gz` (bundle `.`) deleted what -o DIR held and wrote the bundle as DIR;
    `...json.gz` (bundle `..`) tried to rename DIR's parent."""
    trace = tmp_path / name
    trace.write_bytes(CPU_MLP_FIXTURE.read_bytes())
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    (tmp_path / "sibling.txt").write_text("also mine")
    dest = ingest(trace, out)
    assert dest.parent == out and dest.name == "trace" and is_porter_bundle(dest)
    assert (out / "keep.txt").read_text() == "mine" and (tmp_path / "sibling.txt").read_text() == "also mine"
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "trace"]


def test_collisions_get_a_suffix_and_user_folders_are_never_replaced(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "run.json.gz").write_bytes(CPU_MLP_FIXTURE.read_bytes())
    out = tmp_path / "out"
    (out / "run").mkdir(parents=True)
    (out / "run" / "notes.txt").write_text("mine")  # a user's folder with the bundle's name
    taken: set[Path] = set()
    first = ingest(a / "run.json.gz", out, taken=taken)
    taken.add(first)
    second = ingest(b / "run.json.gz", out, taken=taken)
    assert (first.name, second.name) == ("run-2", "run-3")
    assert (out / "run" / "notes.txt").read_text() == "mine" and not is_porter_bundle(out / "run")
    again = ingest(a / "run.json.gz", out)  # a rerun replaces porter's own bundle in place
    assert again == first


def test_staging_refuses_to_replace_what_porter_did_not_write(tmp_path):
    dest = tmp_path / "source"
    dest.mkdir()
    (dest / MANIFEST).write_text("[]")  # looks like a bundle, is not porter's
    with pytest.raises(BundleError, match="not a porter bundle"):
        with staging(dest):
            pass
    assert (dest / MANIFEST).read_text() == "[]"


def _read_only_dir() -> Path:
    """A directory writes into fail even as root: sysfs is mounted read-only for files."""
    return Path("/sys/kernel")


@pytest.mark.parametrize("where", ["read-only", "under read-only", "file", "under file"])
def test_bad_output_directory_is_one_line(tmp_path, where):
    """Was: a traceback (exit 1) for -o in or under a read-only directory, on or under a file."""
    afile = tmp_path / "afile"
    afile.write_text("mine")
    out = {"read-only": _read_only_dir(), "under read-only": _read_only_dir() / "porter-out",
           "file": afile, "under file": afile / "sub"}[where]
    if where != "file" and where != "under file" and not _read_only_dir().is_dir():
        pytest.skip("no sysfs here")
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(CPU_MLP_FIXTURE.read_bytes())
    done = run_porter("ingest", str(trace), "-o", str(out))
    _one_line_error(done, str(out))
    assert afile.read_text() == "mine"


def test_read_only_output_directory_without_root(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories; test_bad_output_directory_is_one_line covers sysfs")
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(CPU_MLP_FIXTURE.read_bytes())
    _one_line_error(run_porter("ingest", str(trace), "-o", str(out)), str(out))


# ---------------------------------------------------------------- crash safety

def _dead_pid() -> int:
    pid = 2**22 - 7
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


def test_stale_staging_of_a_killed_run_is_cleaned_on_the_next_write(tmp_path):
    """Was: kill -9 during ingest left `.NAME.xxxx.tmp` folders that nothing cleaned."""
    out = tmp_path / "out"
    out.mkdir()
    dead = _dead_pid()
    stale_dir = out / f".porter-new-{dead}-0123abcd-run"
    (stale_dir / "raw").mkdir(parents=True)
    (stale_dir / "ops.parquet").write_bytes(b"half")
    stale_file = out / f".porter-new-{dead}-89abcdef-diagnosis.json"
    stale_file.write_text("{")
    live = out / f".porter-new-{os.getppid()}-00000000-other"  # a running process's: kept
    live.mkdir()
    users = [out / ".run.abcd1234.tmp", out / ".porter-notes"]  # not porter's pattern: kept
    users[0].mkdir()
    users[1].write_text("mine")
    old = time.time() - 3600
    for p in (stale_dir, stale_file, live):
        os.utime(p, (old, old))
    trace = tmp_path / "run.json.gz"
    trace.write_bytes(CPU_MLP_FIXTURE.read_bytes())
    ingest(trace, out)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([live.name, users[0].name, users[1].name, "run"])


def test_old_bundle_moved_aside_by_a_killed_swap_is_put_back(tmp_path):
    """The fallback swap (two renames) killed between them: the next run restores the old bundle."""
    trace = tmp_path / "run.json.gz"
    trace.write_bytes(CPU_MLP_FIXTURE.read_bytes())
    out = tmp_path / "out"
    dest = ingest(trace, out)
    aside = out / f".porter-old-{_dead_pid()}-0123abcd-run"
    os.rename(dest, aside)
    old = time.time() - 3600
    os.utime(aside, (old, old))
    assert clean_stale(out) == [aside]
    assert is_porter_bundle(dest) and not aside.exists()


def test_output_over_an_existing_bundle_keeps_the_old_one_until_the_new_is_complete(tmp_path):
    trace = tmp_path / "run.json.gz"
    trace.write_bytes(CPU_MLP_FIXTURE.read_bytes())
    dest = ingest(trace, tmp_path / "out")
    before = (dest / MANIFEST).read_text()
    with pytest.raises(RuntimeError):
        with staging(dest) as tmp:
            (tmp / "ops.parquet").write_bytes(b"half")
            assert (dest / MANIFEST).read_text() == before  # old one whole while the new is written
            raise RuntimeError("killed mid-write")
    assert (dest / MANIFEST).read_text() == before and load_bundle(dest)
    assert [p.name for p in dest.parent.iterdir()] == ["run"]


def test_atomic_write_leaves_only_the_file(tmp_path):
    atomic_write_text(tmp_path / "a.json", "{}")
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    assert staged_path(tmp_path / "a.json").name.startswith(".porter-new-")


# ---------------------------------------------------------------- resource limits

def test_fifo_is_refused_before_it_is_opened(tmp_path):
    """Was: a named pipe given as the trace blocked `ingest` and `show` forever."""
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for args in (["show", str(fifo)], ["ingest", str(fifo), "-o", str(tmp_path / "out")]):
        line = _one_line_error(run_porter(*args, timeout=120), str(fifo))
        assert "named pipe" in line


def _bomb(path: Path, head: bytes, body: bytes, repeats: int) -> Path:
    """A valid gzip file: head, then body `repeats` times (compressed as it is written)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with open(path, "wb") as fh:
        fh.write(comp.compress(head))
        for _ in range(repeats):
            fh.write(comp.compress(body))
        fh.write(comp.flush())
    return path


@pytest.mark.parametrize("body", [b" " * (1 << 20), b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1},' * 20_000])
def test_gzip_bomb_is_a_clear_too_large_error(tmp_path, body):
    """Was: a valid header then GBs of whitespace (or of one repeated event) ran 26 s into
    a traceback. Here 256 MB of either: stopped at the cap, named with the flag that raises it."""
    path = _bomb(tmp_path / "bomb.json.gz", b'{"traceEvents": [', body, (256 << 20) // len(body))
    t0 = time.perf_counter()
    done = run_porter("show", str(path))
    line = _one_line_error(done, str(path))
    assert "--max-inflate" in line and "more than" in line
    assert max(path.stat().st_size * 100, 64 << 20) < (256 << 20)  # the cap (100x, 64 MB floor) stopped it
    assert time.perf_counter() - t0 < 120


# ---------------------------------------------------------------- messages

@pytest.mark.parametrize("name", ["[/b]x.json", "[red]hidden[/red].json", "two\nlines.json", "bell\x07.json"])
def test_user_text_in_errors_is_escaped_on_one_line(tmp_path, name):
    """Was: `[/b]` crashed the error printer, `[red]` vanished from the message, a newline gave two lines."""
    path = tmp_path / name  # the `/` in `[/b]` makes a folder `[` on the way: markup across the path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not a trace")
    done = run_porter("show", str(path))
    shown = str(path).replace("\n", "\\n").replace("\x07", "\\x07")
    _one_line_error(done, shown)


def test_unreadable_file_is_one_line(tmp_path):
    """Was: a chmod 000 trace gave 5 lines."""
    path = tmp_path / "secret.json.gz"
    path.write_bytes(CPU_MLP_FIXTURE.read_bytes())
    path.chmod(0)
    if os.access(path, os.R_OK):  # root reads anything: use a file the kernel refuses to read
        found = [p for p in (Path("/sys/bus/pci/rescan"), *Path("/sys/bus").glob("*/drivers_probe")) if p.exists()]
        if not found:
            pytest.skip("running as root and no unreadable sysfs file")
        path = found[0]
    for args in (["show", str(path)], ["ingest", str(path), "-o", str(tmp_path / "out")]):
        _one_line_error(run_porter(*args), str(path))


def test_show_on_a_bundle_whose_manifest_is_a_list_is_one_line(tmp_path):
    """Was: AttributeError from `show` on a bundle whose manifest.json is a list."""
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / MANIFEST).write_text("[1, 2]")
    with pytest.raises(PorterError, match="not an object"):
        load_bundle(bundle)
    _one_line_error(run_porter("show", str(bundle)), str(bundle))


# ---------------------------------------------------------------- kill -9 at random moments

def _whole_outputs(out: Path) -> list[str]:
    """Every entry of `out` is a whole output or porter's own staged entry; returns the
    staged names (the partial output a next run must clean)."""
    staged = []
    for entry in out.iterdir():
        if entry.name.startswith(".porter-"):
            staged.append(entry.name)
        elif entry.suffix == ".json":
            json.loads(entry.read_text())
        elif entry.suffix == ".html":
            assert entry.read_text().rstrip().endswith("</html>"), entry
        elif entry.suffix == ".md":
            assert entry.read_text().strip(), entry
        else:
            load_bundle(entry)
    return staged


def _staging_appears(out: Path, proc, limit: float) -> float:
    """Seconds until a hidden (staged) entry appears in `out`, polling; `limit` if none does."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit and proc.poll() is None:
        if out.is_dir() and any(p.name.startswith(".") for p in out.iterdir()):
            break
        time.sleep(0.002)
    return time.perf_counter() - t0


def _kill_at_random_moments(args: list[str], out: Path, runs: int = 20, seed: int = 15) -> None:
    """Run the CLI once whole, then `runs` times killed (SIGKILL): half at uniform random
    moments of its whole run, half at uniform random moments of its write phase (from
    the first staged entry on: the few hundred ms where a kill can leave partial output).
    After each kill every output is whole or porter's staged entry; a last run must
    leave no staged entry behind."""
    import random
    import signal
    import subprocess
    import sys

    env = dict(os.environ, COLUMNS="160")
    cmd = [sys.executable, "-m", "porter", *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    to_write = _staging_appears(out, proc, 600)
    assert proc.wait(timeout=600) == 0
    full = time.perf_counter() - t0
    write_phase = max(full - to_write, 0.05)
    rng = random.Random(seed)
    for run in range(runs):
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if run % 2:
            _staging_appears(out, proc, full)
            moment = rng.uniform(0.0, write_phase)
        else:
            moment = rng.uniform(0.0, full)
        try:
            proc.wait(timeout=moment)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        _whole_outputs(out)
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, timeout=600)
    assert _whole_outputs(out) == [], "the next run must clean what killed runs staged"


@pytest.mark.slow
@pytest.mark.corpus
def test_kill_during_ingest_leaves_old_or_new_bundle_and_nothing_after_the_next_run(corpus, tmp_path):
    out = tmp_path / "out"
    trace = corpus / "kineto" / "h100_Qwen_Qwen1.5-0.5B-Chat.json.gz"
    _kill_at_random_moments(["ingest", str(trace), "-o", str(out)], out)
    assert sorted(p.name for p in out.iterdir()) == ["h100_Qwen_Qwen1.5-0.5B-Chat"]


@pytest.mark.slow
@pytest.mark.corpus
def test_kill_during_diagnose_leaves_whole_outputs_and_nothing_after_the_next_run(corpus, tmp_path):
    out = tmp_path / "diag"
    k = corpus / "kineto"
    _kill_at_random_moments(["diagnose", "--from", str(k / "h100_gaunernst_bert-small-uncased.json.gz"),
                             "--to", str(k / "mi300x_gaunernst_bert-small-uncased.json.gz"), "-o", str(out)], out)
    assert {"diagnosis.json", "source", "target", "report.html"} <= {p.name for p in out.iterdir()}


def test_diagnose_with_a_file_as_output_fails_before_reading(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    done = run_porter("diagnose", "--from", str(CPU_MLP_FIXTURE), "--to", str(CPU_MLP_FIXTURE), "-o", str(afile))
    assert "aligning" not in done.stderr
    _one_line_error(done, str(afile))
    assert afile.read_text() == "mine"


def test_unknown_format_names_the_file(tmp_path):
    with pytest.raises(TraceFormatError) as info:
        read_trace(CPU_MLP_FIXTURE, "bogus")
    assert str(CPU_MLP_FIXTURE) in str(info.value)


def test_negative_durations_are_floored_with_a_counted_warning(tmp_path):
    """Kineto events with a negative `dur` keep the trace readable: counted as 0 us, and
    the count is in the manifest and printed as one warning line by ingest."""
    doc = orjson.loads(gzip.decompress(CPU_MLP_FIXTURE.read_bytes()))
    timed = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and "dur" in e]
    for e in timed[:3]:
        e["dur"] = -5
    path = tmp_path / "negative.json"
    path.write_text(json.dumps(doc))
    result = read_trace(path)
    assert result.meta.extra["warnings"] == ["3 events with a negative duration were counted as 0 us"]
    assert (result.ops["host_us"] >= 0).all()
    done = run_porter("ingest", str(path), "-o", str(tmp_path / "out"))
    assert done.returncode == 0
    assert done.stderr.strip().splitlines() == [f"porter: warning: {path}: 3 events with a negative duration were counted as 0 us"]


def test_big_gzipped_reads_report_progress_to_the_end(tmp_path):
    """The hook behind the CLI's bar: called while decompressing, up to the whole file."""
    from profilers import progress

    seen: list[tuple[int, int]] = []
    progress.set_reporter(lambda p, done, total: seen.append((done, total)))
    try:
        assert len(read_trace(CPU_MLP_FIXTURE).ops) and seen == []  # under MIN_BYTES: no reports
        big = tmp_path / "random.json.gz"  # random hex barely compresses: > MIN_BYTES of gzip
        big.write_bytes(gzip.compress(b'{"traceEvents": [], "x": "' + os.urandom(20 << 20).hex().encode() + b'"}', 1))
        with pytest.raises(TraceFormatError):
            read_trace(big, "kineto")
    finally:
        progress.set_reporter(None)
    dones = [d for d, _ in seen]
    assert len(dones) > 10 and dones == sorted(dones) and dones[-1] == seen[-1][1] == big.stat().st_size


@pytest.mark.parametrize("damage", ["device is a list", "ops lack a column", "ops column of strings"])
def test_damaged_bundle_is_one_line_bundle_error(tmp_path, damage):
    """A bundle edited or damaged after it was written: BundleError, not an AttributeError
    or the schema's SchemaViolation (which is for porter's own bugs)."""
    import pandas as pd

    trace = tmp_path / "run.json.gz"
    trace.write_bytes(CPU_MLP_FIXTURE.read_bytes())
    dest = ingest(trace, tmp_path / "out")
    if damage == "device is a list":
        manifest = json.loads((dest / MANIFEST).read_text())
        manifest["device"] = []
        (dest / MANIFEST).write_text(json.dumps(manifest))
    else:
        ops = pd.read_parquet(dest / "ops.parquet")
        ops = ops.drop(columns=["op_id"]) if damage == "ops lack a column" else ops.assign(start_us="x")
        ops.to_parquet(dest / "ops.parquet")
    with pytest.raises(BundleError, match="damaged"):
        load_bundle(dest)
    _one_line_error(run_porter("show", str(dest)), str(dest))


def test_replacing_a_bundle_without_an_atomic_swap_still_leaves_one_whole_bundle(tmp_path, monkeypatch):
    """Where renameat2 cannot swap (not Linux, some network file systems) the old bundle is
    renamed aside first; the result is the same single new bundle and nothing else."""
    import porter.bundles.bundle

    trace = tmp_path / "run.json.gz"
    trace.write_bytes(CPU_MLP_FIXTURE.read_bytes())
    dest = ingest(trace, tmp_path / "out")
    first = json.loads((dest / MANIFEST).read_text())["created_at"]
    monkeypatch.setattr(porter.bundles.bundle, "exchange", lambda a, b: False)
    time.sleep(1.1)  # created_at has one-second resolution
    assert ingest(trace, tmp_path / "out") == dest
    assert json.loads((dest / MANIFEST).read_text())["created_at"] != first
    assert [p.name for p in dest.parent.iterdir()] == ["run"]


def test_exchange_swaps_two_directories_in_one_step(tmp_path):
    from porter.core.atomic import exchange

    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "who").write_text(d.name)
    if not exchange(a, b):
        pytest.skip("this file system cannot swap (the two-rename fallback is tested above)")
    assert (a / "who").read_text() == "b" and (b / "who").read_text() == "a"


@pytest.mark.slow
def test_live_diagnose_never_removes_a_users_folder_and_leaves_no_scratch(tmp_path):
    """Was: a live side was captured into OUT/.capture-source, removed on the way out even
    when it was a user's folder (the capture refused it, the cleanup deleted it)."""
    out = tmp_path / "diag"
    (out / ".capture-source").mkdir(parents=True)
    (out / ".capture-source" / "notes.txt").write_text("mine")
    done = run_porter("diagnose", "mlp", "--from", "cpu", "--to", "cpu", "-o", str(out), "--no-report",
                      "--steps", "1", "--repeats", "2", "--warmup", "1")
    assert done.returncode == 0, done.stderr
    assert (out / ".capture-source" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == [".capture-source", "diagnosis.json", "source", "target"]


# ---------------------------------------------------------------- hypothesis: the shared mutations

@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_kineto_reads_or_fails_in_one_line(data):
    read_mutated(mutate(gzip.decompress(CPU_MLP_FIXTURE.read_bytes()), data.draw), "kineto", ".json")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_xspace_reads_or_fails_in_one_line(data):
    raw = (FIXTURES / "xla_cpu_mlp.xplane.pb").read_bytes()
    read_mutated(mutate_xspace(raw, Pick(draw=data.draw)), "xplane", ".xplane.pb")


def test_a_name_too_long_to_stage_whole_is_never_restored_under_a_cut_name(tmp_path):
    assert staged_path(tmp_path / ("b" * 250), "old").name.startswith(".porter-new-")
    assert staged_path(tmp_path / "bundle", "old").name.startswith(".porter-old-")
    assert len(staged_path(tmp_path / ("b" * 250)).name.encode()) <= 255
