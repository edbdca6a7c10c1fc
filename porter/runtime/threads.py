"""One intra-op thread per stack, on both sides alike, by default.

Under oversubscription a multi-threaded timing measures the scheduler, not the stacks: each
op's threads wait at a barrier for a peer the scheduler has parked, so PyTorch's eager forward
slowed by two orders of magnitude while XLA:CPU's slowed by a few times, and the headline
swung between runs. With one intra-op thread on each side (torch.set_num_threads(1), XLA:CPU's
Eigen pool off and its own intra-op pool started on one CPU, see XLA_SINGLE) the same runs
agreed. A rule keyed on the load flips the headline's meaning between runs (eager PyTorch gains
from its second thread and XLA:CPU does not at small sizes), so one thread per side is the
default: the same question every run, answered the same way on a busy machine. Measurements:
BENCHMARKS.md, "Lab notes: thread policy".
PORTER_THREADS=1 (default) | all (the stacks' own thread pools, for a quiet machine whose
multi-threaded speed is the question) | auto (one thread only while the load exceeds the
CPU count) overrides.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from porter.core.stacks import STACKS

XLA_SINGLE = STACKS["xla"].one_thread_flags["XLA_FLAGS"]
# XLA:CPU runs its YNN dot fusions and partitioned loop fusions on an intra-op pool sized, when
# its client starts, from the CPUs the process may use; the Eigen flag above does not reach it.
# With the flag alone a dot still ran on two threads (BENCHMARKS.md, "Lab notes: thread policy").
DEFAULT = "1"  # one intra-op thread per side unless PORTER_THREADS says otherwise (see above)


@dataclass(frozen=True)
class ThreadPolicy:
    single: bool  # both stacks ran with one intra-op thread
    load_average: float | None  # 1-minute load average when the pair started
    cpus: int
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"single": self.single, "load_average": self.load_average, "cpus": self.cpus, "why": self.why}


def decide(load_average: float | None, cpus: int, setting: str = "auto") -> ThreadPolicy:
    """Single-threaded when asked (1, the default), never when asked (all); auto: when load > CPUs."""
    setting = (setting or DEFAULT).strip().lower()
    if setting == "1":
        return ThreadPolicy(True, load_average, cpus, "porter's default (PORTER_THREADS=all for the stacks' own "
                                                      "thread pools)")
    if setting == "all":
        return ThreadPolicy(False, load_average, cpus, "PORTER_THREADS=all")
    busy = load_average is not None and cpus > 0 and load_average > cpus
    why = (f"load average {load_average:.1f} on {cpus} CPUs at the start, so multi-threaded timing "
           "would measure the scheduler" if busy else "")
    return ThreadPolicy(busy, load_average, cpus, why)


def current(env: Mapping[str, str] = os.environ) -> ThreadPolicy:
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    return decide(load, os.cpu_count() or 0, env.get("PORTER_THREADS", DEFAULT))


_xla_started = False  # one_cpu_while_xla_starts ran once: XLA's client (and its pool) exists


def xla_single_requested(env: Mapping[str, str] = os.environ) -> bool:
    """The policy asked XLA:CPU for one intra-op thread (applied() put XLA_SINGLE in XLA_FLAGS)."""
    return XLA_SINGLE in env.get("XLA_FLAGS", "").split()


@contextlib.contextmanager
def one_cpu_while_xla_starts() -> Iterator[None]:
    """While XLA's CPU client starts inside the block, the process may use one CPU, so its
    intra-op pool gets one thread (see XLA_SINGLE); then every thread of the process, the
    pool's included, may use all CPUs again. Only when the policy asked for one thread and the
    OS lets a process set its CPUs (Linux); once per process (the client starts once)."""
    global _xla_started
    if _xla_started or not xla_single_requested() or not hasattr(os, "sched_setaffinity"):
        yield
        _xla_started = True
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        _xla_started = True
        for tid in os.listdir("/proc/self/task"):  # threads started inside inherited the one CPU
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(tid), before)


@contextlib.contextmanager
def applied(policy: ThreadPolicy) -> Iterator[ThreadPolicy]:
    """Both stacks single-threaded for the block when the policy says so; restored after.
    Torch's count also sets ONNX Runtime's intra-op threads (porter/targets/onnxruntime.py).

    XLA reads XLA_FLAGS when its CPU client starts, and sizes its pool then
    (one_cpu_while_xla_starts, which the XLA stack calls), so this must open before the
    first XLA capture of the process; a client already running keeps its threads.
    """
    if not policy.single:
        yield policy
        return
    import torch

    flags: dict[str, list[str]] = {}  # each stack's own one-thread flags (porter.core.stacks)
    for info in STACKS.values():
        for var, flag in info.one_thread_flags.items():
            flags.setdefault(var, []).append(flag)
    before_threads, before_env = torch.get_num_threads(), {var: os.environ.get(var) for var in flags}
    torch.set_num_threads(1)
    for var, added in flags.items():
        os.environ[var] = " ".join([before_env[var] or "", *dict.fromkeys(added)]).strip()
    try:
        yield policy
    finally:
        torch.set_num_threads(before_threads)
        for var, value in before_env.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
