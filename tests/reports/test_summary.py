"""The terminal summary: wraps at 80 columns (never crops), lists losses and wins, and its
numbers are diagnosis.json's. Read on the Qwen H100 -> MI300X pair, where the target is
faster overall (x0.94) yet matmul and attention are slower: the case a losses-only list hid."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _diagnoses import QWEN_SRC, QWEN_TGT, qwen_trace_diagnosis
from conftest import REPO, corpus_dir

from reports.terminal import abbreviate, summary_lines
from porter.core.units import fmt_us

WIDTH = 80


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return qwen_trace_diagnosis(tmp_path_factory)


@pytest.fixture(scope="module")
def qwen_json(qwen):
    return json.loads((qwen / "diagnosis.json").read_text())


def test_abbreviate_keeps_root_and_the_distinguishing_tail():
    rows = [f"Qwen2Model_0/Qwen2DecoderLayer_{i}/Qwen2MLP_{i}/Linear_{3 * i}" for i in (7, 17)]
    short = [abbreviate(r, 36) for r in rows]
    assert short == ["Qwen2Model_0/…/Qwen2MLP_7/Linear_21", "Qwen2Model_0/…/Qwen2MLP_17/Linear_51"]
    assert all(len(s) <= 36 for s in short)
    assert abbreviate("a/b", 80) == "a/b"
    one = "x" * 50
    assert abbreviate(one, 20) == "…" + "x" * 19
    tail = abbreviate("Root_0/" + "L" * 40 + "/attn_3", 20)  # root cannot fit with the tail
    assert tail.endswith("/attn_3") and len(tail) <= 20


def _words(lines: list[str]) -> list[str]:
    return " ".join(lines).split()


def test_summary_wraps_at_80_columns_and_crops_nothing(qwen_json):
    lines = summary_lines(qwen_json, WIDTH)
    assert max(map(len, lines)) <= WIDTH
    text = " ".join(_words(lines))
    # the sentences the old summary cut mid-word are whole
    assert "compares them)" in text
    assert "shown reachable by the source" in text
    wide = summary_lines(qwen_json, 400)
    prose = [w for w in _words(wide) if "/" not in w and "…" not in w and "[" not in w]
    assert set(prose) <= set(_words(lines))  # wrapping moved words, it dropped none


def test_summary_lists_wins_when_the_target_is_faster(qwen_json):
    lines = summary_lines(qwen_json, WIDTH)
    e = qwen_json["end_to_end"]
    assert e["ratio"] < 1  # the owlv2-like case: target faster overall
    assert any("target faster" in line for line in lines[:3])
    wins_at = next(i for i, line in enumerate(lines) if line.startswith("largest wins") and "module" in line)
    kinds = sorted(qwen_json["by_module_kind"], key=lambda r: r["delta_us"])
    best = kinds[0]
    assert best["delta_us"] < 0
    assert fmt_us(best["delta_us"]) in lines[wins_at + 1] and best["key"].split("/")[-1] in lines[wins_at + 1]
    losses_at = next(i for i, line in enumerate(lines) if line.startswith("largest losses") and "module" in line)
    worst = kinds[-1]
    assert "+" + fmt_us(worst["delta_us"]) in lines[losses_at + 1]


def test_summary_class_lines_carry_gross_loss_and_win(qwen_json):
    """Elementwise nets to a win on the target while some of its shapes are >2.5x slower."""
    lines = summary_lines(qwen_json, WIDTH)
    cls = {r["key"]: r for r in qwen_json["by_class"]}
    ew = cls["elementwise"]
    assert ew["delta_us"] < 0 < ew["gross_loss_us"]
    line = next(line for line in lines if line.strip().startswith("elementwise"))
    assert fmt_us(ew["delta_us"]) in line and "+" + fmt_us(ew["gross_loss_us"]) in line
    assert fmt_us(ew["gross_win_us"]) in line


def test_cli_summary_in_a_pipe_fits_80_columns(corpus, tmp_path):
    """Piped stdout (no terminal) at COLUMNS=80: every line fits, none is cut."""
    env = dict(os.environ, COLUMNS=str(WIDTH), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-m", "porter", "diagnose", "--from", str(corpus_dir() / QWEN_SRC),
                           "--to", str(corpus_dir() / QWEN_TGT), "-o", str(tmp_path / "d"), "--no-report"],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert max(len(line) for line in out if not line.startswith("  /")) <= WIDTH
    text = " ".join(proc.stdout.split())
    assert "compares them)" in text and "largest wins" in text


def _show(*args: str) -> list[str]:
    env = dict(os.environ, COLUMNS=str(WIDTH))
    proc = subprocess.run([sys.executable, "-m", "porter", "show", *args], cwd=REPO, capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) <= WIDTH
    return lines


def test_show_by_module_rows_can_be_told_apart(qwen):
    """Each Qwen module row keeps its distinguishing tail (not 'Qwen2Model_0/Qwen2DecoderLaye…' x N)."""
    lines = _show(str(qwen / "source"), "--by", "module", "--top", "12")
    names = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert len(names) == 12 and len(set(names)) == 12
    assert sum(n.startswith("Qwen2Model_0/…/") for n in names) >= 10


def test_show_by_op_shape_on_a_diagnosis_lists_both_sides(qwen, qwen_json):
    lines = _show(str(qwen), "--by", "op-shape", "--top", "3")
    first = next(r for r in qwen_json["by_op_shape"])
    row = next(line for line in lines if line.startswith("│ ") and first["framework_op"] in line)
    assert f"{first['source_count']}/{first['target_count']}" in row
    assert fmt_us(first["source_us"]) in row and fmt_us(first["target_us"]) in row
    assert "+" + fmt_us(first["delta_us"]) in row
    bundle = _show(str(qwen / "target"), "--by", "op-shape", "--top", "3")
    assert any("aten::mm" in line for line in bundle)


def test_summary_reads_older_and_newer_diagnoses(qwen_json):
    """Without by_op_shape or gross columns (older porter) and with fields it does not know yet."""
    older = {k: v for k, v in qwen_json.items() if k != "by_op_shape"}
    older["by_class"] = [{k: v for k, v in r.items() if not k.startswith("gross_")} for r in qwen_json["by_class"]]
    lines = summary_lines(older | {"headline": {"interval": [0.9, 1.0]}}, WIDTH)
    assert max(map(len, lines)) <= WIDTH
    assert not any("by op and input shapes" in line for line in lines)
    assert any(line.strip().startswith("matmul") and "loss" not in line for line in lines)


@pytest.mark.slow
def test_live_summary_says_the_profiled_ratio_is_not_the_headline(tmp_path_factory, qwen_json):
    """A live pair's profiled steps carry each stack's profiler overhead (eager CPU 3-7x here,
    XLA about 1x): the step table's line gives the ratio its rows add up to once the slowdown is
    out (headline.ops_step), with the overhead per side from diagnosis.json, and says why it
    differs from the headline when it does; a recorded pair has no unprofiled step and keeps
    'end to end'."""
    from _diagnoses import live_transformer_diagnosis

    live = json.loads((live_transformer_diagnosis(tmp_path_factory) / "diagnosis.json").read_text())
    text = "\n".join(summary_lines(live, WIDTH))
    sides = live["headline"]["sides"]
    flat = " ".join(text.split())
    counted = live["headline"]["ops_step"]
    assert "step table (ops per step, the profiler's slowdown out; profiler overhead" in flat
    assert f"{counted['ratio']:.3f}" in flat
    # when the two disagree the line says why: the time between ops (an unprofiled step holds
    # more than its ops), or ops that add up to more than the step (the step table uncertain)
    assert ("differs from the headline:" in flat) == (not counted["agrees_with_headline"])
    if not counted["agrees_with_headline"]:
        between = counted["source_between_us"] >= 0 and counted["target_between_us"] >= 0
        assert ("the headline counts the time between ops" if between else
                "add up to more than the unprofiled step: the step table is uncertain") in flat
    for role in ("source", "target"):
        assert f"{role} {sides[role]['profiler_overhead']:.2f}x" in " ".join(text.split())
    assert "each side timed on its own" in " ".join(text.split()) and "\nend to end:" not in text
    recorded = "\n".join(summary_lines(qwen_json, WIDTH))
    assert "\nend to end: target/source" in recorded and "step table (ops" not in recorded


def _golden() -> dict:
    import gzip

    return json.loads(gzip.decompress((REPO / "fixtures" / "golden" / "bert_small_h100_mi300x.diagnosis.json.gz")
                                      .read_bytes()))


OP_CALLS_TITLE = "largest op-call gaps per step"


def _op_call_block(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith(OP_CALLS_TITLE))
    return lines[start + 1:start + 1 + 5]


def test_op_call_gaps_only_for_live_pairs_largest_either_way_first():
    d = _golden()  # a recorded pair: no op calls, no block
    assert "op_calls" not in d["alignment"]
    assert not any(OP_CALLS_TITLE in line for line in summary_lines(d, WIDTH))
    mod = "model/encoder/layer/{}/intermediate/intermediate_act_fn"
    rows = [{"module": mod.format(i), "op": "gelu", "call": 0, "source_us": 100.0, "target_us": 100.0 + gap,
             "ratio": (100.0 + gap) / 100.0, "evidence": "fused-share" if i == 3 else "identity-call"}
            for i, gap in enumerate((5.0, -80.0, 30.0, 200.0, -1.0, 50.0, 7.0))]
    d["alignment"]["op_calls"] = rows
    lines = summary_lines(d, WIDTH)
    assert max(map(len, lines)) <= WIDTH
    block = _op_call_block(lines)
    assert [line.split()[0] for line in block] == ["+200.0", "-80.0", "+50.0", "+30.0", "+7.0"]
    assert block[0].endswith("intermediate_act_fn ~gelu#0") and "/…/" in block[0]  # estimated, path shortened
    assert block[1].endswith("/layer/1/intermediate/intermediate_act_fn gelu#0")


@pytest.mark.slow
def test_live_summary_lists_the_demos_largest_op_call_gaps(tmp_path_factory):
    from _diagnoses import live_transformer_diagnosis

    d = json.loads((live_transformer_diagnosis(tmp_path_factory) / "diagnosis.json").read_text())
    rows = d["alignment"]["op_calls"]
    lines = summary_lines(d, WIDTH)
    assert max(map(len, lines)) <= WIDTH
    block = _op_call_block(lines)
    top = sorted(rows, key=lambda r: abs(r["target_us"] - r["source_us"]), reverse=True)[:5]
    assert len(block) == 5
    for line, r in zip(block, top):
        text = fmt_us(r["target_us"] - r["source_us"])
        assert line.strip().startswith(text if text.startswith("-") else "+" + text)
        assert line.endswith(f"{r['op']}#{r['call']}") and r["module"].split("/")[-1] in line


def test_the_roots_row_is_named_by_the_runtimes_kinds_in_every_view() -> None:
    """The blank-keyed by_module row is the runtime outside every module: the summary and the
    report model both name it by the kinds counted there, largest over both sides first."""
    from reports.build import model_from_diagnosis
    from reports.fields import root_name

    stats = {"source_outside_modules_by_kind_us": {"guard checks": 40.0},
             "target_outside_modules_by_kind_us": {"graph wrapper and runtime dispatch": 300.0, "guard checks": 90.0,
                                                   "transfers": 0.0}}
    rows = [{"key": "", "source_us": 40.0, "target_us": 390.0}, {"key": "layers/0", "source_us": 10.0, "target_us": 12.0}]
    d = {"alignment": {"stats": stats}, "by_module": rows, "by_module_kind": rows}
    name = "(no module: graph wrapper and runtime dispatch, guard checks)"
    assert root_name(d) == name
    assert root_name({"alignment": {"stats": {}}}) == "(no module)"  # a recorded pair counts no kinds
    m = model_from_diagnosis(d)
    assert [r.key for r in m.by_module] == [name, "layers/0"] and m.by_module_kind[0].key == name
    from reports.terminal import module_name

    assert module_name(rows[0], root_name(d)) == name and module_name(rows[1], root_name(d)) == "layers/0"


def test_the_runtimes_row_leaves_the_module_rankings_for_a_line_of_its_own() -> None:
    """A live pair's root row that holds only the runtime (porter.analysis.outside.runtime_step)
    is no module: neither the terminal's nor the report's largest losses rank it; the runtime
    line compares it with the source's runtime, its time between ops included."""
    from reports.build import model_from_diagnosis
    from reports.terminal import losses_and_wins as terminal_losses, runtime_lines
    from reports.view import losses_and_wins as view_losses

    rows = [{"key": "", "source_us": 0.0, "target_us": 1500.0, "delta_us": 1500.0, "runtime": True},
            {"key": "layers/0/act", "source_us": 100.0, "target_us": 900.0, "delta_us": 800.0, "runtime": False}]
    lines = terminal_losses(rows, lambda r: r["key"] or "(no module)", 100, "module", 3)
    assert [line.split()[-1] for line in lines[1:2]] == ["layers/0/act"] and "(no module)" not in " ".join(lines)
    m = model_from_diagnosis({"by_module": rows, "by_module_kind": rows})
    losses, _ = view_losses(m)
    assert [r.key for r in losses] == ["layers/0/act"]
    block = {"source": {"kinds_us": {}, "between_us": 3500.0, "total_us": 3500.0},
             "target": {"kinds_us": {"graph wrapper and runtime dispatch": 600.0, "guard checks": 150.0},
                        "between_us": 350.0, "total_us": 1100.0}, "gap_us": -2400.0, "ratio": 1100.0 / 3500.0}
    text = " ".join(runtime_lines(block, 400))
    assert text.startswith("runtime per step, outside the modules' ops: source 3.50 ms (between ops 3.50 ms) -> "
                           "target 1.10 ms (graph wrapper and runtime dispatch 600.0 us, guard checks 150.0 us, "
                           "between ops 350.0 us): x0.31, target faster"), text
    assert runtime_lines(None, 80) == []
    from reports.view import outside_text

    said = outside_text(model_from_diagnosis({"by_module": rows, "headline": {"runtime": block}}))
    assert "is 3.50 ms on the source and 1.10 ms on the target; no module ranking counts it" in said, said
    ranked = [dict(r, runtime=False) for r in rows]  # the root's row holds model ops too: it stays ranked
    said = outside_text(model_from_diagnosis({"by_module": ranked, "headline": {"runtime": block}}))
    assert "no module ranking" not in said and "the root's row, ranked with the model's own ops there" in said, said
    assert outside_text(model_from_diagnosis({"by_module": rows})) == ""  # a recorded pair: no runtime
