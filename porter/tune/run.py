"""The tune's order of work: both untuned sides prepared once, each candidate recipe applied
alone to the target and timed against the untuned target and the source (porter.tune.measure),
its accuracy checked, the kept ones (Holm-corrected over all tried) combined greedily,
everything cached as it is measured.

Greedy combination: the kept recipes in order of measured recovery; starting from the best
one, each next recipe is added when its settings do not clash (porter.analysis.recipes.combine)
and the combination, measured the same way, recovers more than the best so far. It measures
at most one combination per kept recipe, not every subset.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from porter.analysis.accuracy import tolerance_for
from porter.analysis.opcost import canonical_dtype
from porter.analysis.recipes import Recipe, combine
from porter.capture.interleaved import InterleaveOptions
from porter.capture.tuned import TunedSide, prepare_side
from porter.core.errors import PorterError
from porter.core.stats import holm
from porter.runtime.policy import WARMUP, measured
from porter.tune.cache import TuneCache, key
from porter.tune.candidates import TunePlan
from porter.tune.measure import Measured, accuracy, time_three

Progress = Callable[[str], None]
GREEDY = ("greedy: kept recipes in order of measured recovery, each added to the best combination so far "
          "when its settings do not clash and the combination, measured the same way, recovers more")


@dataclass(frozen=True)
class TuneOptions:
    budget_s: float = 300.0  # no measurement starts once this is spent (compiles included)
    tolerance: float | None = None  # rel-L2 against the source's output; None: porter's for the model's dtype
    fresh: bool = False  # ignore the cache of an earlier run in the same folder
    max_timing_s: float = 20.0  # timing of one measurement, at most
    min_timing_s: float = 2.0  # less timing than this left: the rest is not tried


def one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", "") or exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}".rstrip(": ")


class Tuner:
    """One tune in progress: the untuned sides, the clock, the cache and what was found."""

    def __init__(self, plan: TunePlan, out_dir: Path, opts: TuneOptions, progress: Progress, policy: Any) -> None:
        from porter.capture.models import load_model

        self.plan, self.opts, self.progress, self.policy = plan, opts, progress, policy
        self.start = time.monotonic()
        self.cache = TuneCache(out_dir, enabled=not opts.fresh)
        self.findings: list[str] = []
        self.model = load_model(plan.model)
        progress(f"preparing the source {plan.source} and the untuned target {plan.target} (compiles)")
        self.source = prepare_side(self.model, plan.source, {})
        self.untuned = prepare_side(self.model, plan.target, {})
        on_cpu = all(s.stack.device_info(s.prepared.device).get("type") == "cpu" for s in (self.source, self.untuned))
        self.policy = policy.with_devices(on_cpu)
        self.reference = self.source.output()
        dtype = canonical_dtype(str(self.model.dtype).replace("torch.", "")) or "fp32"
        self.tolerance = opts.tolerance if opts.tolerance is not None else tolerance_for(dtype)
        self.untuned_accuracy = accuracy(self.reference, self.untuned.output(), self.tolerance)

    def left_s(self) -> float:
        return self.opts.budget_s - (time.monotonic() - self.start)

    def identity(self, settings: dict[str, Any]) -> str:
        return key(model=self.plan.model, fingerprint=self.model.fingerprint, source=self.plan.source,
                   target=self.plan.target, settings=settings, versions=self.untuned.stack.versions(),
                   threads=self.policy.threads.single, clock=self.policy.clock, tolerance=self.tolerance)

    def timing_s(self, remaining: int) -> float:
        """An even share of what is left for each measurement still to make, within the limits."""
        share = self.left_s() / max(remaining, 1) * 0.6  # the rest for compiles and the first forwards
        return min(self.opts.max_timing_s, share)

    def measure(self, recipes: tuple[Recipe, ...], remaining: int, label: str) -> dict[str, Any]:
        """One recipe or combination: cached, measured, or a one-line failure; never raises for
        the recipe's own errors (the rest go on)."""
        settings = combine(recipes) or {}
        k = self.identity(settings)
        cached = self.cache.get(k)
        if cached is not None and cached.get("status") == "measured" and "p" not in cached.get("recovery", {}):
            cached = None  # measured before recoveries had a p-value: Holm's correction needs one
        if cached is not None:
            self.progress(f"{label}: measured before (tune-cache.json)")
            return {**cached, "from_cache": True}
        timing = self.timing_s(remaining)
        if timing < self.opts.min_timing_s:
            return {"status": "not tried", "why": f"not tried: the budget ({self.opts.budget_s:g} s) is spent"}
        self.progress(f"{label}: applying and compiling")
        try:
            side = prepare_side(self.model, self.plan.target, settings)
        except (Exception, PorterError) as exc:  # a recipe that fails on this model is a finding
            finding = f"{' + '.join(r.name for r in recipes)} failed on {self.plan.model}: {one_line(exc)}"
            self.findings.append(finding)
            record = {"status": "failed", "error": one_line(exc), "why": f"failed: {one_line(exc)}"}
            self.cache.put(k, record)
            return record
        record = self.time_side(side, timing, label)
        self.cache.put(k, record)
        return record

    def time_side(self, side: TunedSide, timing_s: float, label: str) -> dict[str, Any]:
        self.progress(f"{label}: timing against the untuned target and the source, alternately (up to {timing_s:.0f} s)")
        opts = InterleaveOptions(warmup=self.policy.warmup, budget_s=timing_s)
        m = time_three(self.source.step(), self.untuned.step(), side.step(), opts, self.policy.clock)
        acc = accuracy(self.reference, side.output(), self.tolerance)
        kept, why = verdict(m, acc)
        return {"status": "measured", **m.to_dict(), "accuracy": acc, "kept": kept, "why": why}


def verdict(m: Measured, acc: dict[str, Any]) -> tuple[bool, str]:
    value, lo, hi = m.recovered_us
    span = f"{value:+.0f} us per forward [{lo:+.0f}, {hi:+.0f}]"
    if not acc["within_tolerance"]:
        rel = acc.get("rel_l2")
        return False, (f"accuracy does not hold: rel_l2 {rel:.2e} > tolerance {acc['tolerance']:.0e}; time {span}"
                       if rel is not None else f"accuracy does not hold: {acc.get('why', '')}")
    if m.recovery.low > 1.0:
        return False, f"slower: {span}"
    if not m.excludes_zero:
        return False, f"the recovery's interval includes zero: {span}"
    return True, f"recovers {span}, accuracy within tolerance"


def holm_correct(candidates: list[dict[str, Any]], alpha: float = 0.05) -> None:
    """Keep only the recoveries that hold as a family: trying eight recipes that change nothing,
    a per-recipe 95% rule keeps at least one in about a third of tunes. Holm's step-down over
    every measured candidate's recovery p-value (porter.core.stats.holm) bounds that at alpha;
    a candidate kept by its own interval but not by the family is shown with why."""
    measured_ = [c for c in candidates if c.get("status") == "measured"]
    ps = [float(c["recovery"].get("p", float("nan"))) for c in measured_]
    for c, p, held in zip(measured_, ps, holm(ps, alpha)):
        c["holm"] = {"p": p, "family": len(measured_), "alpha": alpha, "rejects_no_change": held}
        if c.get("kept") and not held:
            c["kept"] = False
            c["why"] = (f"{c['why'].split(', accuracy')[0]}, but not beyond chance over {len(measured_)} recipes tried "
                        f"(Holm: p = {p:.3g})")


def tune(plan: TunePlan, out_dir: Path, opts: TuneOptions = TuneOptions(), progress: Progress = lambda m: None) -> dict[str, Any]:
    """Run the tune of module doc and return tune.json's document (porter.tune.outputs writes it).
    On Ctrl-C the document so far is written with status "interrupted" before it propagates."""
    from porter.tune.outputs import document, write_outputs

    candidates: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    with measured(WARMUP) as policy:
        tuner = Tuner(plan, out_dir, opts, progress, policy)
        status = "ok"
        try:
            for i, cand in enumerate(plan.candidates):
                r = cand.recipe
                rec = tuner.measure((r,), len(plan.candidates) - i + 1, f"[{i + 1}/{len(plan.candidates)}] {r.name}")
                candidates.append({"fix_id": r.fix_id, "recipe": r.name, "recipe_detail": r.to_dict(),
                                   "estimated_us": cand.estimated_us, "kept": False, **rec})
            holm_correct(candidates)
            best = greedy(tuner, plan, candidates)
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            doc = document(plan, tuner, candidates, best, status, opts, GREEDY)
            write_outputs(out_dir, doc)
    return doc


def greedy(tuner: Tuner, plan: TunePlan, candidates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The best combination of the kept recipes (GREEDY), as its measured record."""
    kept = sorted((c for c in candidates if c.get("kept")), key=lambda c: -c["recovered_us"]["value"])
    if not kept:
        return None
    recipes = {c["recipe"]: next(x.recipe for x in plan.candidates if x.recipe.name == c["recipe"]) for c in kept}
    best_names, best = [kept[0]["recipe"]], kept[0]
    for n, c in enumerate(kept[1:], 1):
        names = best_names + [c["recipe"]]
        if combine(tuple(recipes[x] for x in names)) is None:
            continue
        rec = tuner.measure(tuple(recipes[x] for x in names), len(kept) - n, f"combination {' + '.join(names)}")
        if rec.get("kept") and rec["recovered_us"]["value"] > best["recovered_us"]["value"]:
            best_names, best = names, rec
    return {"recipes": best_names, "settings": combine(tuple(recipes[x] for x in best_names)), **best}


__all__ = ["GREEDY", "TuneOptions", "Tuner", "holm_correct", "tune", "verdict"]
