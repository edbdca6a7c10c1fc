"""`porter targets` without a blank screen: every stack probed in its own process
(porter.targets.probe), a few at a time, with a timeout, and each stack's rows handed on as
soon as it and the stacks listed before it have answered. The parent imports no stack, so the
first row waits only for the quickest stack's import (eager: torch), not for all of them."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from porter.core.stacks import STACKS

PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ProbeRow:
    """One target's answer: whether it runs here, and if not why and what to do."""

    target: str
    ok: bool
    reason: str = ""
    remedy: str = ""


def _child_env() -> dict[str, str]:
    """The parent's environment, with the folder porter imports from first on the path (a
    checkout run as `python -m porter` from elsewhere finds the same porter in the child)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def _lower_priority() -> None:
    os.nice(10)


def probe_stack(name: str, timeout: float, first: bool = True) -> list[ProbeRow]:
    """The stack's rows from its own process; a hang or a crash is one row saying so.
    first=False: the process runs at a lower priority, so the first stack's probe (and the
    table's first rows) keep the CPUs the later ones would share."""
    later = {} if first or not hasattr(os, "nice") else {"preexec_fn": _lower_priority}
    try:
        done = subprocess.run([sys.executable, "-m", "porter.targets.probe", name], capture_output=True, text=True,
                              timeout=timeout, env=_child_env(), stdin=subprocess.DEVNULL, **later)
    except subprocess.TimeoutExpired:
        return [ProbeRow(name, False, f"probing the {name} stack did not finish within {timeout:g} s "
                                      "(its import or device query hangs)",
                         f"run `python -m porter.targets.probe {name}` to see where, or raise --timeout")]
    rows = []
    for line in done.stdout.splitlines():
        try:
            row = json.loads(line)
            rows.append(ProbeRow(str(row["target"]), bool(row["ok"]), str(row.get("reason") or ""),
                                 str(row.get("remedy") or "")))
        except (ValueError, KeyError, TypeError):
            continue
    if done.returncode != 0 or not rows:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        rows.append(ProbeRow(name, False, f"probing the {name} stack failed: {last[:300]}",
                             f"run `python -m porter.targets.probe {name}` to see the whole error"))
    return rows


def probe_targets(timeout: float = PROBE_TIMEOUT_S, jobs: int | None = None) -> Iterator[ProbeRow]:
    """Every registered stack's rows, in the registry's order, each stack's as soon as it and
    those before it have answered; jobs stacks probed at once (default: the CPU count, 2 at least)."""
    names = list(STACKS)
    jobs = max(1, jobs or max(2, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(jobs, len(names))) as pool:
        for future in [pool.submit(probe_stack, name, timeout, i == 0) for i, name in enumerate(names)]:
            yield from future.result()
