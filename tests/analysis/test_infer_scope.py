"""Scope inference for synthetic ops on the corpus Qwen traces (the corpus pair whose traces
open mid-step: ~30 % of device time on kernels no recorded op launched)."""

from __future__ import annotations

import difflib

import numpy as np
import pandas as pd
import pytest

from porter.analysis.infer_scope import MIN_BLOCK, infer_synthetic_scopes
from porter.bundles.ingest import open_any

SIDES = ("h100", "mi300x")
_CACHE: dict = {}


def _bundle(corpus, side):
    if side not in _CACHE:
        path = corpus / "kineto" / f"{side}_Qwen_Qwen1.5-0.5B-Chat.json.gz"
        if not path.exists():
            pytest.skip("the Qwen pair is not in the corpus")
        _CACHE[side] = open_any(path)
    return _CACHE[side]


def _global_match(ops: pd.DataFrame, kernels: pd.DataFrame) -> dict[int, str]:
    """Reference: one SequenceMatcher over all synthetic against all linked kernels (the
    quadratic method this module replaced), synthetic op -> its donor's module."""
    syn_ids = set(ops.loc[ops["synthetic"], "op_id"])
    k = kernels.sort_values("start_us", kind="stable")
    is_syn = k["op_id"].isin(syn_ids).to_numpy()
    names, op_of = k["name"].tolist(), k["op_id"].tolist()
    a = [n for n, s in zip(names, is_syn) if s]
    b = [n for n, s in zip(names, is_syn) if not s]
    a_op = [o for o, s in zip(op_of, is_syn) if s]
    b_op = [o for o, s in zip(op_of, is_syn) if not s]
    votes: dict[int, list[int]] = {}
    for blk in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        if blk.size >= MIN_BLOCK:
            for off in range(blk.size):
                votes.setdefault(a_op[blk.a + off], []).append(b_op[blk.b + off])
    module = ops.set_index("op_id")["module"]
    return {op: module[max(set(v), key=v.count)] for op, v in votes.items()}


def _framework_share(ops: pd.DataFrame, kernels: pd.DataFrame) -> float:
    """Share of device time on kernels whose op names a framework op."""
    fw = ops.set_index("op_id")["framework_op"].reindex(kernels["op_id"]).to_numpy()
    dur = kernels["dur_us"].to_numpy()
    return float(dur[fw != ""].sum() / dur.sum())


@pytest.mark.corpus
@pytest.mark.parametrize("side", SIDES)
def test_windowed_match_covers_what_the_global_match_did(corpus, side):
    b = _bundle(corpus, side)
    ops, donor = infer_synthetic_scopes(b.ops, b.kernels)
    ref = _global_match(b.ops, b.kernels)
    syn = b.ops["synthetic"].to_numpy()
    assert len(ref) > 400  # the reference names most of the ~500 stand-ins
    inferred = dict(zip(ops.loc[syn, "op_id"], ops.loc[syn, "module"]))
    assert sum(m != "" for m in inferred.values()) >= sum(m != "" for m in ref.values())
    assert all(inferred[op] == m for op, m in ref.items())  # same scope wherever the reference found one
    assert (donor.to_numpy()[syn] >= 0).all()
    assert ops.loc[donor.to_numpy() >= 0, "synthetic"].all()  # only stand-ins take a donor


@pytest.mark.corpus
@pytest.mark.parametrize("side", SIDES)
def test_without_module_names_every_kernel_gets_a_framework_op(corpus, side):
    b = _bundle(corpus, side)
    stripped = b.ops.assign(module="")
    assert _framework_share(stripped, b.kernels) < 0.75  # the stand-ins carry ~30 % of the time
    ops, _ = infer_synthetic_scopes(stripped, b.kernels)
    assert _framework_share(ops, b.kernels) >= 0.99
    full, _ = infer_synthetic_scopes(b.ops, b.kernels)
    assert (ops["framework_op"] == full["framework_op"]).all()
    assert (ops["op_class"] == full["op_class"]).all()


@pytest.mark.corpus
@pytest.mark.parametrize("side", SIDES)
def test_no_sequence_match_falls_back_to_launch_order(corpus, side):
    """Stand-in kernels renamed apart match no block: each takes the op at its place counted
    from the end of the following step, which on these traces is the same framework op."""
    b = _bundle(corpus, side)
    syn_ids = set(b.ops.loc[b.ops["synthetic"], "op_id"])
    k = b.kernels.copy()
    mine = k["op_id"].isin(syn_ids).to_numpy()
    k.loc[mine, "name"] = [f"renamed {i}" for i in range(int(mine.sum()))]
    ops, donor = infer_synthetic_scopes(b.ops, k)
    full, _ = infer_synthetic_scopes(b.ops, b.kernels)
    syn = b.ops["synthetic"].to_numpy()
    assert (donor.to_numpy()[syn] >= 0).all()
    assert (ops.loc[syn, "framework_op"] == full.loc[syn, "framework_op"]).mean() >= 0.99


def _replicated(b, copies: int) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """The trace laid end to end `copies` times: each copy its own ids, steps and times."""
    span = float(b.kernels["start_us"].max() - b.kernels["start_us"].min()) + 1e6
    stride = int(b.ops["op_id"].max()) + 1
    ops, kernels = [], []
    for c in range(copies):
        o = b.ops.copy()
        o["op_id"] += c * stride
        o["parent_id"] = np.where(o["parent_id"] >= 0, o["parent_id"] + c * stride, -1)
        o["step"] = np.where(o["step"] >= 0, o["step"] + 10 * c, -1)
        k = b.kernels.copy()
        k["op_id"] += c * stride
        k["step"] = np.where(k["step"] >= 0, k["step"] + 10 * c, -1)
        k["start_us"] += c * span
        ops.append(o)
        kernels.append(k)
    return pd.concat(ops, ignore_index=True), pd.concat(kernels, ignore_index=True), stride


@pytest.mark.corpus
def test_replicas_take_donors_from_their_own_copy(corpus):
    """Each stand-in run is matched within the step that follows it, not across the whole
    trace: in a trace repeated 6 times, copy c's stand-ins get copy c's donors, the same
    ones the single trace gives."""
    b = _bundle(corpus, "h100")
    one, one_donor = infer_synthetic_scopes(b.ops, b.kernels)
    ops, kernels, stride = _replicated(b, 6)
    out, donor = infer_synthetic_scopes(ops, kernels)
    d = donor.to_numpy().reshape(6, len(b.ops))
    for c in range(6):
        expect = np.where(one_donor.to_numpy() >= 0, one_donor.to_numpy() + c * stride, -1)
        assert (d[c] == expect).all()
    assert (out["module"].to_numpy().reshape(6, -1) == one["module"].to_numpy()).all()


@pytest.mark.corpus
def test_kernels_of_ops_missing_from_the_table_donate_nothing(corpus):
    """A kernel whose op id the ops table lacks (a reader's NO_ID) is never a donor."""
    b = _bundle(corpus, "h100")
    linked = ~b.kernels["op_id"].isin(b.ops.loc[b.ops["synthetic"], "op_id"])
    k = b.kernels.copy()
    k.loc[linked, "op_id"] = -1
    ops, donor = infer_synthetic_scopes(b.ops, k)
    assert (donor == -1).all()
    assert (ops["module"] == b.ops["module"]).all()


@pytest.mark.corpus
def test_replicated_pair_aligns_step_by_step(corpus):
    """Scope alignment pairs the k-th step of each side (one sequence over all steps grows
    with its square): a pair repeated 4 times aligns fully, into about 4 times the single
    pair's groups, and no group of in-step ops spans two copies (ops outside steps, 8 per
    copy here, all sort before the first step and join it)."""
    from porter.analysis.align import align

    s, t = _bundle(corpus, "h100"), _bundle(corpus, "mi300x")
    one = align(s.ops, t.ops, s.kernels, t.kernels)
    (so, sk, s_stride), (to, tk, t_stride) = _replicated(s, 4), _replicated(t, 4)
    al = align(so, to, sk, tk)
    cov = al.coverage()
    assert min(cov["source"], cov["target"]) >= 0.995, cov
    assert abs(len(al.groups) - 4 * len(one.groups)) <= 0.01 * 4 * len(one.groups)
    for ids, ops, stride in ((al.groups["source_ids"], so, s_stride), (al.groups["target_ids"], to, t_stride)):
        step = ops.set_index("op_id")["step"]
        in_steps = [g for g in ids if (step.reindex(g).to_numpy() >= 0).all()]
        assert len(in_steps) > 0.9 * len(ids)
        assert all(len({i // stride for i in g}) == 1 for g in in_steps)
