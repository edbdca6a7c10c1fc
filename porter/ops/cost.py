"""The cost of each gap, from the fix catalogue (porter/data/fixes.toml, entries whose
applies_when names an ``op_status``): which fix closes it, its effort tier and engineer-days,
and, where a diagnosis of the model exists, the op's share of the model's time."""

from __future__ import annotations

from typing import Mapping

from porter.analysis.fixes import Catalogue, applies
from porter.ops.matrix import GAPS, Cost, Matrix


def gap_cost(status: str, has_decomposition: bool, catalogue: Catalogue) -> Cost | None:
    """The first catalogue fix whose conditions hold for this status, or None (no gap)."""
    if status not in GAPS:
        return None
    symptoms = {"op_status": status, "has_decomposition": has_decomposition}
    for fix in catalogue.fixes:
        if "op_status" in fix.applies_when and applies(fix.applies_when, symptoms):
            return Cost(fix.id, fix.title, fix.tier, fix.days)
    return None


def cost_matrix(matrix: Matrix, catalogue: Catalogue, time_share: Mapping[str, float] | None = None) -> Matrix:
    """Fill every gap cell's cost in place; time_share maps an op name (aten.sort.default or
    aten::sort) to its share of the model's time."""
    shares = {k.replace("::", ".").split(".")[1] if "." in k.replace("::", ".") else k: v
              for k, v in (time_share or {}).items()}
    for row in matrix.rows:
        for cell in row.cells.values():
            cell.cost = gap_cost(cell.status, bool(row.decomposes_to), catalogue)
            if cell.cost is not None:
                base = row.op.split(".")[1] if "." in row.op else row.op
                cell.cost.time_share = shares.get(base)
    return matrix
