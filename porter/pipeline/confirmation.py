"""The diagnosis's `confirmed` block: its largest module gaps re-timed alone on both stacks
(porter.capture.confirm), and what the rest of the diagnosis takes from it.

Chosen: the N modules with the largest gap per unprofiled step (diagnosis.json by_module on a
live pair), or with `--confirm all` every module whose profiled gap is significant, the root
excluded (it is the whole model); listed by their gap alone, largest loss first (a fused kernel
charged to a neighbour can hide the real loss in the profile, and the alone timing brings it
back to the top). Each keeps its profiled gap and interval beside the confirmed one.

What the rest of the diagnosis takes from it (apply_confirmed): by_module carries each re-timed
module's gap alone and its interval (alone_gap_us, alone_low_us, alone_high_us) and an
`evidence` column; a module is significant only where the alone timing bears its profiled gap
out (interval excluding zero, same sign) and sizes it (the interval no wider than the gap
itself, SIZED_WIDTH). A profiled gap that alone timing does not reproduce
(BERT-base's output dense layers: +1.7 ms per layer in XLA's own in-model event, equal alone
within 10%) is "not reproduced alone", and marked within noise in by_module and in the groups
of that module, so that the summary and the fix plan (porter.analysis.fixrank) rank only gaps
that hold on both measurements. A gap that holds but whose size the alone timing cannot say
(GPT-2's MLP GEMMs on XLA: -143 us in [-191, -18], per-call noise of 5% on a 3.5 ms GEMM) is
"not sized alone" and left unranked the same way: ranking it would put a number on the plan
that a rerun could halve or double (against porter's own bar, gaps within 1.5x of the module
timed alone). The rankings then read each confirmed module's gap alone in place of its profiled
one (ranked_gaps): the alone timing is the one measurement of the module itself.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Mapping

from porter.core.errors import PorterError

if TYPE_CHECKING:  # the CLI parses --confirm from here before pandas loads
    import pandas as pd

    from porter.pipeline.result import Diagnosis

Progress = Any

CONFIRM_ALL = -1  # `--confirm all`: every module whose profiled gap is significant
ALL_BUDGET_S = 90.0  # repeats stop early past this with --confirm all (at least 10 are taken)
EVIDENCE = {"confirmed": "confirmed alone", "quiet": "not reproduced alone", "opposite": "opposite sign alone",
            "unsized": "not sized alone", "error": "not replayed", "profiled": "profiled",
            "whole": "whole module alone, same sign", "whole_opposite": "whole module alone, opposite sign",
            "whole_quiet": "whole module alone, within noise"}
NOT_BORNE_OUT = ("quiet", "opposite", "unsized")  # within noise wherever the diagnosis ranks
# a confirmed gap's 95% interval may be at most as wide as the gap (about +-50%): wider, and its
# size is unknown to within the 1.5x that ranking modules needs (measured on gpt2_base -> xla,
# BENCHMARKS.md: of 48 reported gaps, the 37 that pass read 26 within 1.5x of the script's alone
# timing and 2 phantoms, against 28 and 7 of all 48; six pairs on 2026-12-06: 42 of 43 reported
# gaps within 1.5x, no phantom, at the cost of 12 gaps left unsized, 8 of them real RMSNorm gaps)
SIZED_WIDTH = 1.0


EFFORT_ENV = (("repeats", "PORTER_CONFIRM_REPEATS", int), ("budget_s", "PORTER_CONFIRM_BUDGET_S", float))


def effort_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """The PORTER_CONFIRM_REPEATS / PORTER_CONFIRM_BUDGET_S that are set, as numbers; a
    PorterError on a value that is not a positive number. Imports no stack: the CLI checks them
    before any capture, a recorded pair's diagnosis included."""
    out: dict[str, Any] = {}
    for key, name, kind in EFFORT_ENV:
        text = (env.get(name) or "").strip()
        if text:
            try:
                value = kind(text)
            except ValueError:
                value = 0
            if not value > 0:
                raise PorterError(f"{name} must be a positive {kind.__name__}, not {text!r}",
                                  hint=f"unset it for the default, or give e.g. {name}=60")
            out[key] = value
    return out


def confirm_effort(n: int, env: Mapping[str, str]) -> dict[str, Any]:
    """The repeats and budget of a confirmation: PORTER_CONFIRM_REPEATS and
    PORTER_CONFIRM_BUDGET_S where set (effort_from_env), else the defaults. More repeats narrow
    each module's interval: at 30 repeats bert_base's 35 us attention-layer gaps read +-10-20 us
    alone, too coarse to size them within 1.5x."""
    from porter.capture.confirm import BUDGET_S, REPEATS

    return {"repeats": REPEATS, "budget_s": ALL_BUDGET_S if n == CONFIRM_ALL else BUDGET_S, **effort_from_env(env)}


def parse_confirm(text: str) -> int:
    """`--confirm`'s value: a count of modules, or 'all' (CONFIRM_ALL); ValueError otherwise."""
    if text.strip().lower() == "all":
        return CONFIRM_ALL
    n = int(text)
    if n < 0:
        raise ValueError(text)
    return n


def suspects(by_module: pd.DataFrame, n: int, kinds: pd.DataFrame | None = None) -> list[str]:
    """The n modules with the largest |gap| per unprofiled step (the profiled total where there
    is no per-step column), the root ('') left out; n = CONFIRM_ALL: every module whose profiled
    gap is significant, or whose kind's is (kinds: by_module_kind; twelve layers' small gaps can
    add up to a significant one), in the same order."""
    if n == 0 or by_module.empty:
        return []
    rows = by_module[by_module["key"] != ""]
    if n == CONFIRM_ALL:
        if "significant" not in rows.columns:
            return []
        from porter.analysis.attribute import module_kind

        loud = set() if kinds is None or "significant" not in kinds.columns else set(
            kinds.loc[kinds["significant"].fillna(False).astype(bool).to_numpy(), "key"].astype(str))
        own = rows["significant"].fillna(False).astype(bool).to_numpy()
        of_kind = rows["key"].astype(str).map(lambda k: module_kind(k) in loud).to_numpy(bool)
        rows = rows[own | of_kind]
        n = len(rows)
    if "source_step_us" in rows.columns:
        gap = (rows["target_step_us"] - rows["source_step_us"]).abs()
    else:
        gap = rows["delta_us"].abs()
    return rows.assign(_g=gap.to_numpy()).sort_values("_g", ascending=False)["key"].head(n).astype(str).tolist()


def confirm_block(d: Diagnosis, model: Any, n: int, cpu_clock: bool, progress: Progress) -> dict[str, Any] | None:
    """Re-time the suspects alone when both stacks are here (a live pair run by this process)
    and the target runs the model as given (not a precision port); None otherwise."""
    if n == 0 or model is None or not d.pair.here or d.target.manifest.get("precision"):
        return None
    from porter.capture.confirm import confirm

    paths = suspects(d.by_module, n, d.by_module_kind)
    if not paths:
        return None
    stacks = [str((b.manifest.get("target") or {}).get("stack") or "") for b in (d.source, d.target)]
    progress(f"confirming the {len(paths)} largest module gaps: each module alone on both stacks")
    t0 = time.perf_counter()
    done = confirm(model.module, model.example_inputs, paths, stacks[0], stacks[1], cpu_clock=cpu_clock,
                   **confirm_effort(n, os.environ))
    profiled = d.by_module.set_index("key")
    rows = []
    for c in done:
        p = profiled.loc[c.module] if c.module in profiled.index else None
        # timed whole: held against its profiled gap and its modules' summed, which has no interval
        whole = bool(c.inside)
        rows.append({**c.to_dict(), "profiled_gap_us": _subtree_gap(d.by_module, c.module) if whole else _step_gap(p),
                     "profiled_low_us": None if whole else _get(p, "gap_low_us"),
                     "profiled_high_us": None if whole else _get(p, "gap_high_us"),
                     "profiled_significant": bool(_get(p, "significant"))})
        rows[-1]["evidence"] = EVIDENCE[verdict(rows[-1])]
    # ranked by the gap alone, largest loss first, then wins, then the modules timed whole, then what
    # could not be replayed: the profiled ranking chose them, the alone timing orders them
    rows.sort(key=lambda r: (bool(r["error"]), bool(r.get("inside")), not r["significant"],
                             -(r["gap_us"] if r["gap_us"] == r["gap_us"] else 0.0)))
    d.seconds["confirm"] = time.perf_counter() - t0
    return {"clock": "cpu" if cpu_clock else "wall", "stacks": stacks, "modules": rows,
            "chosen": "every significant module" if n == CONFIRM_ALL else f"the {n} largest module gaps",
            "method": "each module alone on both stacks with the arguments it got in one forward, every call, "
                      "interleaved, less each call's floor; median over repeats, 95% order-statistic interval"}


def verdict(row: dict[str, Any]) -> str:
    """EVIDENCE's key for one re-timed module: does its gap alone bear the profiled gap out, and
    say how large it is?"""
    if row["error"]:
        return "error"
    if row.get("inside"):  # timed whole: says nothing of its self time's gap, only of the whole's sign
        if not row["significant"]:
            return "whole_quiet"
        return "whole" if (row["profiled_gap_us"] or 0.0) * row["gap_us"] > 0 else "whole_opposite"
    if not row["significant"]:
        return "quiet"
    if (row["profiled_gap_us"] or 0.0) * row["gap_us"] <= 0:
        return "opposite"
    return "confirmed" if row["gap_high_us"] - row["gap_low_us"] <= SIZED_WIDTH * abs(row["gap_us"]) else "unsized"


def apply_confirmed(d: Diagnosis, block: dict[str, Any]) -> None:
    """by_module gets each re-timed module's gap alone and its evidence; a module whose gap
    alone holds zero, has the other sign or is not sized is within noise everywhere the
    diagnosis ranks."""
    said = {r["module"]: (verdict(r), r) for r in block["modules"] if not r.get("inside")}  # self times only
    bm = d.by_module
    keys = bm["key"].astype(str).to_numpy()
    nan = float("nan")
    alone = {c: [said[k][1][src] if k in said and said[k][0] != "error" else nan for k in keys]
             for c, src in (("alone_gap_us", "gap_us"), ("alone_low_us", "gap_low_us"), ("alone_high_us", "gap_high_us"))}
    evidence = [EVIDENCE[said[k][0]] if k in said else EVIDENCE["profiled"] for k in keys]
    d.by_module = bm.assign(**alone, evidence=evidence)
    sized = {k: r for k, (v, r) in said.items() if v == "confirmed"}
    d.by_module, d.by_module_kind = ranked_gaps(d.by_module, getattr(d, "by_module_kind", None), sized)
    quiet = {k for k, (v, _) in said.items() if v in NOT_BORNE_OUT}
    if not quiet:
        return
    for name in ("by_module", "groups"):
        t = getattr(d, name)
        key = "key" if name == "by_module" else "module"
        if "significant" in t.columns:
            hit = t[key].isin(quiet).to_numpy()
            setattr(d, name, t.assign(significant=t["significant"].to_numpy() & ~hit))
    _quiet_kinds(d, quiet, set(said) - quiet)


def _step_sides(t: pd.DataFrame) -> tuple[Any, Any]:
    """Each side's time per unprofiled step where the table has it, else its profiled total."""
    if "source_step_us" in t.columns:
        return t["source_step_us"].to_numpy(float), t["target_step_us"].to_numpy(float)
    return t["source_us"].to_numpy(float), t["target_us"].to_numpy(float)


def ranked_gaps(by_module: pd.DataFrame, kinds: pd.DataFrame | None,
                sized: Mapping[str, Mapping[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The times the rankings read (ranked_source_us, ranked_target_us, ranked_gap_us): a module's
    alone timing where it confirmed and sized the profiled gap (sized: module -> its confirmed row),
    else its profiled time per step; a kind's, its profiled times with each sized member's alone
    timing in place of its profiled one. Beside a busy loop, resnet_median's embedder convolution
    read +1495 us profiled per step and +724 [+691, +948] alone, the planted median's module +1379
    profiled and +1499 alone (whole): ranked by the profile, the convolution came first."""
    s, t = _step_sides(by_module)
    keys = by_module["key"].astype(str).tolist()
    rs = [float(sized[k].get("source_us", v)) if k in sized else float(v) for k, v in zip(keys, s)]
    rg = [float(sized[k]["gap_us"]) if k in sized else float(b - a) for k, a, b in zip(keys, s, t)]
    rt = [a + g for a, g in zip(rs, rg)]  # the median gap over repeats, not the medians' difference
    by_module = _by_rank(by_module.assign(ranked_source_us=rs, ranked_target_us=rt, ranked_gap_us=rg))
    if kinds is None or kinds.empty or not {"source_step_us", "source_us"} & set(kinds.columns):
        return by_module, kinds
    from porter.analysis.attribute import module_kind

    shift: dict[str, list[float]] = {}  # kind -> what its sized members' alone timings change, per side and gap
    for k, a, b, ra, rb, g in zip(keys, s, t, rs, rt, rg):
        if k in sized:
            by = shift.setdefault(module_kind(k), [0.0, 0.0, 0.0])
            by[0], by[1], by[2] = by[0] + ra - a, by[1] + rb - b, by[2] + g - (b - a)
    ks, kt = _step_sides(kinds)
    moved = [shift.get(k, [0.0, 0.0, 0.0]) for k in kinds["key"].astype(str)]
    return by_module, _by_rank(kinds.assign(ranked_source_us=ks + [m[0] for m in moved],
                                            ranked_target_us=kt + [m[1] for m in moved],
                                            ranked_gap_us=kt - ks + [m[2] for m in moved]))


def _by_rank(t: pd.DataFrame) -> pd.DataFrame:
    """Largest ranked loss first, as the profiled tables are written largest loss first."""
    return t.sort_values("ranked_gap_us", ascending=False, kind="stable").reset_index(drop=True)


def _quiet_kinds(d: Diagnosis, quiet: set[str], kept: set[str]) -> None:
    """A module kind is within noise when every one of its instances was re-timed and none bore
    its profiled gap out (one unconfirmed instance keeps the kind's profiled verdict)."""
    kinds = getattr(d, "by_module_kind", None)
    if kinds is None or kinds.empty or "significant" not in kinds.columns:
        return
    from porter.analysis.attribute import module_kind

    members: dict[str, list[str]] = {}
    for k in d.by_module["key"].astype(str):
        if k:
            members.setdefault(module_kind(k), []).append(k)
    dead = {kind for kind, ks in members.items() if all(k in quiet for k in ks) and not any(k in kept for k in ks)}
    hit = kinds["key"].astype(str).isin(dead).to_numpy()
    d.by_module_kind = kinds.assign(significant=kinds["significant"].to_numpy() & ~hit)


def _subtree_gap(by_module: pd.DataFrame, path: str) -> float:
    """The profiled gap of a module and every module inside it, summed (per unprofiled step where
    by_module has it): what the module timed whole is held against."""
    keys = by_module["key"].astype(str)
    rows = by_module[(keys == path) | keys.str.startswith(f"{path}/")]
    if "source_step_us" in rows.columns:
        return float((rows["target_step_us"] - rows["source_step_us"]).sum())
    return float(rows["delta_us"].sum())


def _step_gap(p: Any) -> float | None:
    if p is None:
        return None
    if "source_step_us" in p.index:
        return float(p["target_step_us"] - p["source_step_us"])
    return float(p["delta_us"])


def _get(p: Any, col: str) -> Any:
    if p is None or col not in p.index:
        return None
    v = p[col]
    return None if v != v else (bool(v) if col == "significant" else float(v))
