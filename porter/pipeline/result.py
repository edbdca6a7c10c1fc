"""One diagnosis between the analysis and diagnosis.json: the typed result that
porter.pipeline.diagnose builds and porter.pipeline.document serialises, and the kind of pair it
is, decided once so that no step tells a live pair from a recorded one on its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import pandas as pd

from porter.analysis.align import Alignment
from porter.analysis.attribute import EndToEnd
from porter.bundles.bundle import Bundle, has_activations
from porter.core.run import Run

# A diagnosis.json block built by the module that names it (docs/diagnosis.md describes each):
# its keys are that module's contract, not this one's.
Block = dict[str, Any]
# The blocks a Diagnosis once held in one untyped dict, by their diagnosis.json names.
BLOCKS = ("busy", "roofline", "accuracy", "fixes", "plan", "headline", "pair_check", "portability", "confirmed", "warnings", "command")
# The tables diagnosis.json carries per unprofiled step on a live pair (porter.analysis.headline.scaled_to_step).
STEP_TABLES = ("groups", "by_module", "by_module_kind", "by_class", "by_framework_op", "by_op_shape")


def model_fingerprint(manifest: Mapping[str, Any]) -> str | None:
    """The model fingerprint a live capture records, None for a recorded trace."""
    model = manifest.get("model")
    if isinstance(model, dict) and model.get("fingerprint"):
        return str(model["fingerprint"])
    fp = manifest.get("model_fingerprint")
    return str(fp) if fp else None


@dataclass(frozen=True)
class Pair:
    """What the two runs are. Alignment, the pair check and accuracy each treat live pairs
    differently, and each used to decide "live" its own way; they read this instead."""

    same_model: bool  # both record one model fingerprint: low overlap is for the analysis to explain
    identity: bool  # ... and both are porter's own captures: their ops carry the same module tags
    here: bool  # both were captured by this run: their stacks are here (every module's error is measured)
    activations: bool  # both saved module activations: accuracy is measured (torch is needed)

    @classmethod
    def of(cls, source: Bundle, target: Bundle, *, here: bool = False) -> Pair:
        fs, ft = model_fingerprint(source.manifest), model_fingerprint(target.manifest)
        same = bool(fs) and fs == ft
        captures = source.manifest.get("kind") == target.manifest.get("kind") == "capture"
        return cls(same_model=same, identity=same and captures, here=here,
                   activations=has_activations(source) and has_activations(target))


@dataclass
class Diagnosis:
    """The analysis of one source/target pair, complete before anything is written."""

    source: Bundle
    target: Bundle
    runs: tuple[Run, Run]  # the two bundles as the per-run analyses take them (porter.core.run)
    pair: Pair
    alignment: Alignment
    e2e: EndToEnd
    groups: pd.DataFrame  # with each group's op ids, and per-step times on a live pair
    by_module: pd.DataFrame
    by_module_kind: pd.DataFrame
    by_class: pd.DataFrame
    by_framework_op: pd.DataFrame
    unmatched: dict[str, pd.DataFrame]
    by_op_shape: pd.DataFrame = field(default_factory=pd.DataFrame)  # filled with the roofline
    busy: Block | None = None  # porter.analysis.busy.busy_block
    roofline: Block | None = None  # porter.analysis.roofline.roofline_block
    accuracy: Block | None = None  # porter.accuracy.live.accuracy_block; None for recorded traces
    fixes: list[Block] = field(default_factory=list)  # porter.analysis.fixplan.fix_plan: every source, ranked once
    plan: Block | None = None  # porter.analysis.plan.Plan.to_dict: the fixes that add up, and their sums
    headline: Block | None = None  # porter.analysis.headline.headline
    pair_check: Block | None = None  # porter.analysis.paircheck.check_pair, plus same_model_fingerprint and forced
    portability: Block | None = None  # porter.ops.in_diagnosis.portability_block (diagnose --ops)
    confirmed: Block | None = None  # porter.pipeline.confirmation.confirm_block (--confirm N)
    module_map: Block | None = None  # a model and its rewrite: target modules paired by parameters (porter.analysis.modulemap)
    warnings: list[str] = field(default_factory=list)
    command: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def coverage(self) -> dict[str, float]:
        return self.alignment.coverage()

    @property
    def extras(self) -> Mapping[str, Any]:
        """The blocks by name, read-only: for callers written against the old dict of extras."""
        return MappingProxyType({name: getattr(self, name) for name in BLOCKS})
