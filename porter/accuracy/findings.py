"""The accuracy block's findings: the lines worth a reader's first glance, most important
first (diagnosis.json's ``accuracy.findings``, the summary and the report show them).
"""

from __future__ import annotations

import pandas as pd

from porter.accuracy.local import OUTPUT, TOP, LocalRun, Port
from porter.analysis.accuracy import TOLERANCES, tolerance_for


def _sci(x: float) -> str:
    return "n/a" if x is None or x != x else f"{x:.2e}"


def findings(df: pd.DataFrame, dtype: str, oracle: dict | None, local: LocalRun, not_compared: dict[str, str],
             suspects: list[str], capture_hint: str, target_names: dict[str, str] | None = None) -> list[str]:
    """The accuracy lines worth a reader's first glance, most important first. A search with
    gaps never says that no module introduces error: it says among how many it looked.
    target_names: source path -> the target's own name, for a rewrite whose modules pair by
    parameters (the suspect is said in both models' words)."""
    lines = []
    tol = tolerance_for(dtype)
    out = df[df["module"] == OUTPUT]
    if len(out):
        e = float(out["propagated_rel_l2"].iloc[0])
        lines.append(f"model output: relative L2 {e:.2e} against the source ({'within' if e <= tol else 'OUTSIDE'} "
                     f"the {dtype} tolerance {tol:.0e})")
    bad = df[df["introduces_error"]].assign(x=lambda d: d["local_rel_l2"] / d["tolerance"]).sort_values("x", ascending=False)
    for r in bad.head(TOP).itertuples():
        line = (f"{r.module or '(model)'} introduces error: local {_sci(r.local_rel_l2)} = {r.x:.0f}x tolerance "
                f"(propagated {_sci(r.propagated_rel_l2)})")
        op = (local.ops.get(r.module) or {}).get("first_op")
        if op and op.get("call"):  # a rewrite's op (porter.accuracy.rewrite)
            own = (target_names or {}).get(r.module)
            line += (f"; op: {(own + ' → ') if own and own != r.module else ''}#{op['index']} {op['call']}"
                     + (f" at {op['where']}" if op.get("where") else "")
                     + (f", where the source computes {op['source_op']} (error {_sci(op['local_rel_l2'])})"
                        if op.get("source_op") else ", a value the source never computes"))
        elif op:
            ins = ", ".join(f"{i['dtype']}{i['shape']}" + (f" in [{i['min']:.3g}, {i['max']:.3g}]" if "min" in i else "")
                            for i in op["inputs"][:3])
            line += (f"; op: model → {r.module} → #{op['index']} {op['op']}({ins}): error {_sci(op['chained_rel_l2'])} "
                     f"carried, {_sci(op['local_rel_l2'])} alone")
        elif r.module in local.ops and local.ops[r.module].get("skipped"):
            line += f"; op not located: {local.ops[r.module]['skipped']}"
        lines.append(line)
    measured = int(df["local_rel_l2"].notna().sum())
    gaps = len(not_compared) + len(local.not_run)
    if bad.empty and measured:
        worst = df.loc[df["local_rel_l2"].idxmax()]
        scope = "no module" if not gaps else f"no module among the {measured} with a local error"
        lines.append(f"{scope} introduces error; largest local error {worst['local_rel_l2']:.2e} in "
                     f"{worst['module'] or '(model)'}")
    if suspects:
        own = (target_names or {}).get(suspects[0])
        where = suspects[0] + (f" (the target's {own})" if own and own != suspects[0] else "")
        lines.append(f"propagated error first exceeds tolerance at {where} (sampled, see propagated_rel_l2_se)"
                     + (f"; for its local error and op: {capture_hint}" if capture_hint else ""))
    if oracle:
        lines.append(f"fp64 oracle: target error {oracle['target_error']:.2e}, source error {oracle['source_error']:.2e}, "
                     f"bound {oracle['bound']:.2e}: {'pass' if oracle['passed'] else 'FAIL'}")
    if not measured:
        lines.append(f"local error not measured: {local.how}")
    if not_compared:
        first = next(iter(not_compared))
        lines.append(f"{len(not_compared)} module(s) not compared, e.g. {first}: {not_compared[first]} "
                     "(all in accuracy.not_compared)")
    if local.not_run:
        first = next(iter(local.not_run))
        lines.append(f"{len(local.not_run)} module(s) without a local error, e.g. {first}: {local.not_run[first]} "
                     "(all in accuracy.local.not_run)")
    return lines


def precision_findings(df: pd.DataFrame, port: Port, local: LocalRun, beyond: set[str]) -> list[str]:
    """The precision port's lines: the dtype and its tolerance, then each module beyond what
    the dtype implies (with the op named), or the statement that none is."""
    t = TOLERANCES.get(port.dtype, TOLERANCES["fp32"])
    runs = f"under torch.autocast to {port.autocast}" if port.autocast else port.dtype
    lines = [f"precision port: the target runs {runs}; tolerance relative L2 {t.rel_l2:.0e} ({t.reason}); "
             f"{len(local.verdicts)} modules judged against float64"]
    out = local.verdicts.get(OUTPUT)
    if out is not None:
        lines.append(f"model output: {out.words()}")
    for m in sorted(beyond, key=lambda m: -local.verdicts[m].target_error)[:TOP]:
        line = f"{m or '(model)'}: {local.verdicts[m].words()}"
        op = (local.ops.get(m) or {}).get("first_op")
        if op:
            line += (f"; op: model → {m} → #{op['index']} {op['op']}: {op.get('dtype_words') or 'no dtype verdict'}; "
                     f"{op.get('verdict', '')}")
        lines.append(line)
    if not beyond and local.verdicts:
        worst = max(local.verdicts.items(), key=lambda kv: kv[1].target_error / max(kv[1].bound, 1e-300))
        scope = "no module" if not local.no_verdict else f"no module among the {len(local.verdicts)} judged"
        lines.append(f"{scope} loses more than {port.dtype} implies; closest to its bound: {worst[0] or '(model)'} "
                     f"({worst[1].target_error:.2e} against bound {worst[1].bound:.2e})")
    if local.no_verdict:
        first = next(iter(local.no_verdict))
        lines.append(f"{len(local.no_verdict)} module(s) without a dtype verdict, e.g. {first}: {local.no_verdict[first]}")
    return lines
