"""Nonsense pairs are refused (exit 2, one line) unless --force, which puts a banner first."""

from __future__ import annotations

import json

import pytest

from conftest import corpus_dir, run_porter

QWEN = "kineto/h100_Qwen_Qwen1.5-0.5B-Chat.json.gz"
BERT = "kineto/mi300x_gaunernst_bert-small-uncased.json.gz"


@pytest.mark.corpus
def test_qwen_against_bert_is_refused_then_forced_with_a_banner(tmp_path):
    src, tgt = corpus_dir() / QWEN, corpus_dir() / BERT
    if not src.is_file():
        pytest.skip(f"trace corpus not found at {corpus_dir()}")
    out = tmp_path / "d"
    r = run_porter("diagnose", "--from", str(src), "--to", str(tgt), "-o", str(out))
    assert r.returncode == 2, r.stderr
    err = [line for line in r.stderr.splitlines() if not line.startswith(("porter: reading", "porter: aligning", "USDT"))]
    assert len(err) == 1 and "share too little" in err[0] and "--force" in err[0], r.stderr
    assert "Traceback" not in r.stderr and not (out / "diagnosis.json").exists()

    r = run_porter("diagnose", "--force", "--from", str(src), "--to", str(tgt), "-o", str(out))
    assert r.returncode == 0, r.stderr
    d = json.loads((out / "diagnosis.json").read_text())
    assert d["pair_check"]["forced"] and not d["pair_check"]["ok"] and d["pair_check"]["coverage"] < 0.5
    assert d["warnings"][0].startswith("COMPARED ANYWAY (--force)")
    assert "COMPARED ANYWAY" in (out / "report.html").read_text()


@pytest.mark.corpus
def test_runs_of_one_model_pass_the_check(tmp_path):
    from porter.pipeline.diagnose import analyse, refuse_unrelated_pair
    from porter.bundles.ingest import open_any

    k = corpus_dir() / "kineto"
    if not k.is_dir():
        pytest.skip(f"trace corpus not found at {corpus_dir()}")
    d = analyse(open_any(k / "h100_gaunernst_bert-small-uncased.json.gz"), open_any(k / BERT.split("/")[1]))
    warnings: list[str] = []
    refuse_unrelated_pair(d, force=False, warnings=warnings)
    assert d.extras["pair_check"]["ok"] and d.extras["pair_check"]["coverage"] > 0.9 and not warnings
