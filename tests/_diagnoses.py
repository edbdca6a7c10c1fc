"""Real diagnoses for the report tests, made once per session by the real CLI."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import corpus_dir, run_porter

QWEN_SRC = "kineto/h100_Qwen_Qwen1.5-0.5B-Chat.json.gz"
QWEN_TGT = "kineto/mi300x_Qwen_Qwen1.5-0.5B-Chat.json.gz"


def diagnose(out: Path, *args: str) -> Path:
    """Run `porter diagnose ARGS -o out`; skip with the reason when it cannot run here."""
    proc = run_porter("diagnose", *args, "-o", str(out))
    if proc.returncode == 3:
        pytest.skip(f"target unavailable here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert (out / "diagnosis.json").is_file()
    stderr_of(out).write_text(proc.stderr)
    return out


def stderr_of(out: Path) -> Path:
    """Where diagnose() keeps what the run printed on stderr (beside the diagnosis)."""
    return out.parent / f"{out.name}.stderr"


def qwen_trace_diagnosis(tmp_path_factory) -> Path:
    """The Qwen1.5-0.5B H100 -> MI300X trace-mode diagnosis, made once per test session."""
    corpus = corpus_dir()
    if not (corpus / QWEN_SRC).is_file():
        pytest.skip(f"trace corpus not found at {corpus}")
    out = tmp_path_factory.getbasetemp() / "qwen-trace-diagnosis"
    if (out / "report.html").is_file():
        return out
    return diagnose(out, "--from", str(corpus / QWEN_SRC), "--to", str(corpus / QWEN_TGT))


def real_kernel_names(min_count: int = 2) -> list[str]:
    """Kernel names from the H100 Qwen trace that hold '<', '>' and '&' (read with plain json)."""
    path = corpus_dir() / QWEN_SRC
    if not path.is_file():
        pytest.skip(f"trace corpus not found at {corpus_dir()}")
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    names = sorted({e["name"] for e in events if e.get("cat") == "kernel" and all(c in e["name"] for c in "<>&")}, key=len)
    assert len(names) >= min_count
    return names


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    why = "chromium is not installed (scripts/test.sh installs the Debian package `chromium` when run as root)"
    if os.environ.get("PORTER_REQUIRE_BROWSER"):  # the README's command: a missing browser is a failure
        pytest.fail(why + "; install it: apt-get install chromium")
    pytest.skip(why)


def live_transformer_diagnosis(tmp_path_factory) -> Path:
    """`porter diagnose transformer --from cpu --to xla`: a live run with per-module accuracy."""
    out = tmp_path_factory.getbasetemp() / "transformer-live-diagnosis"
    if (out / "report.html").is_file():
        return out
    return diagnose(out, "transformer", "--from", "cpu", "--to", "xla")
