"""Where per-rank work runs: in this process, in a local process pool (the default), or on Ray.

Each task reads one rank and returns its summary (porter/analysis/ranksummary.py): kilobytes,
never a trace, so what travels between processes or nodes is small whatever the trace's size.
Every engine returns the results in the tasks' order, so the job's tables are the same on all.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Sequence, TypeVar

from porter.core.errors import PorterError

T = TypeVar("T")
R = TypeVar("R")
ENGINES = ("local", "serial", "ray")
OBJECT_STORE_BYTES = 256 * 1024**2  # a local Ray instance's object store: results are per-rank summaries


def run_tasks(fn: Callable[[T], R], tasks: Sequence[T], engine: str = "local", address: str | None = None,
              workers: int | None = None) -> list[R]:
    """fn over tasks on the engine, results in task order. fn must be a module-level function
    (it is pickled). A PorterError in a task is raised here as it was (one line)."""
    if engine not in ENGINES:
        raise PorterError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    n = min(workers or os.cpu_count() or 1, len(tasks))
    if engine == "ray":
        return _on_ray(fn, tasks, address, workers)
    if engine == "serial" or n <= 1:
        return [fn(t) for t in tasks]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("forkserver")  # workers fork from a clean server, not from this process
    ctx.set_forkserver_preload([fn.__module__])  # imported once in the server, shared by every worker
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
        return list(pool.map(fn, tasks))


def _on_ray(fn: Callable[[T], R], tasks: Sequence[T], address: str | None, workers: int | None) -> list[R]:
    try:
        import ray
    except ImportError:
        raise PorterError("--engine ray needs ray", hint="pip install 'porter[distributed]'") from None
    started = not ray.is_initialized()
    if started:
        # Ray's own start-up lines (token set-up, "Started a local Ray instance") stay out of
        # porter's output: errors only. Summaries are kilobytes, so a small object store does.
        quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
        if address:
            ray.init(address=address, **quiet)
        else:
            ray.init(num_cpus=workers or os.cpu_count(), include_dashboard=False,
                     object_store_memory=OBJECT_STORE_BYTES, **quiet)
    try:
        # A rank's PorterError comes back as a value, not a task failure: a failed task makes
        # Ray's core worker log "Failed to push error to driver" on stderr when the driver
        # shuts down first, so one bad rank read two lines, sometimes.
        remote = ray.remote(_porter_error_as_value)
        outcomes = ray.get([remote.remote(fn, t) for t in tasks])
    finally:
        if started:
            ray.shutdown()
    for outcome in outcomes:
        if isinstance(outcome, _Failed):
            raise outcome.error from None
    return outcomes


class _Failed:
    """A task's PorterError carried back as its result."""

    def __init__(self, error: PorterError):
        self.error = error


def _porter_error_as_value(fn: Callable[[T], R], task: T) -> R | _Failed:
    try:
        return fn(task)
    except PorterError as exc:
        return _Failed(exc)
