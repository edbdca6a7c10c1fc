"""Confirm the largest module gaps by replay: each suspect module re-timed alone on both stacks.

A profiled module gap is a self time inside a whole-model trace; a shared machine, a
profiler's per-event cost or a fused kernel charged to the wrong module can each make one.
Here each suspect module is run alone, on the source's stack and the target's, with the very
arguments it received in one forward of the model (recorded by a forward pre-hook), every
call it made in that forward: in blocks of its own calls only (so that what else is confirmed
does not decide its caches), the modules' blocks in turn and the two stacks interleaved within
each, so that a slow minute of the machine falls on all alike, on the process's CPU time when both stacks run on the CPU
(a descheduled process accrues none) and on the wall clock otherwise. Each call's *floor*
(the cheapest call the stack can make with the same arguments: one element read and added)
is timed beside it and taken off: a module inside the compiled model does not pay the guards,
dispatch and argument handling a call alone pays. A module with modules inside it is timed whole
(it and they), so it is held against its profiled gap and theirs summed, not its self time: held
against that, a Llama decoder layer read -23 us profiled and -414 us alone, "confirmed". The
gap's interval is the median's 95% order-statistic interval over the repeats
(porter.core.samples.median_ci).

Only torch-based stacks that run here replay (eager, inductor, xla via torchax); ORT would
need an export per module, and is said to be unconfirmed instead.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from porter.core.samples import median_ci

REPLAYED_STACKS = ("eager", "inductor", "xla")
DEFAULT_CONFIRM = 5  # suspects re-timed alone by default (`--confirm N`)
REPEATS = 30  # interleaved repeats: a median of 30 has a 95% interval from the 10th to the 21st
# untimed calls of the same callable before each timed one, so that the timed call finds its
# inputs, weights and output buffers as a run of itself leaves them, whatever ran before it: with
# none, the source's call (always first) read a GELU's input after a 36 MB GEMM had evicted it and
# the target's read it warm, so eager against eager read -112 us of 470; one settling
# call left -22 to -36 us (4 runs); three leave -9 to +2 us, intervals holding zero
# (tests/capture/test_confirm_settle.py). A module alone then reads the same gap whatever else is
# timed in its loop: bert_base's first GELU on inductor read -30 us beside the encoder's non-leaf
# modules and +55 us beside the other GELUs alone; settled, +50 and +68.
SETTLE_CALLS = 3
# what settling leaves of the order's bias falls on both sides alike: even repeats time each call's
# source first, odd ones its target first. Settled but in one order, CI's run of the test above read
# -33 us of 397 [-54, -9] (8%, beside the suite's other work), where this desk had read -9 to +2
# (interleaved_samples).

# BLOCK: repeats of one module's calls with nothing else between them. A module's gap alone moves with
# the company it is timed in, by more than 1.5x at a few per cent of a GEMM: bert_base layer 4's
# intermediate dense read +198 us on inductor beside two other modules, +135 beside porter's 54
# suspects, +338 beside ~200 leaves (BENCHMARKS.md, "Three times the repeats"). In its own loop
# the module runs as a run of itself leaves the caches: one context, whoever else is confirmed.
BLOCK = 10
# untimed rounds of every module's blocks before the timed ones: whichever alone timing ran first after
# the compiles read llama_base's eager RMSNorms slower (src 43-47 us against 41-43 after), so that
# porter's gaps read up to 1.45x the script's timed next (ratio x0.92-x1.45 in 6 runs; with this round x0.85-x1.27) and the script's
# up to 1.2x porter's when it went first; the second timing in the same process agreed (0.83-1.20)
WARM_ROUNDS = 1
BUDGET_S = 20.0  # repeats stop early past this, so that the demo stays within about a minute


@dataclass(frozen=True)
class Confirmed:
    """One suspect module timed alone on both stacks (us per forward: all its calls, less floors)."""

    module: str
    source_us: float
    target_us: float
    gap_us: float  # median over repeats of target - source, same repeat
    gap_low_us: float
    gap_high_us: float
    calls: int
    repeats: int
    error: str = ""  # why it could not be replayed ('' when it was)
    # modules inside it: timed alone, such a module is all of them with its own work, while its
    # by_module gap is its self time only (porter.pipeline.confirmation compares it whole)
    inside: int = 0

    @property
    def significant(self) -> bool:
        return not self.error and (self.gap_low_us > 0 or self.gap_high_us < 0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "significant": self.significant}


def _first_tensor_at(value: Any) -> tuple | None:
    """Where the first tensor of a nested (args, kwargs) sits: the keys and indices down to it."""
    if isinstance(value, torch.Tensor):
        return ()
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (tuple, list)) else ()
    for key, v in items:
        inner = _first_tensor_at(v)
        if inner is not None:
            return (key, *inner)
    return None


class _Floor(torch.nn.Module):
    """The cheapest call a stack makes with a call's arguments: one element of the first tensor
    read and added (a compiled call's fixed cost grows with its inputs, so with the same ones).
    The tensor's place is found once, not per call: searching the arguments in the call (a pytree
    flatten) made eager's floor call 15.5 us against 7.6 bare, a cost a compiled floor traces
    away, so every eager-side module read ~8 us cheaper and every gap ~8 us larger (llama_base's
    RMSNorms -6.5 us against -13.5 in the script's alone timing, its SiLUs +17 against +12)."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        super().__init__()
        at = _first_tensor_at((args, kwargs))
        if at is None:
            raise ValueError("the call takes no tensor")
        self.at = at  # within (args, kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        x: Any = (args, kwargs)
        for key in self.at:
            x = x[key]
        return x[(0,) * x.dim()] + 1


def _is_kv_cache(v: Any) -> bool:
    """A transformers KV cache (cache_utils.Cache and its kinds), found by class, not import:
    porter loads transformers only where the model does."""
    return any(c.__name__ == "Cache" and c.__module__.startswith("transformers") for c in type(v).__mro__)


def _kept(v: Any) -> Any:
    """A recorded argument as the replay takes it: a tensor cloned (the forward may change it in
    place afterwards); a KV cache left out (None). A cache grows with every call given it: replayed,
    llama_base's attention read the keys of 6816 positions after 100 calls instead of 64, and on
    inductor each new length recompiled (865 compiles, 786 s for 111 modules). In one forward the
    cache's slot of a layer starts empty, so without it the attention reads the same keys and
    values; all that is left out is the cache's append of them."""
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    return None if _is_kv_cache(v) else v


def recorded_calls(model: torch.nn.Module, inputs: tuple[Any, ...], paths: Sequence[str]) -> dict[str, list[tuple]]:
    """Porter path -> (args, kwargs) of every call each named module made in one forward."""
    named = {n.replace(".", "/"): m for n, m in model.named_modules() if n}
    seen: dict[str, list[tuple]] = {p: [] for p in paths if p in named}

    def keep(path: str) -> Callable[..., None]:
        def hook(_m: Any, args: tuple, kwargs: dict) -> None:
            seen[path].append(tree_map(_kept, (tuple(args), dict(kwargs))))
        return hook

    hooks = [named[p].register_forward_pre_hook(keep(p), with_kwargs=True) for p in seen]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return {p: calls for p, calls in seen.items() if calls}


def _channels_last(v: Any) -> Any:
    return v.contiguous(memory_format=torch.channels_last) if isinstance(v, torch.Tensor) and v.dim() == 4 else v


def runner(stack: str, mod: torch.nn.Module, args: tuple, kwargs: dict, channels_last: bool = False) -> Callable[[], Any]:
    """One finished call of mod(*args, **kwargs) on the stack. On inductor a conv net's inputs
    are channels-last, as inductor lays out every activation of such a graph on the CPU."""
    if stack == "xla":
        import jax

        from porter.targets.torchax_shim import import_torchax

        tx = import_torchax()
        env = tx.default_env()
        with torch.no_grad():
            weights, fn = tx.extract_jax(mod, env)
        # tensor leaves (nested too: a decoder layer's position_embeddings tuple) are the jitted
        # function's inputs; anything else (flags, None, sizes) is closed over
        leaves, spec = tree_flatten((args, kwargs))
        arrays = {i: env.t2j_copy(v) for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)}

        def rebuilt(w: Any, given: dict[int, Any]) -> Any:
            a, kw = tree_unflatten([given.get(i, v) for i, v in enumerate(leaves)], spec)
            return fn(w, tuple(a), dict(kw))

        jitted = jax.jit(rebuilt)
        return lambda: jax.block_until_ready(jitted(weights, arrays))
    if stack == "inductor":
        compiled = torch.compile(mod, backend="inductor")
        if channels_last:
            args, kwargs = tree_map(_channels_last, (args, kwargs))
        target = compiled
    else:
        target = mod

    def call() -> Any:
        with torch.no_grad():
            return target(*args, **kwargs)
    return call


def _clock(cpu: bool) -> Callable[[], float]:
    return time.process_time if cpu else time.perf_counter


def _sides_swapped(key: str) -> str:
    """The same call on the other side: `path|{kind}{side}{i}` with src and tgt exchanged (a key
    of another form stays in its place)."""
    if "|" not in key:
        return key
    path, tail = key.rsplit("|", 1)
    return f"{path}|{tail.replace('src', '@').replace('tgt', 'src').replace('@', 'tgt')}"


def _module_of(key: str) -> str:
    return key.rsplit("|", 1)[0] if "|" in key else ""


def interleaved_samples(calls: dict[str, Callable[[], Any]], repeats: int, clock: Callable[[], float],
                        budget_s: float = math.inf, block: int = BLOCK) -> dict[str, list[float]]:
    """us per call of each callable per repeat, keys named `path|{kind}{side}{i}`. Each module's
    calls run in a block of `block` repeats with nothing else between them (its own company: see
    BLOCK), the modules' blocks in turn, round after round, so that a slow minute of the machine
    still falls on all; within a block each call once per repeat, in calls' order on even repeats
    and each side's place taken by the other's on odd ones (see SETTLE_CALLS). Keys of another
    form are one module."""
    for c in calls.values():
        c()
        c()
    out: dict[str, list[float]] = {k: [] for k in calls}
    modules: dict[str, list[str]] = {}
    for k in calls:
        modules.setdefault(_module_of(k), []).append(k)
    orders = {m: (keys, [_sides_swapped(k) for k in keys]) for m, keys in modules.items()}
    for _ in range(WARM_ROUNDS):
        for m in modules:
            for r in range(min(block, repeats)):
                for k in orders[m][r % 2]:
                    calls[k]()
    t_end = time.perf_counter() + budget_s
    done = 0
    while done < repeats:
        n = min(block, repeats - done)
        for m in modules:
            for r in range(done, done + n):
                for k in orders[m][r % 2]:
                    c = calls[k]
                    for _ in range(SETTLE_CALLS):
                        c()
                    t0 = clock()
                    c()
                    out[k].append((clock() - t0) * 1e6)
        done += n
        if done >= 10 and time.perf_counter() > t_end:  # at least 10 repeats: an interval of ranks 2..9
            break
    return out


def confirm(model: torch.nn.Module, inputs: tuple[Any, ...], paths: Sequence[str], source_stack: str,
            target_stack: str, *, cpu_clock: bool, repeats: int = REPEATS, budget_s: float = BUDGET_S) -> list[Confirmed]:
    """Each module of paths timed alone on both stacks (see the module doc), in paths' order."""
    import torch._dynamo.config as dynamo_config

    for stack in (source_stack, target_stack):
        if stack not in REPLAYED_STACKS:
            return [_unconfirmed(p, f"{stack} does not replay one module alone") for p in paths]
    named = {n.replace(".", "/"): m for n, m in model.named_modules() if n}
    recorded = recorded_calls(model, inputs, paths)
    conv = any(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    fns: dict[str, Callable[[], Any]] = {}
    failed: dict[str, str] = {}
    # every module's compiled call stays alive at once (one nn.Linear.forward for every dense layer)
    with dynamo_config.patch(recompile_limit=1024, accumulated_recompile_limit=8192, automatic_dynamic_shapes=False):
        for path in paths:
            if path not in recorded:
                failed[path] = "not called in the forward" if path in named else "no such module"
                continue
            try:
                mine = {f"{path}|{kind}{side}{i}": runner(stack, named[path] if kind == "" else _Floor(a, kw), a, kw,
                                                          conv and stack == "inductor")
                        for i, (a, kw) in enumerate(recorded[path])
                        for side, stack in (("src", source_stack), ("tgt", target_stack)) for kind in ("", "floor")}
                for c in mine.values():
                    c()
            except Exception as exc:  # a module that does not run alone is said, not hidden
                failed[path] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
                continue
            fns.update(mine)
        t = interleaved_samples(fns, repeats, _clock(cpu_clock), budget_s) if fns else {}
    inside = {p: sum(1 for q in named if q.startswith(f"{p}/")) for p in paths}
    return [_unconfirmed(p, failed[p]) if p in failed else _timed(p, len(recorded[p]), t, inside[p]) for p in paths]


def _timed(path: str, n: int, t: dict[str, list[float]], inside: int = 0) -> Confirmed:
    reps = len(t[f"{path}|src0"])
    per = {side: [max(sum(t[f"{path}|{side}{i}"][r] - t[f"{path}|floor{side}{i}"][r] for i in range(n)), 0.0)
                  for r in range(reps)] for side in ("src", "tgt")}
    gaps = [b - a for a, b in zip(per["src"], per["tgt"])]
    lo, hi = median_ci(gaps)
    return Confirmed(path, statistics.median(per["src"]), statistics.median(per["tgt"]), statistics.median(gaps),
                     lo, hi, n, reps, inside=inside)


def _unconfirmed(path: str, why: str) -> Confirmed:
    nan = float("nan")
    return Confirmed(path, nan, nan, nan, nan, nan, 0, 0, why)
