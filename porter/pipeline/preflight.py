"""Everything wrong with a diagnose's --from, --to and MODEL, found before any stack, table
or model is imported, and told at once in one line: a newcomer's typo costs milliseconds,
not the seconds torch and jax take to import, and fixing one side never reveals the other's.

Only what the words and the file system can tell is checked here; whether a target's stack
runs on this machine needs the stack (porter.pipeline.inputs.check_available)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from porter.capture.modelref import check_model_ref
from porter.core.errors import PorterError
from porter.core.targetspec import parse_target

# what a recorded side's name usually ends with: a missing one is a missing file, not a target
TRACE_SUFFIXES = (".json", ".gz", ".pb", ".pt.trace.json", ".csv", ".db", ".sqlite", ".parquet")
SIDE_HINT = ("pass a bundle directory or a trace file, or a target such as cpu, xla or cpu:inductor "
             "(see `porter targets`)")


def side_problem(text: str, role: str) -> PorterError | None:
    """Why this --from/--to names nothing porter can use, or None: an existing path (a
    bundle or a trace, read later), or a target's name."""
    if os.path.exists(text):
        return None
    if os.sep in text or "/" in text or text.lower().endswith(TRACE_SUFFIXES):
        return PorterError(f"{role}: no such bundle or trace file, and not a target", path=text, hint=SIDE_HINT)
    try:
        parse_target(text)
    except PorterError as exc:
        return PorterError(f"{role}: {exc.problem}", hint=exc.hint)
    return None


def problems(source: str | Path, target: str | Path, model: str | None) -> list[PorterError]:
    """Each side's problem, then the model's, in that order."""
    found = [p for p in (side_problem(str(source), "source"), side_problem(str(target), "target")) if p]
    sides = {"source": str(source), "target": str(target)}
    live = [role for role, text in sides.items() if not os.path.exists(text)]
    if not found and model is None and len(live) == 1:
        role = live[0]
        found.append(PorterError(f"{role} {sides[role]!r} is a target to capture, which needs a MODEL",
                                 hint="give a MODEL (e.g. `porter diagnose transformer --from cpu --to xla`), "
                                      "or a bundle or trace file for that side"))
    if model is not None:
        try:
            check_model_ref(model)
        except PorterError as exc:
            found.append(exc)
    return found


def check_inputs(source: str | Path, target: str | Path, model: str | None) -> None:
    """Raise one PorterError naming every problem of the pair's inputs (none: return)."""
    raise_all(problems(source, target, model))


def raise_all(found: Sequence[PorterError]) -> None:
    """One problem as it is; several as one line, each with its own hint."""
    if len(found) == 1:
        raise found[0]
    if found:
        raise PorterError("; ".join(p.one_line() for p in found))


def check_run(model: str | None, targets: Sequence[str]) -> None:
    """capture, bench and ops: the model and every --on target checked by their words, every
    problem said in one line (none: return)."""
    found = []
    for text in targets:
        try:
            parse_target(text)
        except PorterError as exc:
            found.append(PorterError(f"--on {text}: {exc.problem}", hint=exc.hint))
    if model is not None:
        try:
            check_model_ref(model)
        except PorterError as exc:
            found.append(exc)
    raise_all(found)
