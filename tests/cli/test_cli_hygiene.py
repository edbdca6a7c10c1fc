"""What a new user sees around a run: help text, failing fast on an unavailable target, no
third-party log lines, and files as readable as the reports."""

from __future__ import annotations

import stat

import pytest
from _diagnoses import qwen_trace_diagnosis
from conftest import run_porter


def test_help_shows_no_bool_metavar_and_points_at_diagnose():
    top = run_porter("--help")
    assert top.returncode == 0
    assert "<bool>" not in top.stdout
    assert "porter diagnose" in top.stdout.split("Options")[0]  # the first thing the help suggests
    sub = run_porter("diagnose", "--help")
    assert sub.returncode == 0 and "--json" in sub.stdout and "--force" in sub.stdout
    assert "<bool>" not in sub.stdout
    assert "<path>" in sub.stdout  # options that take a value still show its type


@pytest.mark.parametrize(("args", "code", "words"), [
    (("transformer", "--from", "cpu", "--to", "tpu"), 3, "target tpu is not available here"),
    (("transformer", "--from", "cpu", "--to", "gpu"), 2, "target: unknown target 'gpu'"),
    (("--from", "cpu", "--to", "gpu"), 2, "target: unknown target 'gpu'"),
    (("--from", "gpu", "--to", "cpu"), 2, "source: unknown target 'gpu'"),
])
def test_unavailable_side_fails_before_any_capture_and_names_its_side(tmp_path, args, code, words):
    out = tmp_path / "d"
    proc = run_porter("diagnose", *args, "-o", str(out))
    assert proc.returncode == code, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("porter: ") or "error" in line]
    assert len(errors) == 1 and words in errors[0] and "Traceback" not in proc.stderr
    assert "capturing" not in proc.stderr and "first forward" not in proc.stderr  # nothing ran first
    assert not out.exists()  # not even the source bundle was written


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.corpus
def test_diagnosis_and_bundles_are_as_readable_as_the_reports(tmp_path_factory):
    d = qwen_trace_diagnosis(tmp_path_factory)
    assert _mode(d / "report.html") == 0o644
    assert _mode(d / "diagnosis.json") == 0o644
    for side in ("source", "target"):
        assert _mode(d / side) == 0o755
        assert _mode(d / side / "manifest.json") == 0o644


@pytest.mark.slow
def test_capture_keeps_kineto_lines_in_the_bundle_log(tmp_path):
    """Kineto prints USDT profiler_start/stop lines from C++; they belong in capture.log."""
    dest = tmp_path / "b"
    proc = run_porter("capture", "transformer", "--on", "cpu", "--steps", "1", "--warmup", "0", "--repeats", "2",
                      "--no-activations", "-o", str(dest))
    assert proc.returncode == 0, proc.stderr
    assert "USDT" not in proc.stderr and "USDT" not in proc.stdout
    assert "profiler_start" in (dest / "capture.log").read_text()


def test_only_the_run_command_is_built_and_help_is_whole(monkeypatch):
    """main() registers only the command a line runs (porter.cli.process.only_the_command_run), then
    puts the whole set back; `porter --help` and a misspelt command still see every one."""
    import gc

    from porter.cli import app as cli

    before = [c.callback.__name__ for c in cli.app.registered_commands]
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")  # main() sets it for trace commands: kept to this test
    seen: list[list[str]] = []
    monkeypatch.setattr(cli.app.__class__, "__call__",
                        lambda self, *a, **k: seen.append([c.callback.__name__ for c in self.registered_commands]))
    try:
        for argv in (["porter", "--debug", "show", "x"], ["porter", "--help"], ["porter", "shwo"]):
            monkeypatch.setattr("sys.argv", argv)
            cli.main()
    finally:
        gc.enable()  # main() holds the collector off until a command's callback turns it on
    monkeypatch.undo()
    assert seen[0] == ["show"] and seen[1] == before and seen[2] == before
    assert [c.callback.__name__ for c in cli.app.registered_commands] == before
    top = run_porter("--help")
    assert all(name in top.stdout for name in ("ingest", "show", "diagnose", "report", "bench"))
    misspelt = run_porter("ingst")
    assert misspelt.returncode == 2 and "Did you mean 'ingest'" in misspelt.stderr
