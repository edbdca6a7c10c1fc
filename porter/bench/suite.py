"""What a benchmark measures: cases read from SUITE.toml, or the built-in suite.

A case is one model (a built-in name or ``FILE.py:factory``) with optional input shapes,
a dtype and a mode (``inference``: one forward; ``train``: forward, backward, SGD step),
run on a list of targets. SUITE.toml::

    [suite]
    name = "nightly"
    stacks = ["cpu", "cpu:inductor", "xla", "cpu:ort"]   # default for every case
    threshold = 0.05                                     # practical threshold (ratio - 1)

    [[case]]
    name = "mlp-b64"
    model = "mlp"                  # or "models/net.py:factory" (relative to the suite file)
    shapes = [[64, 256]]           # optional: one shape per tensor input
    dtype = "float32"              # float32, float64, bfloat16, float16
    mode = "inference"             # or "train"
    stacks = ["cpu", "cpu:inductor"]   # optional override
    threshold = 0.10               # optional per-case override
    [case.tuned]                   # optional: a target run with `porter tune` recipes (inference)
    "cpu:inductor" = ["freezing", "max-autotune"]

Only builtin_suite() imports torch (to list the built-in models); reading a file does not.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from porter.core.errors import PorterError

MODES = ("inference", "train")
DTYPES = ("float32", "float64", "bfloat16", "float16")
DEFAULT_THRESHOLD = 0.05  # below 5% a CPU-shared machine's run-to-run drift is indistinguishable
BUILTIN_STACKS = ("cpu", "cpu:inductor", "xla", "cpu:ort")


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    stacks: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...] = ()  # empty: the factory's own example inputs
    dtype: str = "float32"
    mode: str = "inference"
    threshold: float = DEFAULT_THRESHOLD
    tuned: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (target, recipe names): porter tune's kept settings

    def describe(self) -> dict[str, Any]:
        """The case's identity as stored beside its results."""
        return {"model": self.model, "shapes": [list(s) for s in self.shapes], "dtype": self.dtype,
                "mode": self.mode, "threshold": self.threshold,
                **({"tuned": {t: list(r) for t, r in self.tuned}} if self.tuned else {})}

    def recipes_for(self, target: str) -> tuple[str, ...]:
        return dict(self.tuned).get(target, ())


@dataclass(frozen=True)
class Suite:
    name: str
    cases: tuple[Case, ...] = field(default_factory=tuple)


def builtin_suite(stacks: tuple[str, ...] = BUILTIN_STACKS) -> Suite:
    """porter's own models, inference on every given stack, plus an eager/inductor train step."""
    from porter.capture.models.zoo import BUILTINS  # imports torch: only the runner needs this

    cases = [Case(name, name, tuple(stacks)) for name in BUILTINS]
    train_stacks = tuple(s for s in stacks if s in ("cpu", "cuda", "rocm") or s.endswith((":eager", ":inductor")))
    if train_stacks:
        cases.append(Case("mlp-train", "mlp", train_stacks, mode="train"))
    return Suite("builtin", tuple(cases))


def single_case(model: str, stacks: tuple[str, ...], *, mode: str = "inference", dtype: str = "float32",
                threshold: float = DEFAULT_THRESHOLD) -> Suite:
    """`porter bench MODEL --on A --on B`: one case, no file."""
    name = Path(model.rpartition(":")[0]).stem + ":" + model.rpartition(":")[2] if ":" in model else model
    case = _checked(Case(name, model, tuple(stacks), (), dtype, mode, threshold), "command line")
    return Suite(name, (case,))


def _checked(case: Case, where: str) -> Case:
    if "|" in case.name or not case.name.strip():
        raise PorterError(f"{where}: case name {case.name!r} must be non-empty and free of '|' (it separates series keys)")
    if not case.stacks:
        raise PorterError(f"{where}: case {case.name!r} names no stacks", hint="add stacks = [\"cpu\", ...] or pass --on")
    if len(set(case.stacks)) != len(case.stacks):
        raise PorterError(f"{where}: case {case.name!r} lists a target twice")
    if case.mode not in MODES:
        raise PorterError(f"{where}: case {case.name!r}: mode must be one of {', '.join(MODES)}, not {case.mode!r}")
    if case.dtype not in DTYPES:
        raise PorterError(f"{where}: case {case.name!r}: dtype must be one of {', '.join(DTYPES)}, not {case.dtype!r}")
    if not (0 < case.threshold < 10):
        raise PorterError(f"{where}: case {case.name!r}: threshold must be a fraction like 0.05, not {case.threshold!r}")
    return case


def _tuned(raw: Any, stacks: tuple[str, ...], where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not all(isinstance(v, list) and v and all(isinstance(n, str) for n in v)
                                            for v in raw.values()):
        raise PorterError(f"{where}: tuned must map a target to a list of recipe names (porter tune's tuned-bench.toml)")
    missing = [t for t in raw if t not in stacks]
    if missing:
        raise PorterError(f"{where}: tuned names {missing[0]!r}, which is not among the case's stacks")
    return tuple((t, tuple(v)) for t, v in raw.items())


def _shapes(raw: Any, where: str) -> tuple[tuple[int, ...], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(s, list) and all(isinstance(d, int) and d > 0 for d in s) for s in raw):
        raise PorterError(f"{where}: shapes must be a list of lists of positive integers, e.g. [[32, 256]]")
    return tuple(tuple(s) for s in raw)


def load_suite(path: Path, stacks_override: tuple[str, ...] = ()) -> Suite:
    """Parse SUITE.toml; a relative FILE.py:factory model is taken relative to the suite file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise PorterError("no such suite file", path=path) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PorterError(f"not a valid TOML suite: {exc}", path=path) from None
    head = data.get("suite", {})
    default_stacks = tuple(stacks_override or head.get("stacks", ()))
    default_threshold = float(head.get("threshold", DEFAULT_THRESHOLD))
    rows = data.get("case", [])
    if not isinstance(rows, list) or not rows:
        raise PorterError("the suite has no [[case]] entries", path=path)
    cases, seen = [], set()
    for i, row in enumerate(rows):
        where = f"{path} case {i + 1}"
        if not isinstance(row, dict) or not isinstance(row.get("model"), str):
            raise PorterError(f"{where}: each [[case]] needs model = \"NAME\" or \"FILE.py:factory\"")
        model = row["model"]
        ref, _, attr = model.rpartition(":")
        if ref and (ref.endswith(".py") or "/" in ref) and not Path(ref).is_absolute():
            model = f"{(path.parent / ref).resolve()}:{attr}"
        name = str(row.get("name") or row["model"])
        if name in seen:
            raise PorterError(f"{where}: case name {name!r} is used twice (names key the history)")
        seen.add(name)
        stacks = tuple(stacks_override or row.get("stacks", default_stacks))
        case = Case(name, model, stacks, _shapes(row.get("shapes"), where), str(row.get("dtype", "float32")),
                    str(row.get("mode", "inference")), float(row.get("threshold", default_threshold)),
                    _tuned(row.get("tuned"), stacks, where))
        cases.append(_checked(case, where))
    return Suite(str(head.get("name") or path.stem), tuple(cases))


def with_stacks(suite: Suite, stacks: tuple[str, ...]) -> Suite:
    """The suite with every case run on stacks instead (`--on` over a suite file)."""
    return replace(suite, cases=tuple(replace(c, stacks=stacks) for c in suite.cases)) if stacks else suite


__all__ = ["BUILTIN_STACKS", "Case", "DEFAULT_THRESHOLD", "Suite", "builtin_suite", "load_suite", "single_case", "with_stacks"]
