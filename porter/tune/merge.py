"""A tune's measurements carried into the diagnosis it tuned (`porter diagnose --tune`):
diagnosis.json gains a `tried` block (each recipe's estimated and measured recovery, its
interval, accuracy and whether it was kept; the best combination; measured / estimated per
fix), and each fix a recipe measured gets `measured` and confidence "measured", so the fix
plan says what was tried beside what is estimated. The plan's totals stay the estimate's:
a recipe's recovery is what it saved on the whole forward, not what it closed of its groups'
gap, so the two are shown side by side, never summed together."""

from __future__ import annotations

from typing import Any


def _measured(c: dict[str, Any]) -> dict[str, Any] | None:
    if c.get("status") != "measured":
        return None
    r = c.get("recovered_us") or {}
    lo, hi = (r.get("ci95") or [None, None])[:2]
    return {"value": r.get("value"), "ci95": [lo, hi]}


def tried_block(tune_doc: dict[str, Any], folder: str) -> dict[str, Any]:
    """diagnosis.json `tried`: what the tune in `folder` (relative to the diagnosis) measured."""
    rows = []
    for c in tune_doc.get("candidates") or []:
        acc = c.get("accuracy") or {}
        rows.append({"fix_id": c.get("fix_id"), "recipe": c.get("recipe"), "status": c.get("status"),
                     "estimated_us": c.get("estimated_us"), "recovered_us": _measured(c),
                     "rel_l2": acc.get("rel_l2"), "within_tolerance": acc.get("within_tolerance"),
                     "kept": bool(c.get("kept")), "why": c.get("why") or "",
                     "holm_p": (c.get("holm") or {}).get("p")})
    calibration = [{"fix_id": r["fix_id"], "recipe": r["recipe"], "estimated_us": r["estimated_us"],
                    "measured_us": r["recovered_us"]["value"],
                    "measured_over_estimated": r["recovered_us"]["value"] / r["estimated_us"]}
                   for r in rows if r["recovered_us"] and r["recovered_us"]["value"] is not None
                   and isinstance(r["estimated_us"], (int, float)) and r["estimated_us"] > 0]
    best = tune_doc.get("best")
    return {"folder": folder, "status": tune_doc.get("status"), "budget_s": tune_doc.get("budget_s"),
            "elapsed_s": tune_doc.get("elapsed_s"), "tolerance": tune_doc.get("tolerance"),
            "search": tune_doc.get("search"), "candidates": rows, "calibration": calibration,
            "best": None if not best else {"recipes": best.get("recipes"), "measured": best.get("measured"),
                                           "recovered_us": best.get("recovered_us")},
            "findings": list(tune_doc.get("findings") or [])}


def merge_tune(diagnosis: dict[str, Any], tune_doc: dict[str, Any], folder: str) -> dict[str, Any]:
    """The diagnosis with `tried` set and its measured fixes marked (a new dict; fixes copied)."""
    block = tried_block(tune_doc, folder)
    by_fix: dict[str, dict[str, Any]] = {}
    for r in block["candidates"]:
        if r["recovered_us"] is None:
            continue
        best = by_fix.get(r["fix_id"])
        if best is None or (r["kept"], r["recovered_us"]["value"] or 0) > (best["kept"], best["recovered_us"]["value"] or 0):
            by_fix[r["fix_id"]] = r
    fixes = []
    for fix in diagnosis.get("fixes") or []:
        r = by_fix.get(fix.get("fix_id")) if isinstance(fix, dict) and fix.get("kind") != "accuracy" else None
        if r is not None:
            fix = {**fix, "confidence": "measured", "estimated_confidence": fix.get("confidence"),
                   "measured": {"recipe": r["recipe"], "recovered_us": r["recovered_us"]["value"],
                                "ci95": r["recovered_us"]["ci95"], "kept": r["kept"]}}
        fixes.append(fix)
    return {**diagnosis, "fixes": fixes, "tried": block}


__all__ = ["merge_tune", "tried_block"]
