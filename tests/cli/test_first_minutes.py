"""A newcomer's first mistakes: each answered in one line, at once (no torch, jax or
onnxruntime imported first), with the word they meant, both sides' problems together."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, REPO
from timed_cli import ERROR_CPU_S, error_lines, porter_timed

NEWCOMER = [
    (("diagnose", "--from", "cpu", "--to", "xlaa"), ["target: unknown target 'xlaa'", "did you mean xla?"]),
    (("diagnose", "transfomer", "--from", "cpu", "--to", "xla"), ["unknown model 'transfomer'", "did you mean transformer?"]),
    (("diagnose", "nosuch.py:factory", "--from", "cpu", "--to", "xla"), ["nosuch.py: no such model file"]),
    (("diagnose", "tests/models/planted.py", "--from", "cpu", "--to", "xla"),
     ["needs the factory to call", "tests/models/planted.py:"]),
    (("diagnose", "--from", "cudaa", "--to", "tpuu"),
     ["source: unknown target 'cudaa' (did you mean cuda?", "target: unknown target 'tpuu' (did you mean tpu?"]),
    (("diagnose", "--from", str(FIXTURES / "cpu_mlp.json.gz"), "--to", "xla"), ["needs a MODEL"]),
    (("diagnose", "--from", "cpu", "--to", "missing.json.gz"), ["missing.json.gz: target: no such bundle or trace file"]),
    (("capture", "transfomer", "--on", "cpu:inductr"), ["did you mean inductor?", "did you mean transformer?"]),
    (("bench", "mlpp", "--on", "cpu"), ["unknown model 'mlpp'", "did you mean mlp?"]),
    (("ops", "mlp", "--on", "xlaa"), ["--on xlaa: unknown target", "did you mean xla?"]),
    (("report", str(FIXTURES), "--format", "htm"), ["unknown report format 'htm'", "did you mean html?"]),
]


@pytest.mark.parametrize(("args", "words"), NEWCOMER, ids=[" ".join(a[:3]) for a, _ in NEWCOMER])
def test_bad_arguments_answer_in_one_line_before_any_stack_loads(args, words):
    done, cpu, stacks = porter_timed(*args)
    lines = error_lines(done)
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("porter: error:"), lines
    for word in words:
        assert word in lines[0], lines[0]
    assert not stacks, f"a usage error imported {sorted(stacks)[:5]}"
    assert cpu < ERROR_CPU_S, f"{cpu:.2f} s of CPU for a usage error"


def test_a_model_file_without_factory_is_offered_its_factories():
    done, _, _ = porter_timed("capture", "tests/models/bad_models.py")
    (line,) = error_lines(done)
    assert "did you mean tests/models/bad_models.py:custom_op_model" in line  # a def with no arguments


def test_targets_stream_a_row_per_stack_as_each_is_probed():
    """The header at once, each stack's rows as its own process answers; the parent imports
    no stack (its CPU time stays far below one torch import)."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "porter", "targets"], stdout=subprocess.PIPE, text=True, cwd=REPO)
    seen = [(time.monotonic() - started, line.rstrip()) for line in proc.stdout]
    proc.wait(timeout=300)
    assert proc.returncode == 0
    header, first = seen[0], seen[1]
    assert header[1].startswith("target") and header[0] < 1.0
    assert first[1].startswith("cpu:eager") and " yes" in first[1]
    last_xla = max(t for t, line in seen if line.startswith("cpu:xla"))
    assert first[0] < last_xla, "rows arrive as each stack answers, not all at the end"
    targets = [line.split()[0] for _, line in seen[1:]]
    for name in ("cpu:eager", "cpu:inductor", "cuda:eager", "cpu:xla", "tpu:xla", "cpu:ort"):
        assert name in targets  # every registered stack's devices
    text = "\n".join(line for _, line in seen)
    assert "a Apple" not in text and "an Apple silicon" in text


def test_a_hanging_probe_costs_its_own_row():
    from porter.pipeline.probe import probe_stack

    (row,) = probe_stack("xla", timeout=0.05)
    assert not row.ok and "did not finish within 0.05 s" in row.reason


def test_a_crashing_probe_says_why():
    from porter.pipeline.probe import probe_stack

    (row,) = probe_stack("nosuch", timeout=60)
    assert not row.ok and "probing the nosuch stack failed: " in row.reason and "unknown stack" in row.reason


def test_probe_rows_are_json_lines_per_device():
    done = subprocess.run([sys.executable, "-m", "porter.targets.probe", "eager"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["target"] for r in rows] == ["cpu:eager", "cuda:eager", "rocm:eager", "mps:eager"]
    assert rows[0]["ok"] is True and rows[1]["ok"] is False and rows[1]["reason"]


def test_builtin_names_match_the_zoo():
    from porter.capture.modelref import BUILTIN_NAMES
    from porter.capture.models.zoo import BUILTINS

    assert tuple(BUILTINS) == BUILTIN_NAMES
