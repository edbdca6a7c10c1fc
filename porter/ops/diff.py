"""Two portability matrices compared (e.g. before and after a torch or jax upgrade): per
(op variation, stack) whose status changed, better or worse, and stacks that came or went."""

from __future__ import annotations

from dataclasses import dataclass

from porter.ops.matrix import STATUSES, Matrix


@dataclass(frozen=True)
class Change:
    key: str  # the op variation (OpRow.key)
    target: str
    before: str  # a status, or "absent"
    after: str

    @property
    def direction(self) -> str:
        rank = {s: i for i, s in enumerate(STATUSES)}
        if self.before not in rank or self.after not in rank:
            return "added" if self.before == "absent" else "removed"
        return "better" if rank[self.after] < rank[self.before] else "worse"


def diff_matrices(a: Matrix, b: Matrix) -> list[Change]:
    """Every (op variation, stack) whose status differs between a and b, in b's row order."""
    def cells(m: Matrix) -> dict[tuple[str, str], str]:
        return {(r.key, t): c.status for r in m.rows for t, c in r.cells.items()}

    before, after = cells(a), cells(b)
    keys = list(dict.fromkeys([*after, *before]))
    return [Change(k, t, before.get((k, t), "absent"), after.get((k, t), "absent"))
            for k, t in keys if before.get((k, t)) != after.get((k, t))]


def version_changes(a: Matrix, b: Matrix) -> dict[str, tuple[str, str]]:
    names = sorted(set(a.versions) | set(b.versions))
    return {n: (a.versions.get(n, "-"), b.versions.get(n, "-")) for n in names if a.versions.get(n) != b.versions.get(n)}
