"""The CLI run in a fresh interpreter and timed by CPU, not wall, time: a loaded 2-core CI
machine stretches wall time, but importing torch still costs its seconds of CPU."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

from conftest import REPO

STACK_MODULES = ("torch", "jax", "onnxruntime")
# CPU seconds a usage error may cost: importing torch alone takes ~1.2 s of CPU here, jax ~1 s
ERROR_CPU_S = 0.8


def porter_timed(*args: str) -> tuple[subprocess.CompletedProcess, float, set[str]]:
    """The CLI in a fresh interpreter: its result, the CPU seconds it used, and which model
    stacks it imported (from -X importtime, which names every module loaded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "porter", *args], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, COLUMNS="200"), timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    stacks = {m for m in imported if m.split(".")[0] in STACK_MODULES}
    return done, cpu, stacks


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
