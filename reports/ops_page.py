"""ops.json (written by `porter ops`) -> ops.html (one self-contained, filterable matrix:
ops x stacks coloured by status) and ops.md. Reads the JSON only, like the diagnosis reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from porter.core.atomic import atomic_write_text
from porter.core.units import fmt_days
from reports.render import environment

STATUS_ORDER = ("native", "decomposed", "host_fallback", "unsupported", "numerics_mismatch")


@dataclass
class CellView:
    status: str
    label: str  # status, with decomposition targets
    evidence: str
    predicted: str
    agrees: bool | None
    cost: str = ""


@dataclass
class RowView:
    op: str
    dtypes: str
    shape_class: str
    calls: int
    modules: str
    cells: list[CellView | None] = field(default_factory=list)  # one per stack, None: not available

    @property
    def statuses(self) -> str:
        return " ".join(sorted({c.status for c in self.cells if c}))


def _label(v: dict[str, Any]) -> str:
    ops = v.get("ops") or []
    if v["status"] == "decomposed" and ops:
        return f"decomposed(-> {', '.join(ops[:4])}{', ...' if len(ops) > 4 else ''})"
    return v["status"]


def _cost(c: dict[str, Any] | None) -> str:
    if not c:
        return ""
    share = f", {c['time_share'] * 100:.1f}% of model time" if c.get("time_share") is not None else ""
    return f"{c['title']} [{c['tier']}, {fmt_days(c['days'][0], c['days'][1])}]{share}"


def cell_view(c: dict[str, Any]) -> CellView:
    shown = c.get("confirmed") or c["predicted"]
    agrees = None if c.get("confirmed") is None else c["predicted"]["status"] == c["confirmed"]["status"]
    return CellView(shown["status"], _label(shown), shown.get("evidence", ""), _label(c["predicted"]), agrees, _cost(c.get("cost")))


def page_data(data: dict[str, Any]) -> dict[str, Any]:
    """Everything the templates show, derived from ops.json."""
    stacks = data["stacks"]
    rows = [RowView(r["op"], ", ".join(r["dtypes"]), r["shape_class"], r.get("calls", 0), ", ".join(m or "(root)" for m in r.get("modules", [])),
                    [cell_view(r["cells"][s["target"]]) if s["target"] in r.get("cells", {}) else None for s in stacks])
            for r in data["rows"]]
    summary = []
    for i, s in enumerate(stacks):
        cells = [r.cells[i] for r in rows if r.cells[i]]
        counts = {st: sum(1 for c in cells if c.status == st) for st in STATUS_ORDER}
        judged = [c.agrees for c in cells if c.agrees is not None]
        summary.append({"target": s["target"], "available": s["available"], "why": s.get("why", ""), "counts": counts,
                        "agree": sum(judged), "judged": len(judged),
                        "versions": ", ".join(f"{k} {v}" for k, v in s.get("versions", {}).items())})
    return {"model": data["model"], "mode": data["mode"], "created": data.get("created", ""), "command": data.get("command", ""),
            "seconds": data.get("seconds", 0.0), "versions": data.get("versions", {}), "stacks": summary,
            "rows": rows, "statuses": STATUS_ORDER}


def render_ops(data: dict[str, Any], fmt: str) -> str:
    env = environment()
    return env.get_template(f"ops.{fmt}.j2").render(**page_data(data))


def write_ops_pages(data: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [atomic_write_text(out_dir / f"ops.{fmt}", render_ops(data, fmt)) for fmt in ("html", "md")]
