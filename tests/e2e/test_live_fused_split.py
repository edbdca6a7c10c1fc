"""Live: an inductor kernel that fuses a BatchNorm with a planted erfinv activation in another
module is split between them by eager's measured time for each call, not by element count.

resnet_erfinv (tests/models/library_models.py: transformers' ResNet, its first layer's
activation an erfinv) on cpu -> cpu:inductor. Inductor computes the BatchNorm (four
elementwise nodes), the clamp and the erfinv in one C++ kernel, labelled with the layer that
holds both modules; its erfinv is scalar code many times slower than eager's. By elements the
BatchNorm took four fifths of that kernel and ranked as the model's largest loss; priced by
eager's time for each member call, the activation takes what eager spent on it relative to the
BatchNorm (porter.analysis.split_fused, porter.analysis.fused_shares).
"""

from __future__ import annotations

import pytest
import torch

from porter.analysis.fused_shares import decode
from porter.analysis.op_calls import FUSED_MEASURED
from porter.analysis.optime import op_times
from porter.bundles.bundle import load_bundle
from porter.capture.run import capture
from porter.pipeline.diagnose import analyse
from tests.e2e.test_live_identity import LIBRARY, LIVE_OPTS
from tests.models.library_models import ERFINV_AT, ERFINV_NORM

SHARE_TOLERANCE = 0.1  # the split uses each call's median over steps, the check eager's mean per step


@pytest.fixture(scope="module")
def diagnosis(tmp_path_factory):
    out = tmp_path_factory.mktemp("erfinv")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as tests/e2e/test_live_identity.py: inductor's OpenMP waits on a shared machine
    try:
        capture(f"{LIBRARY}:resnet_erfinv", "cpu", out / "src", LIVE_OPTS)
        capture(f"{LIBRARY}:resnet_erfinv", "cpu:inductor", out / "tgt", LIVE_OPTS)
    finally:
        torch.set_num_threads(threads)
    return analyse(load_bundle(out / "src"), load_bundle(out / "tgt"))


def _kernel(d):
    """The target's fused op holding the planted erfinv call, and its children (module shares)."""
    ops = d.alignment.target_ops
    holds = ops["call_split"].astype(str).str.contains('"erfinv#0"', regex=False) if "call_split" in ops.columns else None
    assert holds is not None and holds.any(), "no fused kernel holds the erfinv call with another module's"
    fused = ops[holds]
    assert fused["name"].str.startswith("graph_").all() and set(fused["module"]) != {ERFINV_AT}
    return fused, ops[ops["parent_id"].isin(fused["op_id"])]


@pytest.mark.slow
def test_the_activation_takes_the_kernel_by_eagers_measured_share(diagnosis):
    d = diagnosis
    fused, kids = _kernel(d)
    times = d.alignment.target_times.values
    by_module = times.reindex(kids["op_id"]).groupby(kids["module"].to_numpy()).sum()
    whole = float(by_module.sum())
    assert whole > 0 and set(by_module.index) == {ERFINV_AT, ERFINV_NORM}  # pushed down from the layer's label
    act = float(by_module[ERFINV_AT]) / whole
    # eager's own time for the two modules (unfused, unsplit): the share the activation should get
    src = d.by_module.set_index("key")
    eager = src.loc[ERFINV_AT, "source_us"] / (src.loc[ERFINV_AT, "source_us"] + src.loc[ERFINV_NORM, "source_us"])
    assert act > 0.5 and act == pytest.approx(eager, abs=SHARE_TOLERANCE)
    # marked measured: the children's names, each call's pricing, the stats, the op-call evidence
    assert kids["name"].str.endswith(", measured]").all()
    priced = [s for _, r in fused.iterrows() for s in decode(r["call_split"])]
    assert {s.call for s in priced if s.module == ERFINV_AT} == {"clamp#0", "erfinv#0"}
    assert all(s.measured for s in priced if s.module in (ERFINV_AT, ERFINV_NORM))
    # the stats count the split kernels' time as profiled, not the per-call medians over steps
    # (porter.analysis.step_median) that `times` holds: a slow step moves one and not the other
    stats = d.alignment.stats
    profiled = float(op_times(d.alignment.target_ops).values.reindex(kids["op_id"]).sum())
    assert stats["target_split_by_measurement_us"] >= profiled * (1 - 1e-9)
    calls = d.alignment.op_calls.set_index(["module", "op", "call"])
    assert calls.loc[(ERFINV_AT, "erfinv", 0), "evidence"] == FUSED_MEASURED
    assert calls.loc[(ERFINV_AT, "erfinv", 0), "estimated_us"] == 0.0


@pytest.mark.slow
def test_the_planted_module_is_first_by_time_gap(diagnosis):
    rows = diagnosis.by_module.set_index("key")
    gap = (rows["target_us"] - rows["source_us"]).sort_values(ascending=False)
    assert gap.index[0] == ERFINV_AT, gap.head(3)
    assert gap[ERFINV_AT] > gap[ERFINV_NORM] > 0


@pytest.mark.slow
def test_the_report_says_how_much_time_the_measured_split_placed(diagnosis):
    import orjson

    from porter.pipeline.document import encode, to_json
    from reports.build import model_from_diagnosis
    from reports.view import split_text

    d = orjson.loads(encode(to_json(diagnosis)))
    m = model_from_diagnosis(d)
    share = d["alignment"]["stats"]["target_split_by_measurement_share"]
    assert share > 0 and m.measured_split_share["target"] == share
    text = split_text(m)
    assert "by the other side's measured time for the same op calls" in text
    assert f"{share * 100:.1f}% of the target's" in text
