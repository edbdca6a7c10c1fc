"""The one measurement policy of `porter capture`, `porter diagnose` and `porter bench`.

Each command used to set its own: diagnose ran one intra-op thread per stack, capture and
bench the stacks' own pools, and on a busy 2-core machine bench timed the transformer's eager
forward at 163.6 ms against XLA's 5.2 ms (31x) while diagnose measured XLA at 0.73x of eager:
two threads each under oversubscription measure the scheduler (porter.runtime.threads). So all
three enter `measured()`, which applies the same four choices and returns them as one record
that every bundle manifest and bench run stores (`measurement`) and each command prints once:

- threads: porter.runtime.threads (one intra-op thread per stack unless PORTER_THREADS says);
- allocator: porter.runtime.allocator (freed memory kept, heap touched up front);
- clock: process CPU time when every side runs on the CPU with one thread (time the scheduler
  gave other processes is then not the model's), wall time otherwise (clock_for);
- warm-up: WARMUP untimed forwards per side before any timed one (the commands' --warmup default);
- timing window: an interval narrow enough may stop sampling only after MIN_TIMING_S, so that
  it spans the machine's slow drift (consecutive 10 s windows of one process moved 3-4%, each
  window's interval +-2%; BENCHMARKS.md, "Interval width"); a bench case that stopped at +-1%
  after half a second read the transformer's xla/eager 5% away from a diagnose minutes later.

The machine's load is read when measuring starts and when it ends: a 1-minute load average
above the CPU count means runnable threads waited for a core, so the record says
"oversubscribed" and the commands print it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping

from porter.runtime import allocator, threads

WARMUP = 2  # untimed forwards per side before the first timed one, in every command
MIN_TIMING_S = 10.0  # seconds of timing before a narrow interval may stop it (a budget still may)
CLOCKS = ("wall", "cpu")


@dataclass(frozen=True)
class Load:
    """The 1-minute load average against the CPUs this process may use."""

    average: float | None
    cpus: int

    @property
    def oversubscribed(self) -> bool:
        return self.average is not None and self.cpus > 0 and self.average > self.cpus

    def to_dict(self) -> dict[str, Any]:
        return {"load_average": self.average, "cpus": self.cpus, "oversubscribed": self.oversubscribed}


def machine_load() -> Load:
    try:
        average: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):
        average = None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)
    return Load(average, cpus)


@dataclass(frozen=True)
class MeasurementPolicy:
    threads: threads.ThreadPolicy
    heap: allocator.HeapPolicy
    warmup: int
    start: Load
    end: Load | None = None  # set by finished(), when the timing is over
    clock: str = ""  # "cpu" or "wall" once the sides' devices are known (with_devices); "" before

    def clock_for(self, on_cpu: bool) -> str:
        """CPU time for one-thread CPU sides (see the module doc), else wall time."""
        return "cpu" if on_cpu and self.threads.single else "wall"

    def with_devices(self, on_cpu: bool) -> "MeasurementPolicy":
        return replace(self, clock=self.clock_for(on_cpu))

    def finished(self) -> "MeasurementPolicy":
        return replace(self, end=machine_load())

    @property
    def oversubscribed(self) -> bool:
        return self.start.oversubscribed or (self.end is not None and self.end.oversubscribed)

    def oversubscription(self) -> str:
        """The sentence a command prints when the load exceeded the cores; '' when it did not."""
        if not self.oversubscribed:
            return ""
        loads = [f"{x.average:.1f}" for x in (self.start, self.end) if x is not None and x.average is not None]
        return (f"oversubscribed: load average {' -> '.join(loads)} on {self.start.cpus} CPUs, so runnable threads "
                "waited for a core during timing; numbers are less repeatable, rerun on a quiet machine to compare runs")

    def summary(self) -> str:
        """The policy in one line, as every command shows it once."""
        thread = "one intra-op thread per stack" if self.threads.single else "the stacks' own thread pools"
        heap = "freed memory kept in the process" if self.heap.kept else "the allocator's defaults"
        clock = {"cpu": "process CPU time", "wall": "wall time"}.get(self.clock, "CPU time on one-thread CPU sides, "
                                                                                "else wall time")
        return f"{thread}; {heap}; {clock}; {self.warmup} warm-up forwards per side; at least {MIN_TIMING_S:g} s of timing"

    def to_dict(self) -> dict[str, Any]:
        """The `measurement` record of a bundle manifest and a bench run."""
        return {"summary": self.summary(), "threads": self.threads.to_dict(), "heap": self.heap.to_dict(),
                "clock": self.clock or None, "warmup": self.warmup, "min_timing_s": MIN_TIMING_S, "start": self.start.to_dict(),
                "end": self.end.to_dict() if self.end is not None else None,
                "oversubscribed": self.oversubscribed, "oversubscription": self.oversubscription()}


def setting(threads_per_stack: int | None, env: Mapping[str, str] = os.environ) -> str:
    """The PORTER_THREADS setting for an explicit thread count: 1 -> "1", more -> "all" (the
    caller then sets the count), None -> the environment's (default "1")."""
    if threads_per_stack is None:
        return env.get("PORTER_THREADS", threads.DEFAULT)
    return "1" if threads_per_stack == 1 else "all"


@contextlib.contextmanager
def measured(warmup: int = WARMUP, thread_setting: str | None = None,
             env: Mapping[str, str] = os.environ) -> Iterator[MeasurementPolicy]:
    """Threads and allocator set for the block (threads restored after); the policy in force.
    Open it before the process's first XLA capture (threads.applied says why)."""
    start = machine_load()
    chosen = threads.decide(start.average, start.cpus, thread_setting or env.get("PORTER_THREADS", threads.DEFAULT))
    with threads.applied(chosen) as thread_policy:
        heap = allocator.keep_freed_memory()
        yield MeasurementPolicy(thread_policy, heap, warmup, start)


def observed(warmup: int) -> MeasurementPolicy:
    """What is in force in this process when no command opened measured() (the Python API):
    one thread only if torch has one and XLA was asked for one; the heap as the allocator left it."""
    import torch

    load = machine_load()
    single = torch.get_num_threads() == 1 and threads.xla_single_requested()
    why = "set by the caller (measured() was not opened)"
    heap = (allocator.HeapPolicy(True, "kept by an earlier measured() in this process", allocator.warmed_mb())
            if allocator.warmed_mb() else allocator.HeapPolicy(False, "the allocator's defaults (measured() was not opened)"))
    return MeasurementPolicy(threads.ThreadPolicy(single, load.average, load.cpus, why), heap, warmup, load)


__all__ = ["CLOCKS", "MIN_TIMING_S", "WARMUP", "Load", "MeasurementPolicy", "machine_load", "measured", "observed", "setting"]
