"""`porter ops` inside `porter diagnose`: the target stack's portability matrix for the model
that was captured, reduced to the ops worth flagging (fell back, unsupported, mismatched,
or decomposed into many ops), each with its catalogue cost, the op's share of the target's
time in the diagnosis, and a fix-plan record in the diagnosis's `fixes` format."""

from __future__ import annotations

import math
from typing import Any, Iterable

from porter.analysis.fixes import Catalogue, load_catalogue
from porter.analysis.fixrank import fix_title
from porter.core.stacks import ops_stacks
from porter.ops.build import build_matrix
from porter.ops.cost import cost_matrix
from porter.ops.inventory import inventory
from porter.ops.matrix import DECOMPOSED, GAPS, Matrix

MANY_OPS = 4  # a decomposition into at least this many distinct ops is flagged (fusion may suffer)


def op_key(name: str) -> str:
    """'aten.sort.default' / 'aten::sort' / 'aten::sort.stable' -> 'sort'."""
    text = str(name).replace("::", ".")
    parts = text.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def time_shares(by_framework_op: Iterable[dict[str, Any]]) -> dict[str, float]:
    """op key -> share of the target's attributed time (from the diagnosis's by_framework_op)."""
    rows = list(by_framework_op)
    total = sum(float(r.get("target_us") or 0.0) for r in rows)
    out: dict[str, float] = {}
    for r in rows:
        key = op_key(r.get("key") or r.get("framework_op") or "")
        if total > 0 and key:
            out[key] = out.get(key, 0.0) + float(r.get("target_us") or 0.0) / total
    return out


def flagged(matrix: Matrix, target: str) -> list[dict[str, Any]]:
    """diagnosis.json `portability` records: one per flagged op variation on the target."""
    out = []
    for row in matrix.rows:
        cell = row.cells.get(target)
        if cell is None:
            continue
        many = cell.status == DECOMPOSED and len((cell.confirmed or cell.predicted).ops) >= MANY_OPS
        if cell.status not in GAPS and not many:
            continue
        v = cell.confirmed or cell.predicted
        out.append({
            "op": row.op, "dtypes": row.dtypes, "shape_class": row.shape_class, "calls": row.calls,
            "modules": row.modules, "target": target, "status": v.status, "label": v.label(),
            "evidence": v.evidence, "predicted": cell.predicted.status, "agrees": cell.agrees,
            "fix_id": cell.cost.fix_id if cell.cost else None, "fix_title": cell.cost.title if cell.cost else None,
            "tier": cell.cost.tier if cell.cost else None, "days": list(cell.cost.days) if cell.cost else None,
            "time_share": cell.cost.time_share if cell.cost else None,
        })
    return out


def fix_records(records: list[dict[str, Any]], catalogue: Catalogue, first_rank: int) -> list[dict[str, Any]]:
    """One fix-plan record per (fix, op) gap, in the diagnosis `fixes` format."""
    out = []
    for r in records:
        if not r["fix_id"]:
            continue
        fix = catalogue.get(r["fix_id"])
        out.append({
            "rank": first_rank + len(out), "kind": fix.kind, "fix_id": fix.id,
            "title": fix_title(fix.title, [r["op"]], [m for m in r["modules"] if m] or [""]),
            "catalogue_title": fix.title, "tier": fix.tier,
            "days": list(fix.days), "modules": [m for m in r["modules"] if m] or [""], "op_classes": [],
            "ops": [r["op"]], "group_ids": [],
            "why": f"{fix.why} (porter ops: {r['op']} is {r['status']} on {r['target']}: {r['evidence']})",
            "first_step": fix.first_step, "recoverable_us": math.nan, "demonstrated_us": math.nan,
            "priority": math.nan, "severity": math.nan, "confidence": "high" if r["agrees"] is not False else "medium",
            "evidence": [f"ran {r['op']} alone on {r['target']}: {r['status']}"],
        })
    return out


def portability_block(model: Any, target_manifest: dict[str, Any], by_framework_op: Iterable[dict[str, Any]],
                      catalogue: Catalogue | None = None) -> dict[str, Any] | None:
    """The diagnosis's `portability` block for a live-captured model on its target stack, or
    None when the stack is one porter ops cannot read (eager torch)."""
    target = str(target_manifest.get("text") or "")
    if target_manifest.get("stack") not in ops_stacks() or not target:
        return None
    catalogue = catalogue or load_catalogue()
    variants = inventory(model.module, model.example_inputs, model.name)
    matrix = build_matrix(model.name, variants, [target], catalogue=None)
    cost_matrix(matrix, catalogue, time_shares(by_framework_op))
    records = flagged(matrix, target)
    agree, judged = matrix.agreement(target)
    return {"target": target, "ops_checked": len(matrix.rows), "counts": matrix.counts(target),
            "agreement": [agree, judged], "flagged": records, "seconds": matrix.seconds}
