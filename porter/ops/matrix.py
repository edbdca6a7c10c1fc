"""The portability matrix as plain data: ops x stacks, each cell a predicted and a confirmed
status with its evidence. Torch-free, so ops.json can be read, diffed and rendered anywhere.

A row is one op variation: (op overload, input dtypes, shape class). A cell is what one
stack does with it. Statuses (STATUSES) are ordered from best to worst; a stack that is
not installed has no cells, only an entry in ``stacks`` saying why.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from porter.core.atomic import atomic_write_text
from porter.core.errors import PorterError

NATIVE, DECOMPOSED, HOST_FALLBACK, UNSUPPORTED, MISMATCH = (
    "native", "decomposed", "host_fallback", "unsupported", "numerics_mismatch")
STATUSES: tuple[str, ...] = (NATIVE, DECOMPOSED, HOST_FALLBACK, UNSUPPORTED, MISMATCH)
GAPS = frozenset({HOST_FALLBACK, UNSUPPORTED, MISMATCH})  # statuses that cost work to fix
SCHEMA_VERSION = 1


@dataclass
class Verdict:
    """One status with the evidence for it (a registry entry, generated code, an error, a metric)."""

    status: str
    evidence: str = ""
    ops: list[str] = field(default_factory=list)  # what it decomposes into, when decomposed

    def label(self) -> str:
        return f"decomposed(-> {', '.join(self.ops[:4])}{', ...' if len(self.ops) > 4 else ''})" \
            if self.status == DECOMPOSED and self.ops else self.status


@dataclass
class Cost:
    """What closing a gap takes: the catalogue fix, its effort tier and engineer-days."""

    fix_id: str
    title: str
    tier: str
    days: tuple[float, float]
    time_share: float | None = None  # the op's share of the model's time, from a diagnosis


@dataclass
class Cell:
    """One stack's answer for one op variation: predicted from registries, confirmed by running."""

    predicted: Verdict
    confirmed: Verdict | None = None  # None: not run (--all-core-aten predicts only)
    max_rel_l2: float | None = None  # confirmed output vs the fp64 reference
    tolerance: float | None = None
    cost: Cost | None = None

    @property
    def status(self) -> str:
        return (self.confirmed or self.predicted).status

    @property
    def agrees(self) -> bool | None:
        """Prediction == confirmation (None when nothing was run)."""
        return None if self.confirmed is None else self.predicted.status == self.confirmed.status


@dataclass
class OpRow:
    """One op variation of the model (or of core ATen) and its cells per stack."""

    op: str  # overload, e.g. aten.sort.default
    dtypes: list[str]  # input tensor dtypes, in argument order
    shape_class: str  # e.g. "2d" or "2d,1d": ranks of the tensor inputs
    calls: int = 0  # how many calls of the model's forward share this variation
    modules: list[str] = field(default_factory=list)  # module paths that call it (porter convention)
    decomposes_to: list[str] = field(default_factory=list)  # core ATen decomposition, when torch has one
    cells: dict[str, Cell] = field(default_factory=dict)  # stack target text -> cell

    @property
    def key(self) -> str:
        return f"{self.op}[{','.join(self.dtypes)}|{self.shape_class}]"


@dataclass
class StackInfo:
    target: str
    available: bool
    why: str = ""  # when not available: why
    versions: dict[str, str] = field(default_factory=dict)


@dataclass
class Matrix:
    model: str
    mode: str  # "model" (the model's ops, run) or "core-aten" (every core ATen op, predicted)
    stacks: list[StackInfo]
    rows: list[OpRow]
    versions: dict[str, str] = field(default_factory=dict)
    created: str = ""
    seconds: float = 0.0
    command: str = ""  # the command line that made it

    def agreement(self, target: str) -> tuple[int, int]:
        """(cells where prediction == confirmation, cells confirmed) for one stack."""
        judged = [c.agrees for r in self.rows if (c := r.cells.get(target)) and c.agrees is not None]
        return sum(judged), len(judged)

    def counts(self, target: str) -> dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for r in self.rows:
            if target in r.cells:
                out[r.cells[target].status] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}

    def write(self, path: Path) -> Path:
        return atomic_write_text(Path(path), json.dumps(self.to_json(), indent=1) + "\n")


def _verdict(d: dict[str, Any] | None) -> Verdict | None:
    return None if d is None else Verdict(d["status"], d.get("evidence", ""), list(d.get("ops", [])))


def matrix_from_json(data: dict[str, Any]) -> Matrix:
    """The inverse of Matrix.to_json; a wrong schema version is a PorterError."""
    if data.get("schema_version") != SCHEMA_VERSION:
        raise PorterError(f"ops.json schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}",
                          hint="regenerate it with this porter's `porter ops`")
    rows = []
    for r in data["rows"]:
        cells = {}
        for target, c in r.get("cells", {}).items():
            cost = c.get("cost")
            cells[target] = Cell(_verdict(c["predicted"]), _verdict(c.get("confirmed")), c.get("max_rel_l2"),
                                 c.get("tolerance"), Cost(**{**cost, "days": tuple(cost["days"])}) if cost else None)
        rows.append(OpRow(r["op"], list(r["dtypes"]), r["shape_class"], r.get("calls", 0), list(r.get("modules", [])),
                          list(r.get("decomposes_to", [])), cells))
    return Matrix(data["model"], data["mode"], [StackInfo(**s) for s in data["stacks"]], rows,
                  dict(data.get("versions", {})), data.get("created", ""), float(data.get("seconds", 0.0)),
                  str(data.get("command", "")))


def read_matrix(path: Path) -> Matrix:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise PorterError(f"cannot read: {exc.strerror or exc}", path=path) from None
    except json.JSONDecodeError as exc:
        raise PorterError(f"not JSON: {exc}", path=path) from None
    if not isinstance(data, dict) or "rows" not in data:
        raise PorterError("not an ops.json written by `porter ops`", path=path)
    try:
        return matrix_from_json(data)
    except (KeyError, TypeError) as exc:
        raise PorterError(f"damaged ops.json: missing or wrong field {exc}", path=path) from None
