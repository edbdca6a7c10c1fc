"""Which module of one model is which of another: a PyTorch model and its JAX rewrite pair their
modules by their parameters, whatever each framework calls them.

Each capture records, per module, a signature of its own parameters (porter.capture.models
module_param_signatures): per parameter its shape sorted (a torch Linear's [out, in] weight is
a Flax kernel's [in, out]) and its sum and sum of squares (both blind to a transpose), rounded
to 3 significant digits so a port in another dtype still matches. Modules whose signatures are
equal pair; several with one signature (every block's LayerNorm starts at ones and zeros) pair
in module order. A module with no parameters of its own (a block, an attention) pairs with the
deepest module holding the images of all its paired descendants.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from porter.core.tags import common_path

SIG_DIGITS = 3
MAPPED_ENOUGH = 0.95  # of the parameterised modules: below this the models are not one model rewritten


@dataclass(frozen=True)
class ModuleMap:
    """target path -> source path, and what stayed unpaired on each side."""

    mapping: dict[str, str]
    by_parameters: int  # pairs made by equal parameter signatures
    by_containment: int  # parameter-free modules paired through their descendants
    parameterised: tuple[int, int]  # modules with parameters: (source, target)
    unmatched_source: tuple[str, ...] = field(default=())
    unmatched_target: tuple[str, ...] = field(default=())

    @property
    def share(self) -> float:
        """Paired modules with parameters over the larger side's count."""
        n = max(self.parameterised)
        return self.by_parameters / n if n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"by": "parameters", "pairs": len(self.mapping), "by_parameters": self.by_parameters,
                "by_containment": self.by_containment, "parameterised": list(self.parameterised),
                "share": self.share, "mapping": dict(sorted(self.mapping.items())),
                "unmatched_source": list(self.unmatched_source), "unmatched_target": list(self.unmatched_target)}


def _round(x: float) -> float:
    if x == 0 or not math.isfinite(x):
        return 0.0 if x == 0 else x
    return round(x, SIG_DIGITS - 1 - int(math.floor(math.log10(abs(x)))))


def signature_key(params: Iterable[Sequence[Any]]) -> tuple:
    """A module's parameters as one hashable key: per parameter (sorted shape, sum, sum of squares)."""
    return tuple(sorted((tuple(sorted(int(d) for d in shape)), _round(float(s)), _round(float(q)))
                        for shape, s, q in params))


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def build_map(source: Sequence[tuple[str, list]], target: Sequence[tuple[str, list]]) -> ModuleMap:
    """source/target: (module path, its parameter signatures) for every module, in module order."""
    src_keys: dict[tuple, list[str]] = {}
    tgt_keys: dict[tuple, list[str]] = {}
    for path, params in source:
        if params:
            src_keys.setdefault(signature_key(params), []).append(path)
    for path, params in target:
        if params:
            tgt_keys.setdefault(signature_key(params), []).append(path)
    mapping = {t: s for key, tgts in tgt_keys.items() for t, s in zip(tgts, src_keys.get(key, []))}
    by_params = len(mapping)
    src_paths = [p for p, _ in source]
    for path, params in target:  # containers: the deepest source module over all their descendants' images
        if params or path in mapping or not path:
            continue
        images = [s for t, s in list(mapping.items()) if t.startswith(path + "/")]
        if not images:
            continue
        common = common_path(images)
        while common and common not in src_paths:
            common = _parent(common)
        if common and common not in mapping.values():
            mapping[path] = common
    by_cont = len(mapping) - by_params
    paired_src = set(mapping.values())
    n_src = sum(1 for _, p in source if p)
    n_tgt = sum(1 for _, p in target if p)
    return ModuleMap(mapping, by_params, by_cont, (n_src, n_tgt),
                     tuple(p for p, _ in source if p not in paired_src), tuple(p for p, _ in target if p not in mapping))


def renamed(path: str, mapping: dict[str, str]) -> str:
    """A target module path in the source's names (unpaired paths as they are)."""
    return mapping.get(path, path)


def renamed_members(members: str, mapping: dict[str, str]) -> str:
    """ops.members JSON with each member's module in the source's names."""
    if not members:
        return members
    try:
        rows = json.loads(members)
    except ValueError:
        return members
    return json.dumps([[renamed(str(r[0]), mapping), *r[1:]] for r in rows])
