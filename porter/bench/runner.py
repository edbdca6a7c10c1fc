"""Run a suite: per case, every target warmed up, then timed in interleaved rounds.

Per case:
1. each target is prepared and run once (compiles); one that fails is recorded as a
   failed result with its one-line reason and the others go on;
2. `warmup` untimed steps each, then a calibration of how many steps make one sample
   last at least `min_sample_s` (short steps are averaged in groups; the largest count is
   every target's, and a group's steps alternate across the targets, _round);
3. rounds A B C, B C A, C A B ... (rotated, so slow drift and the cost of switching
   stacks land on every target alike) until every target's median has a 95% interval
   within +/- `target_ci` after at least `min_seconds` of rounds (the policy's timing window,
   as diagnose's), or `max_samples` rounds, or the case's time budget ends;
4. the noise admission check: a target whose median interval is wider than half the
   case's practical threshold (it could not resolve a threshold-sized change), or whose
   IQR/median exceeds stats.UNSTABLE_SPREAD, is marked unstable and never alerts.

The whole run is measured under porter.runtime.policy, as `porter capture` and `porter diagnose`
are: one intra-op thread per stack unless PORTER_THREADS or --threads says otherwise, freed memory
kept, the same warm-up, and each case timed on process CPU time when all its targets run on the
CPU with one thread (wall time otherwise); the policy is the run context's `measurement`.
Interleaving is written here rather than in porter/runtime/timing.py (which times one
target at a time for captures); a sample is its two-clock timed_call over `number` steps.
Nothing is written while a run is in progress: the caller stores the finished RunRecord
in one transaction, so an interrupted run leaves the store as it was.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

import torch

from porter.bench.context import device_class, environment, run_context
from porter.bench.records import FAILED, CaseResult, RunRecord, new_run_id, now_iso
from porter.bench.stats import admitted, ci_half_width
from porter.bench.steps import Step, prepare_step
from porter.bench.suite import Case, Suite
from porter.core.errors import PorterError
from porter.runtime.policy import MIN_TIMING_S, WARMUP, MeasurementPolicy, measured, setting
from porter.runtime.timing import timed_call
from porter.targets import resolve

@dataclass(frozen=True)
class RunnerOptions:
    warmup: int = WARMUP  # the measurement policy's (porter.runtime.policy), as capture and diagnose
    min_samples: int = 10
    max_samples: int = 200
    target_ci: float = 0.01  # stop once every median is known to +/- 1% (95%)
    budget_s: float = 30.0  # per case, all targets together, after compiling
    min_sample_s: float = 0.02  # group short steps: a sample spans scheduler time slices, not one
    min_seconds: float = MIN_TIMING_S  # before target_ci may stop a case (the policy's, as diagnose's timing)
    threads: int | None = None  # intra-op threads (None: the policy's, PORTER_THREADS; 1: one per stack; N: torch's N)


Progress = Callable[[str], None]


def _reason(exc: BaseException) -> str:
    text = exc.one_line() if isinstance(exc, PorterError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:500]


def _failed_identity(target: str) -> tuple[str, str]:
    """(target text, device class) of a target that failed to prepare, so its failure joins its series."""
    try:
        spec, stack = resolve(target)
    except Exception:
        return target, device_class(target.partition(":")[0], "")
    try:
        if not stack.availability(spec.device).ok:
            return spec.text, device_class(spec.device, "")
        device = stack.resolve_device(spec.device)
        return spec.text, device_class(device, str(stack.device_info(device).get("name", "")))
    except Exception:
        return spec.text, device_class(spec.device, "")


def _calibrate(step: Step, min_sample_s: float) -> int:
    """Steps per sample: the fastest of three single steps sets it (a preempted one would undercount)."""
    once = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        step.run()
        once = min(once, time.perf_counter() - t0)
    return max(1, math.ceil(min_sample_s / max(once, 1e-7)))


def _round(order: list[str], live: dict[str, Step], number: int, clock: str) -> dict[str, float | BaseException]:
    """One sample per target: the mean of `number` single steps, the targets' steps alternating
    (A B, B A, ...) as diagnose's forwards do. Grouped back to back instead, XLA:CPU read 7-13%
    faster against eager than when alternating (bert_small: x0.405-0.421 against x0.446-0.465
    in one process), so bench and diagnose measured different things; a failure ends that
    target's round."""
    pick = 1 if clock == "cpu" else 0
    sums = {t: 0.0 for t in order}
    failed: dict[str, BaseException] = {}
    for j in range(number):
        for target in (order if j % 2 == 0 else order[::-1]):
            if target in failed:
                continue
            try:
                sums[target] += timed_call(live[target].run)[pick]
            except Exception as exc:  # recorded as the target's failure
                failed[target] = exc
    return {t: failed.get(t, sums[t] / number) for t in order}


def run_case(case: Case, opts: RunnerOptions, progress: Progress = lambda m: None,
             policy: MeasurementPolicy | None = None) -> list[CaseResult]:
    """One case on all its targets (module doc); one CaseResult per target, failures included.
    policy: the run's measurement policy (its clock is taken for this case's devices); None: wall time."""
    results: dict[str, CaseResult] = {}
    live: dict[str, Step] = {}
    for target in case.stacks:
        progress(f"{case.name}: preparing on {target}")
        try:
            step = prepare_step(case, target)
            dev = step.stack.device_info(step.device)
            for _ in range(opts.warmup):
                step.run()
        except Exception as exc:  # recorded, and the case goes on with the other targets
            text, dev_class = _failed_identity(target)
            results[target] = CaseResult(case.name, text, dev_class, case.describe(), FAILED, _reason(exc))
            progress(f"{case.name}: {target} failed: {results[target].error}")
            continue
        results[target] = CaseResult(case.name, step.target, device_class(step.device, str(dev.get("name", ""))),
                                     case.describe(), info={**step.info, "device": dev})
        live[target] = step
    numbers: dict[str, int] = {}
    for t, step in list(live.items()):
        try:
            numbers[t] = results[t].number = _calibrate(step, opts.min_sample_s)
        except Exception as exc:
            results[t].status, results[t].error = FAILED, _reason(exc)
            del live[t]

    on_cpu = bool(live) and all(step.device == "cpu" for step in live.values())
    clock = policy.clock_for(on_cpu) if policy is not None else "wall"
    number = max(numbers.values(), default=1)  # one count for all: every forward alternates with the others'
    for t, r in results.items():
        r.info["clock"] = clock
        if t in live:
            r.number = number
    order = list(live)
    start = time.perf_counter()
    rounds = 0
    while order and rounds < opts.max_samples:
        rotated = order[rounds % len(order):] + order[: rounds % len(order)]
        for target, sample in _round(rotated, live, number, clock).items():
            if isinstance(sample, BaseException):
                results[target].status, results[target].error = FAILED, _reason(sample)
            else:
                results[target].samples_s.append(sample)
        order = [t for t in order if results[t].status != FAILED]
        rounds += 1
        if rounds >= opts.min_samples and (
            time.perf_counter() - start >= opts.budget_s
            or (time.perf_counter() - start >= opts.min_seconds
                and all(ci_half_width(results[t].samples_s) <= opts.target_ci for t in order))
        ):
            break
    for t in live:
        r = results[t]
        if r.status != FAILED:
            r.unstable = not admitted(r.samples_s, case.threshold)
            progress(f"{case.name} on {t}: median {r.median_s * 1e3:.3f} ms over {len(r.samples_s)} samples"
                     f"{' (unstable)' if r.unstable else ''}")
    return [results[t] for t in case.stacks]


def run_suite(suite: Suite, opts: RunnerOptions | None = None, progress: Progress = lambda m: None) -> RunRecord:
    """Every case of suite (in order) under the measurement policy, with the run's environment
    and context (its `measurement` record: the policy, the clock, the load before and after)."""
    opts = opts or RunnerOptions()
    if opts.min_samples < 3 or opts.max_samples < opts.min_samples or opts.warmup < 0 or opts.budget_s <= 0:
        raise PorterError("bench needs min samples >= 3, max samples >= min samples, warmup >= 0 and a positive budget")
    if opts.threads is not None and opts.threads < 1:
        raise PorterError(f"--threads must be 1 or more, not {opts.threads}")
    with measured(opts.warmup, setting(opts.threads)) as policy:
        if opts.threads is not None and opts.threads > 1:
            torch.set_num_threads(opts.threads)
            policy = replace(policy, threads=replace(policy.threads, why=f"--threads {opts.threads}: torch's "
                                                                         "intra-op threads, the other stacks' own pools"))
        started = now_iso()
        context = run_context([c.model for c in suite.cases], torch.get_num_threads())
        results: list[CaseResult] = []
        for case in suite.cases:
            results.extend(run_case(case, opts, progress, policy))
    context["load_average_after"] = run_context([], torch.get_num_threads())["load_average"]
    clocks = sorted({str(r.info.get("clock")) for r in results if r.status != FAILED})
    policy = replace(policy.finished(), clock=clocks[0] if len(clocks) == 1 else "")
    context["measurement"] = policy.to_dict()
    devices = {r.target: r.info.get("device", {}) for r in results if r.status != FAILED}
    return RunRecord(new_run_id(), suite.name, started, now_iso(), environment(devices), context, results)


__all__ = ["RunnerOptions", "run_case", "run_suite"]
