"""The terminal summary of a diagnosis: what `porter diagnose` prints, read from diagnosis.json.

Every line fits `width` columns and nothing is cut: prose wraps, and a long module path is
shortened from the middle, keeping its root and the innermost scopes that tell rows apart
(`Qwen2Model_0/…/Qwen2DecoderLayer_17/Qwen2MLP_17`). Losses and wins are listed apart, so a
target that is faster overall still shows where it is slower, and per op class the net gap
sits beside its gross loss and gross win.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

from porter.core.units import DISPLAY_CHARS, elide, fmt_ratio, fmt_us, short_dtypes, short_shapes
from reports.basis import overhead_text
from reports.fields import NO_MODULE, root_name, within_noise

NOISY = 0.10  # IQR/median of step times above which the summary warns
ELLIPSIS = "\u2026"
PROSE_CHARS = 2 * DISPLAY_CHARS + 800  # a sentence of the summary longer than this quotes a huge name
TOP_ROWS = 5
TOP_SHAPES = 3
TOP_FIXES = 3


def _us(v: Any) -> str:
    return fmt_us(None if v is None else float(v))


def _signed(v: Any) -> str:
    text = _us(v)
    return text if text.startswith("-") or text == "-" else "+" + text


def _x(v: Any) -> str:
    return fmt_ratio(None if v is None else float(v))


def abbreviate(path: str, width: int) -> str:
    """A '/'-separated path in at most `width` characters, shortened from the middle.

    Keeps the first scope and as many trailing scopes as fit ('A/…/y/z'); a last scope longer
    than the room keeps its end ('…long_name_tail').
    """
    if len(path) <= width:
        return path
    parts = path.split("/")
    if len(parts) > 2:
        head = parts[0] + "/" + ELLIPSIS
        tail: list[str] = []
        for p in reversed(parts[1:]):
            if len(head) + 1 + len("/".join([p] + tail)) > width:
                break
            tail.insert(0, p)
        if tail:
            return head + "/" + "/".join(tail)
        head = ELLIPSIS
        for p in reversed(parts):
            cand = "/".join([p] + tail)
            if len(head) + 1 + len(cand) > width:
                break
            tail.insert(0, p)
        if tail:
            return head + "/" + "/".join(tail)
    return ELLIPSIS + path[-(width - 1):]


def wrap(text: str, width: int, indent: str = "", more: str = "    ") -> list[str]:
    """Prose wrapped at width (long words are broken only when a single word is wider); a line
    that quotes a huge name from the trace is elided to PROSE_CHARS first."""
    return textwrap.wrap(elide(text, PROSE_CHARS), width, initial_indent=indent, subsequent_indent=indent + more,
                         break_on_hyphens=False) or [indent.rstrip()]


def _device(side: dict) -> str:
    dev = side.get("device") or {}
    return str(dev.get("name") or dev.get("type") or "?")


def ratio_words(ratio: float | None) -> str:
    if ratio is None:
        return "could not be compared"
    if abs(ratio - 1) < 0.02:
        return f"x{ratio:.3f}, at parity"
    return f"x{ratio:.3f}, target {'slower' if ratio > 1 else 'faster'}"


def pair_name(d: dict) -> str:
    """'transformer: cpu:eager -> xla' when both sides ran one model, else the two labels."""
    src, tgt = (str((d["inputs"][r] or {}).get("label") or r) for r in ("source", "target"))
    (ms, _, ss), (mt, _, st) = src.partition("@"), tgt.partition("@")
    return f"{ms}: {ss} -> {st}" if ms == mt and ss and st else f"{src} -> {tgt}"


def headline_lines(h: dict | None, width: int, name: str = "") -> list[str]:
    """The answer in one line: the pair, the ratio and its verdict, the 95% interval; a
    too-wide interval says UNCERTAIN there and what to do on the next line. How it was
    measured comes last (method_lines)."""
    if not h or h.get("ratio") is None:
        return []
    lo, hi = h.get("ci95") or (None, None)
    ci = (f"95% interval x{lo:.3f}-x{hi:.3f}" if lo is not None and hi is not None and lo == lo and hi == hi
          else "no interval (too few samples)")
    who = f"{name}: " if name else ""
    verdict = ": UNCERTAIN" if h.get("wide") and not h.get("advice") else ""  # else the next line says it
    return (wrap(f"headline: {who}target/source {ratio_words(h['ratio'])}, {ci}{verdict}", width, more="  ")
            + (wrap(f"UNCERTAIN: {h['advice']}", width, "  ", "    ") if h.get("advice") else []))


def answer_lines(d: dict, width: int) -> list[str]:
    """What a reader needs first: the headline, the accuracy verdict, the plan."""
    lines = headline_lines(d.get("headline"), width, pair_name(d))
    acc = d.get("accuracy")
    if acc and acc.get("findings"):
        more = len(acc.get("suspects") or [])
        lines += wrap(f"accuracy: {acc['findings'][0]}" + (f"; {more} suspect module(s), below" if more else ""),
                      width, more="  ")
    elif not acc:
        lines += wrap("accuracy: not compared", width, more="  ")
    return lines + plan_line(d.get("plan"), width)


def header_lines(d: dict, width: int) -> list[str]:
    """The answer (answer_lines), then where the time goes in the profiled steps and coverage."""
    src, tgt = d["inputs"]["source"], d["inputs"]["target"]
    e = d["end_to_end"]
    lines = answer_lines(d, width)
    lines += wrap(f"{src.get('label')} ({_device(src)}) -> {tgt.get('label')} ({_device(tgt)})", width)
    busy = (f"; busy time, streams overlap: kernel sum gives {ratio_words(e.get('kernel_sum_ratio'))}"
            if e.get("ratio_time") == "busy" else "")
    sides = (d.get("headline") or {}).get("sides")
    if sides:  # live: the headline above is the number; the profiled steps say where the time goes
        over = overhead_text({r: sides[r]["profiler_overhead"] for r in ("source", "target")
                              if (sides.get(r) or {}).get("profiler_overhead")})
        counted = (d.get("headline") or {}).get("ops_step")
        if counted and counted.get("ratio") is not None:  # what the step table below counts
            lines += wrap(f"step table (ops per step, the profiler's slowdown out; profiler overhead "
                          f"{over or 'unknown'}): target/source {ratio_words(counted['ratio'])}", width, more="  ")
            if counted.get("why"):
                lines += wrap(f"differs from the headline: {counted['why']}", width, "  ", "    ")
        else:
            lines += wrap(f"profiled steps (where the time goes, not how much; profiler overhead {over or 'unknown'}): "
                          f"target/source {ratio_words(e.get('ratio'))} ({str(e.get('ratio_basis', '')).replace('_', ' ')}"
                          f"{busy})", width, more="  ")
    else:
        lines += wrap(f"end to end: target/source {ratio_words(e.get('ratio'))} "
                      f"({str(e.get('ratio_basis', '')).replace('_', ' ')}{busy})", width)
    per = []
    for role in ("source", "target"):
        sp = e.get(f"{role}_per_step_us") or {}
        spread = sp.get("rel_spread")
        per.append(f"{role} {_us(sp.get('median'))}" + (f" +-{spread * 100:.0f}%" if spread is not None else "")
                   + f" (n={sp.get('n', 0)})")
    lines += wrap("per step: " + ", ".join(per), width, "  ")
    spreads = [(e.get(f"{r}_per_step_us") or {}).get("rel_spread") for r in ("source", "target")]
    noisy = max((s for s in spreads if s is not None), default=0.0)
    if noisy > NOISY:
        lines += wrap(f"noisy: step times spread {noisy * 100:.0f}% (IQR/median); small gaps are not trustworthy",
                      width, "  ")
    cov = (d.get("alignment") or {}).get("coverage") or {}
    lines += wrap(f"coverage: {cov.get('source', 0) * 100:.2f}% of source, {cov.get('target', 0) * 100:.2f}% of "
                  f"target time in {len(d.get('groups') or [])} matched groups", width)
    lines += outside_lines((d.get("alignment") or {}).get("stats") or {}, width)
    lines += runtime_lines((d.get("headline") or {}).get("runtime"), width)
    return lines


def method_lines(d: dict, width: int) -> list[str]:
    """How the headline was measured, and what the other clocks say: after the answer and the
    tables, so that the first lines are about the model, not the method."""
    h, e = d.get("headline") or {}, d["end_to_end"]
    lines = []
    if h.get("basis"):
        lines += wrap(f"how measured: {h['basis']} (n={h.get('n')}; interval: {h.get('method', '')})", width, more="  ")
    if e.get("wall_ratio") is not None:
        sw, tw = e.get("source_wall_s") or {}, e.get("target_wall_s") or {}
        apart = ", each side timed on its own, not alternately" if h.get("sides") else ""
        lines += wrap(f"wall time: x{e['wall_ratio']:.3f} (source {_us((sw.get('median') or 0) * 1e6)}, "
                      f"target {_us((tw.get('median') or 0) * 1e6)} per step{apart})", width, more="  ")
    lines += wrap(f"whole trace: {_us(e.get('source_total_us'))} -> {_us(e.get('target_total_us'))} "
                  f"({d['inputs']['source'].get('time_basis')})", width)
    return lines


def outside_lines(stats: dict, width: int) -> list[str]:
    """The rest of each side's time beside coverage: the runtime's outside every module, by
    kind, and the other unmatched time (coverage + both = 100%, porter.analysis.outside)."""
    parts = []
    for side in ("source", "target"):
        share = stats.get(f"{side}_unmatched_outside_modules_share") or 0.0
        if share <= 0:
            continue
        total = stats.get(f"{side}_unmatched_outside_modules_us") or 0.0
        kinds = stats.get(f"{side}_outside_modules_by_kind_us") or {}
        named = ", ".join(f"{k} {share * v / total * 100:.1f}%" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
                          if total > 0 and v > 0)
        other = stats.get(f"{side}_unmatched_other_share")
        parts.append(f"{share * 100:.1f}% of the {side}'s time" + (f" ({named})" if named else "")
                     + (f", beside {other * 100:.1f}% unmatched in modules" if other is not None else ""))
    if not parts:
        return []
    return wrap(f"outside every module, unmatched (in coverage's denominator): {'; '.join(parts)}", width)


def runtime_lines(block: dict | None, width: int) -> list[str]:
    """Each side's runtime per step, like for like (porter.analysis.outside.runtime_step): an
    eager source's Python and dispatch between ops against a compiled target's wrapper, guard
    checks and its own time between ops. Not a module: the module rankings leave it out."""
    if not block:
        return []
    def side(role: str) -> str:
        b = block[role]
        parts = [f"{k} {_us(v)}" for k, v in sorted(b["kinds_us"].items(), key=lambda kv: -kv[1]) if v > 0]
        parts.append(f"between ops {_us(b['between_us'])}")
        return f"{role} {_us(b['total_us'])} ({', '.join(parts)})"
    ratio = block.get("ratio")
    verdict = "" if ratio is None else f": x{ratio:.2f}, target {'slower' if ratio > 1 else 'faster'}"
    return wrap(f"runtime per step, outside the modules' ops: {side('source')} -> {side('target')}"
                f"{verdict} ({_signed(block['gap_us'])})", width, more="    ")


ONE_SIDE = {"source": "src only", "target": "tgt only"}
NOT_BORNE_OUT = ("not reproduced alone", "opposite sign alone", "not sized alone")  # by_module's evidence (porter.pipeline.confirmation)  # a row on one side has no ratio (porter.analysis.opshape)


def _row(delta: Any, ratio: Any, name: str, width: int, shorten: Any = abbreviate, only_on: Any = "") -> str:
    cells = f"  {_signed(delta):>10} {ONE_SIDE.get(str(only_on or '')) or _x(ratio):>8}  "
    return cells + shorten(name, max(12, width - len(cells)))


def losses_and_wins(rows: list[dict], name: Any, width: int, what: str, top: int,
                    shorten: Any = abbreviate) -> list[str]:
    """The `top` largest losses, then the `top` largest wins, of one table (rows carry delta_us);
    rows whose gap interval holds zero (a live pair's, porter.analysis.gap_noise) are neither,
    and are counted on one line after them."""
    lines = []
    rows = [r for r in rows if not r.get("runtime")]  # the runtime's own row: runtime_lines compares it
    noise = [r for r in rows if within_noise(r)]
    rows = [{**r, "delta_us": gap, "ratio": ratio} for r in rows if not within_noise(r) for gap, ratio in [_gap(r)]]
    per_step = any("source_step_us" in r for r in rows)
    alone = ", alone where confirmed" if any("ranked_gap_us" in r for r in rows) else ""
    for title, keep, order in (("losses (target slower)", lambda v: v > 0, True),
                               ("wins (target faster)", lambda v: v < 0, False)):
        chosen = sorted((r for r in rows if keep(r.get("delta_us") or 0.0)),
                        key=lambda r: r["delta_us"], reverse=order)[:top]
        lines += wrap(f"largest {title} by {what}{' per step' if per_step else ''}{alone}:", width)
        lines += [_row(r["delta_us"], r.get("ratio"), name(r), width, shorten, r.get("only_on")) for r in chosen] or ["  (none)"]
    if noise:
        biggest = max(abs(_gap(r)[0] or 0.0) for r in noise)
        unborne = sum(1 for r in noise if r.get("evidence") in NOT_BORNE_OUT)
        why = (f"{len(noise) - unborne} whose gap per profiled step has a 95% interval holding zero, {unborne} "
               "significant in the profile but not borne out or not sized alone (--confirm)" if unborne else
               "whose gap per profiled step has a 95% interval holding zero")
        lines += wrap(f"within noise: {len(noise)} more, {why} (largest {_us(biggest)})", width, "  ")
    return lines


def module_name(r: dict, root: str = NO_MODULE) -> str:
    """A by_module (kind) row's name, marked where the module alone bore its gap out (--confirm);
    the root's row named root (reports.fields.root_name)."""
    name = r.get("key") or root
    return f"{name} (confirmed alone)" if r.get("evidence") == "confirmed alone" else name


def _gap(r: dict) -> tuple[float, Any]:
    """A row's gap and ratio as diagnosis.json judges it: the module's alone timing where
    --confirm sized it (ranked_*: porter.pipeline.confirmation.ranked_gaps), else per unprofiled
    step on a live pair (each side's profiled time less its profiler slowdown), else over the
    whole trace."""
    g = r.get("ranked_gap_us")
    if isinstance(g, (int, float)) and g == g:
        s, t = r.get("ranked_source_us"), r.get("ranked_target_us")
        return g, (t / s if isinstance(s, (int, float)) and isinstance(t, (int, float)) and s > 0 else None)
    s, t = r.get("source_step_us"), r.get("target_step_us")
    if isinstance(s, (int, float)) and isinstance(t, (int, float)) and s == s and t == t:
        return t - s, (t / s if s > 0 else None)
    return r.get("delta_us") or 0.0, r.get("ratio")


def class_lines(rows: list[dict], width: int) -> list[str]:
    """Per op class: net gap = gross loss + gross win, largest |net| first."""
    lines = wrap("by op class: net gap, gross loss (op shapes slower) and gross win (faster):", width)
    for r in sorted(rows, key=lambda r: abs(r.get("delta_us") or 0.0), reverse=True):
        loss, win = r.get("gross_loss_us"), r.get("gross_win_us")
        gross = f"  loss {_signed(loss) if loss else '0'}, win {_us(win) if win else '0'}" if loss is not None else ""
        lines += wrap(f"{r['key']:<12} {_signed(r.get('delta_us')):>10} {_x(r.get('ratio')):>8}{gross}", width, "  ")
    return lines


def op_shape_name(r: dict) -> str:
    """An op-shape row for reading: 'aten::mm [[8944,1024],[1024,2816]] bf16', each part elided
    past DISPLAY_CHARS (diagnosis.json keeps all)."""
    parts = (str(r.get("framework_op") or ""), short_shapes(str(r.get("input_shapes") or "")),
             short_dtypes(str(r.get("dtypes") or "")))
    own = r.get("target_ops") or []  # a cross-framework pair: what the target ran for it
    return " ".join(elide(p) for p in parts if p) + (f" (target: {', '.join(map(str, own))})" if own else "")


def shorten_end(text: str, width: int) -> str:
    """An op and its shapes in width characters: the op name and first shapes say most."""
    return text if len(text) <= width else text[:width - 1] + ELLIPSIS


def roofline_lines(roof: dict | None, width: int) -> list[str]:
    if not roof:
        return []
    t = roof["totals"]
    tgt = roof["ceilings"]["target"]
    if not tgt["known"]:
        return wrap("roofline: target device not in porter/data/devices.toml and no measured ceilings", width)
    return wrap(f"roofline ({'measured' if tgt.get('measured') else 'datasheet'} ceilings): "
                f"up to {_us(t['recoverable_us'])} recoverable, {_us(t['demonstrated_us'])} shown reachable "
                "by the source", width)


def _gain(f: dict) -> str:
    """What one fix recovers: what it closes of the measured gap and what lies beyond parity
    (time fixes), its severity (accuracy), or why it has no figure."""
    closes, beyond, sev = f.get("closes_gap_us"), f.get("beyond_parity_us"), f.get("severity")
    if f["kind"] == "perf" and isinstance(closes, (int, float)) and math.isfinite(closes):
        text = (f"closes {_us(closes)} of its groups' {_us(f.get('measured_gap_us'))} measured gap" if closes > 0
                else "no measured gap to close (the target is not slower here)")
        return text + (f", {_us(beyond)} more beyond parity (headroom)" if beyond and beyond > 0 else "")
    if sev is not None and math.isfinite(sev):
        return f"accuracy: local error {sev:.3g}x tolerance"
    if "porter ops:" in str(f.get("why", "")):
        return "closes a portability gap (porter ops)"
    return "saving unknown (no cost model for these ops)"


def _marker(f: dict) -> str:
    """[in plan], [alternative to #k] or [not in plan], and 'headroom' for a fix found as headroom."""
    if f["kind"] == "accuracy":
        return ""
    tags = ["in plan" if f.get("in_plan") else "alternative to " + ", ".join(f"#{r}" for r in f["alternative_to"])
            if f.get("alternative_to") else "not in plan"]
    if f.get("opportunity") == "headroom":
        tags.append("headroom: the target is not slower here by this fix's measure")
    return " [" + "; ".join(tags) + "]"


def _fix_entry(f: dict, width: int) -> list[str]:
    lo, hi = f["days"]
    lines = wrap(f"#{f['rank']} {f['title']}{_marker(f)}", width, "  ", "   ")
    return lines + wrap(f"{_gain(f)}; {lo:g}-{hi:g} engineer-days; {f['confidence']} confidence", width, "     ", "")


def plan_line(plan: dict | None, width: int) -> list[str]:
    """diagnosis.json `plan` in one sentence: the ranks it sums, what they close, the days."""
    if not plan:
        return []
    if not plan.get("fixes"):
        return wrap("plan: no fix closes a measured gap", width)
    lo, hi = plan["days"]
    ranks = ", ".join(f"#{r}" for r in plan["fixes"])
    beyond = plan.get("beyond_parity_us") or 0.0
    head = f"plan (provisional: {plan['provisional']})" if plan.get("provisional") else "plan"
    verb, summed = ("together close", " (the sum of the fixes listed)") if len(plan["fixes"]) > 1 else ("closes", "")
    return wrap(f"{head}: {ranks} {verb} {_us(plan['total_us'])} of measured gaps for {lo:g}-{hi:g} "
                f"engineer-days{summed}"
                + (f"; a further {_us(beyond)} beyond parity, not counted" if beyond > 0 else ""), width, more="  ")


def fix_lines(fixes: list[dict], width: int, top: int = TOP_FIXES, plan: dict | None = None) -> list[str]:
    """The plan's fixes (each: title naming its op and module; what it closes, what lies beyond
    parity, effort, confidence), the plan's sums, then up to `top` other fixes, marked."""
    if not fixes:
        return wrap("fixes: no catalogue fix applies to these gaps", width)
    time_fixes = [f for f in fixes if f["kind"] != "accuracy"]
    chosen = [f for f in time_fixes if f.get("in_plan")]
    lines = wrap(f"fix plan ({len(time_fixes)} time fixes apply; fixes for the same ops are alternatives):", width)
    for f in chosen:
        lines += _fix_entry(f, width)
    lines += plan_line(plan, width)
    rest = [f for f in time_fixes if not f.get("in_plan")][:top] + [f for f in fixes if f["kind"] == "accuracy"][:top]
    if rest:
        lines += wrap("also apply, not summed:", width)
        for f in rest:
            lines += _fix_entry(f, width)
    return lines


ESTIMATED = "fused-share"  # porter.analysis.op_calls.FUSED_SHARE: the target's time is mostly an estimated share


def op_call_name(r: dict) -> str:
    """An op-call row for reading: 'model/…/intermediate/dense linear#0', '~' before a call whose
    target time is mostly an estimated share of a fusion."""
    est = "~" if r.get("evidence") == ESTIMATED else ""
    return f"{r.get('module') or '(root)'} {est}{r.get('op')}#{r.get('call')}"


def op_call_lines(rows: list[dict] | None, width: int, top: int = TOP_ROWS) -> list[str]:
    """Live pairs only (alignment.op_calls): the `top` op calls with the largest gap either way,
    per step; absent for recorded pairs, which carry no call identities."""
    if not rows:
        return []
    gap = lambda r: float(r.get("target_us") or 0.0) - float(r.get("source_us") or 0.0)  # noqa: E731
    chosen = sorted(rows, key=lambda r: abs(gap(r)), reverse=True)[:top]
    lines = wrap("largest op-call gaps per step (~: split from a fusion by estimate):", width)
    return lines + [_row(gap(r), r.get("ratio"), op_call_name(r), width) for r in chosen]


def accuracy_lines(acc: dict | None, width: int) -> list[str]:
    if not acc:
        return wrap("accuracy: not compared (no saved tensors; a live diagnose of a MODEL compares them)", width)
    port = acc.get("precision") or {}
    dtype = f"{port['source_dtype']} → {port['target_dtype']}, tolerances of {acc['dtype']}" if port else acc["dtype"]
    lines = wrap(f"accuracy ({dtype}, {acc['metric']}, tolerance {acc['tolerance']:.0e}):", width)
    for text in acc.get("findings", []):
        lines += wrap(text, width, "  ")
    return lines


def confirmed_lines(block: dict | None, width: int) -> list[str]:
    """The suspects re-timed alone (diagnosis.json `confirmed`): profiled gap per step beside the
    gap alone, each with its 95% interval, and the verdict."""
    from reports.findings import confirmed_name, confirmed_verdict

    if not block or not block.get("modules"):
        return []
    lines = wrap(f"largest module gaps confirmed alone ({' vs '.join(block.get('stacks') or [])}, "
                 f"{block.get('clock', 'wall')} time; profiled per step -> alone per forward, 95% intervals; "
                 "largest loss alone first):", width)
    for r in block["modules"]:
        if r.get("error"):
            lines += wrap(f"{r['module']}: not replayed ({r['error']})", width, "  ", "    ")
            continue
        verdict = confirmed_verdict(r)
        prof = r.get("profiled_gap_us")
        iv = (f" [{_signed(r['profiled_low_us'])}, {_signed(r['profiled_high_us'])}]"
              if r.get("profiled_low_us") is not None else "")
        lines += wrap(f"{confirmed_name(r)}: {_signed(prof) if prof is not None else '-'}{iv} -> {_signed(r['gap_us'])} "
                      f"[{_signed(r['gap_low_us'])}, {_signed(r['gap_high_us'])}] {verdict}", width, "  ", "    ")
    return lines


def summary_lines(d: dict, width: int = 80, top: int = TOP_ROWS) -> list[str]:
    """The plain-text summary of a parsed diagnosis.json, every line at most `width` columns."""
    lines = header_lines(d, width)
    mods, kinds = d.get("by_module") or [], d.get("by_module_kind") or []
    folded = bool(kinds) and len(kinds) < len(mods)
    lines += confirmed_lines(d.get("confirmed"), width)  # first: the profile's suspects, measured alone
    root = root_name(d)
    lines += losses_and_wins(kinds if folded else mods, lambda r: module_name(r, root), width,
                             "module kind (instances summed)" if folded else "module", top)
    if d.get("by_class"):
        lines += class_lines(d["by_class"], width)
    if d.get("by_op_shape"):
        lines += losses_and_wins(d["by_op_shape"], op_shape_name, width, "op and input shapes", TOP_SHAPES,
                                 shorten_end)
    lines += op_call_lines((d.get("alignment") or {}).get("op_calls"), width, top)
    lines += roofline_lines(d.get("roofline"), width)
    lines += fix_lines(d.get("fixes") or [], width, plan=d.get("plan"))
    lines += accuracy_lines(d.get("accuracy"), width)
    lines += method_lines(d, width)
    for w in d.get("warnings") or []:
        lines += wrap(f"warning: {w}", width)
    return lines

