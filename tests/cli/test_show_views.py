"""`porter show` views that read right (issue 30.4): --by op names framework ops and marks
kernels no op launched, --by module-kind folds instance numbers, long kernel names fit two
lines. On the H100 Qwen1.5-0.5B corpus trace."""

from __future__ import annotations

import pytest

from conftest import run_porter
from porter.analysis.views import KERNEL_ONLY, time_by
from porter.bundles.ingest import open_any

QWEN = "kineto/h100_Qwen_Qwen1.5-0.5B-Chat.json.gz"


@pytest.fixture(scope="module")
def qwen(corpus):
    return open_any(corpus / QWEN, None)


def test_by_op_keeps_framework_ops_and_names_launcher_less_kernels_apart(qwen):
    rows = time_by(qwen.ops, qwen.kernels, "op")
    ops = qwen.ops
    fw = set(ops.loc[ops["framework_op"] != "", "framework_op"])
    orphans = set(ops.loc[ops["framework_op"] == "", "name"])
    assert orphans, "the trace has kernels no framework op launched"
    keys = set(rows["key"])
    assert keys == fw | {KERNEL_ONLY + n for n in orphans}
    assert not keys & orphans  # a raw kernel name never sits among the ops unmarked
    assert rows["device_us"].sum() == pytest.approx(ops["device_us"].sum(), rel=1e-12)


def test_by_module_kind_folds_every_layer_into_one_row(qwen):
    rows = time_by(qwen.ops, qwen.kernels, "module-kind").set_index("key")
    by_module = time_by(qwen.ops, qwen.kernels, "module").set_index("key")
    attn = [k for k in by_module.index if k.endswith("Qwen2Attention") or k.rsplit("/", 1)[-1].startswith("Qwen2Attention")]
    assert len(attn) >= 20  # one per decoder layer
    kind = "Qwen2Model/Qwen2DecoderLayer/Qwen2Attention"
    assert rows.loc[kind, "device_us"] == pytest.approx(by_module.loc[attn, "device_us"].sum(), rel=1e-9)
    assert rows["device_us"].sum() == pytest.approx(by_module["device_us"].sum(), rel=1e-12)


def test_show_cli_by_module_kind_and_long_kernel_names_fit(corpus):
    wide = run_porter("show", str(corpus / QWEN), "--by", "module-kind", "-n", "5")
    assert wide.returncode == 0, wide.stderr
    assert "Qwen2Model/Qwen2DecoderLayer/Qwen2Attention " in wide.stdout
    ops = run_porter("show", str(corpus / QWEN), "--by", "kernel", "-n", "15")
    assert ops.returncode == 0, ops.stderr
    rows = [line for line in ops.stdout.splitlines() if line.startswith("│")]
    starts = [i for i, line in enumerate(rows) if line.split("│")[2].strip()]  # a row's first line has its time
    assert len(starts) == 15
    tallest = max(b - a for a, b in zip(starts, starts[1:] + [len(rows)]))
    assert tallest <= 3, ops.stdout  # demangled C++ names ran to 20+ lines
    bad = run_porter("show", str(corpus / QWEN), "--by", "module-knd")
    assert bad.returncode == 2 and "module-kind" in bad.stderr
