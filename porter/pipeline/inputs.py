"""From what the user typed after --from/--to to a bundle, decided once.

A side is a bundle directory, a recorded trace file, or a target to capture now
(``cpu``, ``xla``, ``cpu:inductor``...). ``resolve_pair`` decides which for both sides,
checks that every target to capture is available here before capturing either (a
missing GPU fails in a second, not after the source's capture), captures live sides into
porter-named scratch folders (porter.core.atomic) and removes those on the way out, success or failure. diagnose()
then only ever sees two bundles.

Trace and bundle inputs never import torch, and neither does telling a typo from a target:
porter.pipeline.preflight checks both sides and the model by their words first.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing as mp
import os
import shutil
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterator

from porter.core.atomic import staged_path
from porter.bundles.bundle import Bundle, is_bundle
from porter.core.errors import PorterError
from porter.bundles.ingest import open_any

Progress = Callable[[str], None]
SIDES = ("source", "target")
# Compressed size from which each of two traces is read in its own process: a ~2 MB .json.gz
# (~40k events) takes ~0.5 s to read, ten times a fork plus shipping its tables back.
PARALLEL_MIN_BYTES = 2 * 2**20


class InputKind(str, Enum):
    BUNDLE = "bundle"
    TRACE = "trace"
    TARGET = "target"


@dataclass(frozen=True)
class InputSpec:
    """One side as typed, and what it turned out to be."""

    text: str
    kind: InputKind
    role: str

    @property
    def path(self) -> Path:
        return Path(self.text)


@dataclass
class ResolvedPair:
    """Both sides as bundles, plus the model that was run (None when both were recorded)."""

    source: Bundle
    target: Bundle
    model: Any = None  # porter.capture.models.ModelSpec on the live path
    paired_timing: Any = None  # porter.capture.interleaved.PairedTiming when both sides ran here
    live: bool = False  # both sides were captured by this run (their stacks are here)
    target_model: Any = None  # a ModelSpec: the rewrite the target ran (--target-model), when given


def classify(text: str | Path, role: str) -> InputSpec:
    """Bundle directory, trace file or target name; anything else is a one-line error."""
    text = str(text)
    path = Path(text)
    if path.exists():
        return InputSpec(text, InputKind.BUNDLE if is_bundle(path) else InputKind.TRACE, role)
    from porter.core.targetspec import parse_target

    try:
        parse_target(text)
    except PorterError:
        raise PorterError(f"{role}: no such bundle or trace file, and not a target", path=path,
                          hint="pass a bundle directory or a trace file, or a target such as cpu, xla or "
                               "cpu:inductor (see `porter targets`)") from None
    return InputSpec(text, InputKind.TARGET, role)


def check_available(specs: list[InputSpec]) -> None:
    """Every target to capture runs here, checked before anything is captured; when neither
    does, both are said in one line."""
    from porter.core.errors import TargetUnavailable
    from porter.targets import resolve

    missing = []
    for spec in specs:
        if spec.kind is InputKind.TARGET:
            target, stack = resolve(spec.text)
            a = stack.availability(target.device)
            if not a.ok:
                missing.append(f"{spec.role} {spec.text} is not available here: {a.reason}"
                               + (f" ({a.remedy})" if a.remedy else ""))
    if missing:
        raise TargetUnavailable("; ".join(missing))


def scratch_dir(workdir: Path, role: str) -> Path:
    """A fresh folder name of porter's own (porter.core.atomic's staged pattern) for one live
    capture: removing it afterwards can never remove a user's folder, and one a killed
    run left is cleaned by the next write into workdir."""
    return staged_path(Path(workdir) / f"capture-{role}")


@contextlib.contextmanager
def resolve_pair(source: str | Path, target: str | Path, workdir: str | Path, *, model: str | None = None,
                 target_model: str | None = None, options: Any = None, interleave: Any = None, target_dtype: str = "", target_autocast: str = "",
                 progress: Progress = lambda msg: None) -> Iterator[ResolvedPair]:
    """Open or capture both sides. With no model and both sides naming targets, the default
    built-in model runs. options: porter.capture.options.CaptureOptions for live sides.
    When both sides ran here, their prepared forwards are then timed against each other
    (porter.capture.interleaved; interleave: its InterleaveOptions) for the headline.
    target_dtype / target_autocast: a precision port (porter.capture.precision): only the target
    side runs cast (or under torch.autocast).
    Scratch capture folders under workdir are removed when the block ends, however it ends.
    """
    from porter.pipeline.preflight import check_inputs

    check_inputs(source, target, model)  # every typo of both sides and the model, before any import
    specs = [classify(source, "source"), classify(target, "target")]
    live = [s for s in specs if s.kind is InputKind.TARGET]
    with contextlib.ExitStack() as stack:
        policy = None
        if len(live) == 2:  # both captured here: one measurement policy for both (porter.runtime.policy)
            from porter.runtime.policy import WARMUP, measured

            policy = stack.enter_context(measured(options.warmup if options is not None else WARMUP))
        rewrite = _rewrite_spec(target_model, model, target_dtype or target_autocast) if target_model else None
        yield from _resolve(specs, live, workdir, model, options, interleave, progress, policy,
                            target_dtype, target_autocast, rewrite)


def _resolve(specs: list[InputSpec], live: list[InputSpec], workdir: str | Path, model: str | None, options: Any,
             interleave: Any, progress: Progress, policy: Any, target_dtype: str = "",
             target_autocast: str = "", rewrite: Any = None) -> Iterator[ResolvedPair]:
    """rewrite: the target's model when it is a rewrite of model (--target-model), else None."""
    model_spec = None
    if target_dtype or target_autocast:
        options = check_target_precision(specs[1], target_dtype, target_autocast, options)
    if live:
        from porter.capture.models import DEFAULT_MODEL, load_model

        check_available(live)
        model_spec = load_model(model or DEFAULT_MODEL)
    elif model is not None:
        from porter.capture.models import load_model

        model_spec = load_model(model)  # recorded sides, a model for accuracy or a check
    if rewrite is not None and model_spec is not None and model_spec.program is not None:
        raise PorterError(f"--target-model is the JAX rewrite of a PyTorch MODEL, and {model_spec.name} is a JAX program",
                          hint="give the PyTorch model as MODEL and its JAX rewrite as --target-model")
    scratch = {s.role: scratch_dir(Path(workdir), s.role) for s in live}
    try:
        runs: dict[str, Any] = {}
        if not live and parallel_read_pays(specs):
            bundles = open_in_parallel([s.path for s in specs])
        else:
            bundles = [open_side(s, rewrite if rewrite is not None and s.role == "target" else model_spec, scratch.get(s.role),
                                 side_options(options, s.role, target_dtype, target_autocast), progress, runs, policy)
                       for s in specs]
        yield ResolvedPair(bundles[0], bundles[1], model_spec, time_live_pair(runs, interleave, progress, policy),
                           live=len(live) == 2, target_model=rewrite)
    finally:
        for path in scratch.values():
            shutil.rmtree(path, ignore_errors=True)


def _rewrite_spec(target_model: str, model: str | None, precision: str) -> Any:
    """The rewrite's ModelSpec (--target-model), checked before anything is captured."""
    from porter.capture.models import load_model

    if model is None:
        raise PorterError("--target-model names the rewrite of MODEL, and no MODEL is given",
                          hint="porter diagnose TORCH_MODEL --from cpu --to xla --target-model JAX_MODEL")
    if precision:
        raise PorterError("--target-model with --dtype/--autocast: a rewrite is compared in the dtype it was written in",
                          hint="cast the rewrite in its factory, or drop --dtype/--autocast")
    spec = load_model(target_model)
    if spec.program is None:
        raise PorterError(f"--target-model {target_model} is a PyTorch model: it names a rewrite in JAX (Flax NNX or Equinox)",
                          hint="a PyTorch model on another stack is MODEL itself: porter diagnose MODEL --from A --to B")
    return spec


def check_target_precision(spec: InputSpec, dtype: str, autocast: str, options: Any) -> Any:
    """--dtype / --autocast name what the target's stack runs, and the target is captured now;
    else a one-line error before anything is captured. The options without them (the source's)."""
    import dataclasses

    from porter.capture import precision as p
    from porter.capture.options import CaptureOptions

    flag = "--dtype" if dtype else "--autocast"
    if dtype and autocast:
        raise PorterError("--dtype and --autocast are two ways to lower precision; give one")
    name = p.parse_dtype(dtype or autocast)
    if spec.kind is not InputKind.TARGET:
        raise PorterError(f"{flag} {name} applies to a target captured now, and --to {spec.text} is a recorded {spec.kind.value}",
                          hint=f"capture the bundle with `porter capture MODEL --on TARGET {flag} {name}`, or give --to a target")
    from porter.targets import resolve

    target, stack = resolve(spec.text)
    if dtype:
        p.check_supported(stack, name, spec.text)
    else:
        p.check_autocast(stack, name, spec.text)
    return dataclasses.replace(options or CaptureOptions(), dtype="", autocast="")


def side_options(options: Any, role: str, target_dtype: str, target_autocast: str = "") -> Any:
    """The target of a precision port runs cast to target_dtype (or under autocast); the source as given."""
    import dataclasses

    if not (target_dtype or target_autocast) or role != "target" or options is None:
        return options
    return dataclasses.replace(options, dtype=target_dtype, autocast=target_autocast)


def time_live_pair(runs: dict[str, Any], interleave: Any, progress: Progress, policy: Any = None) -> Any:
    """Interleaved unprofiled timing of the two captured forwards; None unless both ran here.
    policy: the porter.runtime.policy.MeasurementPolicy both sides ran under: it picks the clock
    and warm-up, and its record is kept with the timing (`measurement`)."""
    if set(runs) != set(SIDES):
        return None
    import dataclasses

    from porter.capture.interleaved import InterleaveOptions, time_interleaved

    opts = interleave or InterleaveOptions(budget_s=float(os.environ.get("PORTER_TIMING_BUDGET_S", "10")))
    on_cpu = all(((r.manifest.get("device") or {}).get("type") == "cpu") for r in runs.values())
    if policy is not None:
        policy = policy.with_devices(on_cpu)
        if interleave is None:  # the policy's warm-up, unless the caller chose the timing's own
            opts = dataclasses.replace(opts, warmup=policy.warmup)
    clock = policy.clock if policy is not None else "wall"
    one = "; one intra-op thread per side" if policy is not None and policy.threads.single else ""
    progress(f"timing source and target alternately, unprofiled (up to {opts.budget_s:g} s{one}; "
             f"{'process CPU time' if clock == 'cpu' else 'wall time'})")
    timing = time_interleaved(runs["source"].forward(), runs["target"].forward(), opts, headline_clock=clock)
    if policy is not None:
        timing.threads, timing.heap = policy.threads.to_dict(), policy.heap.to_dict()
        timing.measurement = policy.finished().to_dict()
    return timing


def parallel_read_pays(specs: list[InputSpec]) -> bool:
    """Two trace files big enough that a second process beats its start-up, and two cores."""
    traces = [s for s in specs if s.kind is InputKind.TRACE]
    if len(traces) < 2 or len(os.sched_getaffinity(0)) < 2 or "fork" not in mp.get_all_start_methods():
        return False
    return min(s.path.stat().st_size for s in traces) >= PARALLEL_MIN_BYTES


def open_in_parallel(paths: list[Path]) -> list[Bundle]:
    """open_any on each path in its own forked process (the readers are already imported, so a
    child starts in milliseconds); a PorterError in either child is raised here. A child's
    read progress (profilers/progress.py) comes back over a queue and is reported here, so
    the CLI draws one bar per trace while both are read."""
    from profilers import progress

    ctx = mp.get_context("fork")
    reporter = progress.current_reporter()
    queue = ctx.SimpleQueue() if reporter is not None else None
    with concurrent.futures.ProcessPoolExecutor(max_workers=len(paths), mp_context=ctx,
                                                initializer=_report_to, initargs=(queue,)) as pool:
        futures = [pool.submit(open_any, p) for p in paths]
        if reporter is not None and queue is not None:
            _relay(queue, futures, reporter)
        return [f.result() for f in futures]


def _report_to(queue: Any) -> None:
    """In a forked reader: progress goes to the parent over `queue` (or nowhere)."""
    from profilers import progress

    progress.set_reporter(None if queue is None else lambda path, done, total: queue.put((str(path), done, total)))


def _relay(queue: Any, futures: list[concurrent.futures.Future], reporter: Callable[[Path, int, int], None]) -> None:
    """Hand the children's progress to the parent's reporter until both reads end."""
    while True:
        finished = all(f.done() for f in futures) or any(f.done() and f.exception() is not None for f in futures)
        while not queue.empty():  # a child puts before it returns: drained after the last one ends
            path, done, total = queue.get()
            reporter(Path(path), done, total)
        if finished:
            return
        concurrent.futures.wait(futures, timeout=0.05, return_when=concurrent.futures.FIRST_EXCEPTION)


def open_side(spec: InputSpec, model_spec: Any, scratch: Path | None, options: Any, progress: Progress,
              runs: dict[str, Any], policy: Any = None) -> Bundle:
    """The side as a bundle; a live side is captured into `scratch` (its run kept in `runs`)."""
    if spec.kind is not InputKind.TARGET:
        return open_any(spec.path)
    from porter.capture.options import CaptureOptions
    from porter.capture.run import capture
    from porter.targets import CaptureFailure

    try:
        result = capture(model_spec, spec.text, scratch, options or CaptureOptions(),
                         progress=lambda msg: progress(f"{spec.role} {spec.text}: {msg}"), policy=policy)
    except CaptureFailure as failure:
        failure.bundle = keep_failed(scratch, spec.role)
        raise
    runs[spec.role] = result
    return open_any(result.path)


def keep_failed(scratch: Path | None, role: str) -> str | None:
    """The failed capture bundle moved out of its scratch folder (removed when the run ends)
    to ``<out>/failed-<role>``, so the error message can name a bundle that stays; None when
    none was written or that name is taken by something that is not a bundle."""
    if scratch is None or not is_bundle(scratch):
        return None
    dest = scratch.parent / f"failed-{role}"
    if dest.exists() and not is_bundle(dest):
        return None
    shutil.rmtree(dest, ignore_errors=True)
    scratch.rename(dest)
    return str(dest)
