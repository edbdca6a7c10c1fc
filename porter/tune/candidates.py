"""What `porter tune` tries: the fix plan's fixes that have a recipe for the target's stack
(from a diagnosis, with each fix's estimated recovery), every recipe for that stack when no
diagnosis is given (no estimate), or the recipes named with --try."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from porter.analysis.fixes import Catalogue
from porter.analysis.recipes import Recipe
from porter.core.errors import PorterError


@dataclass(frozen=True)
class Candidate:
    recipe: Recipe
    estimated_us: float | None  # the fix plan's recoverable time for its fix (None: not diagnosed)


@dataclass(frozen=True)
class TunePlan:
    model: str  # a model reference load_model takes
    source: str
    target: str
    stack: str  # the catalogue stack key of the target
    candidates: tuple[Candidate, ...]
    not_here: tuple[Recipe, ...]  # the stack's recipes that cannot run on this machine
    from_diagnosis: str = ""  # the diagnosis folder the plan came from


def read_diagnosis(path: Path) -> dict[str, Any]:
    """diagnosis.json of a diagnose output folder (or the file itself), with live sides."""
    from profilers.jsonio import load_json

    file = path / "diagnosis.json" if path.is_dir() else path
    doc = load_json(file, "porter diagnosis.json")
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
        raise PorterError("not a porter diagnosis.json (no inputs)", path=file)
    return doc


def diagnosed_pair(doc: dict[str, Any], where: Path) -> tuple[str, str, str, dict[str, float]]:
    """(model, source, target, estimated us per forward per fix id) of a live diagnosis."""
    sides = []
    for role in ("source", "target"):
        side = doc["inputs"].get(role) or {}
        target = (side.get("target") or {}).get("text")
        if not target:
            raise PorterError(f"the diagnosis's {role} is a recorded trace; tune runs both sides here",
                              path=where, hint="diagnose with live sides (--from cpu --to cpu:inductor) or give MODEL --from --to")
        sides.append((target, side.get("model") or {}))
    model = sides[1][1]
    ref = model.get("name") if model.get("source") in ("builtin", "", None) else model.get("source")
    if not ref:
        raise PorterError("the diagnosis names no model", path=where)
    steps = profiled_steps(doc)
    estimates: dict[str, float] = {}
    for fix in doc.get("fixes") or []:
        if isinstance(fix, dict) and fix.get("kind") == "perf" and isinstance(fix.get("recoverable_us"), (int, float)):
            estimates[fix["fix_id"]] = estimates.get(fix["fix_id"], 0.0) + float(fix["recoverable_us"]) / steps
    return str(ref), sides[0][0], sides[1][0], estimates


def profiled_steps(doc: dict[str, Any]) -> int:
    """How many profiled steps the diagnosis's times sum over: a fix's recoverable_us is over
    the whole profiled run, a tune's recovery per forward, so the estimate is divided by this."""
    per_step = (doc.get("end_to_end") or {}).get("target_per_step_us") or {}
    n = per_step.get("n") if isinstance(per_step, dict) else None
    return int(n) if isinstance(n, int) and n > 0 else 1


def plan(catalogue: Catalogue, model: str, source: str, target: str, stack: str, tries: Sequence[str] = (),
         estimates: dict[str, float] | None = None, from_diagnosis: str = "") -> TunePlan:
    """The candidates in the order they are tried: a diagnosis's fixes by estimated recovery,
    then the stack's other recipes in the catalogue's order; without a diagnosis the catalogue's
    order; --try names them instead (an unknown name is an error)."""
    recipes = catalogue.recipes(stack)
    runnable = [r for r in recipes if not r.runnable_here]
    not_here = tuple(r for r in recipes if r.runnable_here)
    by_name = {r.name: r for r in recipes}
    if tries:
        unknown = [t for t in tries if t not in by_name]
        if unknown:
            raise PorterError(f"no recipe {', '.join(map(repr, unknown))} for {stack}",
                              hint=f"recipes for {stack}: {', '.join(by_name) or 'none'} (docs/fixes.md)")
        blocked = [by_name[t] for t in tries if by_name[t].runnable_here]
        if blocked:
            raise PorterError(f"recipe {blocked[0].name!r} cannot run here: {blocked[0].runnable_here}")
        chosen = [by_name[t] for t in dict.fromkeys(tries)]
    elif estimates:
        planned = sorted((r for r in runnable if r.fix_id in estimates), key=lambda r: -estimates[r.fix_id])
        # then the stack's other recipes, unestimated: cheap to try, and the plan's estimate can miss
        chosen = planned + [r for r in runnable if r.fix_id not in estimates]
    else:
        chosen = runnable
    est = estimates or {}
    return TunePlan(model, source, target, stack, tuple(Candidate(r, est.get(r.fix_id)) for r in chosen), not_here,
                    from_diagnosis)


def plan_for(what: str, source: str | None, target: str | None, tries: Sequence[str] = (),
             catalogue_path: Path | None = None) -> TunePlan:
    """The plan of `porter tune WHAT`: WHAT a diagnosis folder (its live pair and estimates) or
    a model with --from/--to. PorterError for a target that is not here or has no recipe."""
    from porter.analysis.fixes import load_catalogue
    from porter.core.stacks import STACKS
    from porter.targets import resolve

    path = Path(what)
    if (path / "diagnosis.json").is_file() or (path.is_file() and path.suffix == ".json"):
        if source or target:
            raise PorterError("give either a diagnosis folder or MODEL --from --to, not both")
        model, source, target, estimates = diagnosed_pair(read_diagnosis(path), path)
    elif source and target:
        model, estimates = what, None
    else:
        raise PorterError("tune needs MODEL --from SRC --to TGT, or a `porter diagnose` output folder",
                          hint="e.g. porter tune transformer --from cpu --to cpu:inductor")
    spec, stack = resolve(target)
    stack.availability(spec.device).raise_if_missing(spec.text)
    key = STACKS[stack.name].catalogue_key(stack.resolve_device(spec.device))
    chosen = plan(load_catalogue(catalogue_path), model, source, target, key, tuple(tries), estimates,
                  str(path) if estimates is not None else "")
    if not chosen.candidates:
        raise PorterError(f"no recipe runs here for {key}", hint="see docs/fixes.md, Recipes")
    return chosen


__all__ = ["Candidate", "TunePlan", "diagnosed_pair", "plan", "plan_for", "read_diagnosis"]
