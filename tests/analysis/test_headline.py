"""The headline ratio: interleaved unprofiled timing, its bootstrap interval, and its place in diagnosis.json."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from porter.capture.interleaved import InterleaveOptions, time_interleaved
from porter.core.stats import CHUNKS, paired_ratio, unpaired_ratio


def test_pairs_alternate_which_side_runs_first():
    calls: list[str] = []
    timing = time_interleaved(lambda: calls.append("s"), lambda: calls.append("t"),
                              InterleaveOptions(warmup=1, min_pairs=6, max_pairs=6, budget_s=60))
    assert calls == ["s", "t"] + ["s", "t", "t", "s"] * 3  # warm-up, then A B, B A, ...
    assert timing.source_first == [True, False] * 3
    assert timing.stopped == "max_pairs" and len(timing.source_s) == len(timing.target_s) == 6


def test_bootstrap_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    """Paired log-normal noise around a known ratio 1.3: seeded, so the count is exact, and a
    95% interval must cover the truth in roughly 95% of 200 experiments (>= 88%: the
    binomial 1st percentile for 200 trials at p = 0.95 is ~89%)."""
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(200):
        base = rng.lognormal(np.log(2e-3), 0.3, 40)  # shared machine state: cancels in the ratio
        s = base * rng.lognormal(0, 0.05, 40)
        t = 1.3 * base * rng.lognormal(0, 0.05, 40)
        iv = paired_ratio(s, t, resamples=500)
        covered += iv.low <= 1.3 <= iv.high
    assert covered >= 176


def test_interval_keeps_its_coverage_when_load_drifts_over_many_pairs():
    """The ratio wanders (AR(1) in log, rho 0.9: another process's load coming and going over
    tens of pairs) around a true 1.3. The plain pair bootstrap treats neighbours as
    independent and covers the truth in about a third of 200 seeded runs; the moving-block
    bootstrap must cover it in at least 70% (measured 76%; 95% would need far more pairs).
    Both without the batch-means widening (chunks=0), which the next test is about."""
    rng = np.random.default_rng(3)
    covered = {"blocks": 0, "plain": 0}
    for k in range(200):
        drift = np.zeros(150)
        step = rng.normal(0, 0.08 * np.sqrt(1 - 0.9 ** 2), 150)
        for i in range(1, 150):
            drift[i] = 0.9 * drift[i - 1] + step[i]
        s = rng.lognormal(np.log(2e-3), 0.3, 150)
        t = 1.3 * s * np.exp(drift + rng.normal(0, 0.03, 150))
        for name, block in (("blocks", None), ("plain", 1)):
            iv = paired_ratio(s, t, resamples=500, seed=k, block=block, chunks=0)
            covered[name] += iv.low <= 1.3 <= iv.high
    assert covered["blocks"] >= 140 and covered["plain"] <= 100, covered


def test_three_consecutive_runs_overlap_when_load_drifts_slower_than_a_run_resamples():
    """The issue's check, simulated: one long stretch of a machine whose speed ratio drifts
    (AR(1) in log, rho 0.98 per pair, sd 4%: about 50 pairs per swing, what consecutive 10 s
    windows of one process showed here with other jobs running), cut into three consecutive
    runs of 300 pairs. The block bootstrap alone sees each run's own stretch and its three
    intervals overlap in 30 of 100 seeded stretches; widened to the 5-chunk batch means they
    overlap in 84 (8 chunks: 75; >= 75 asserted; <= 45 for the bootstrap alone)."""
    rng = np.random.default_rng(5)
    n, rho, overlap = 900, 0.98, {"bootstrap": 0, "batch means": 0}
    for k in range(100):
        drift = np.zeros(n)
        step = rng.normal(0, 0.04 * np.sqrt(1 - rho ** 2), n)
        drift[0] = rng.normal(0, 0.04)
        for i in range(1, n):
            drift[i] = rho * drift[i - 1] + step[i]
        s = rng.lognormal(np.log(2e-3), 0.3, n)
        t = 1.3 * s * np.exp(drift + rng.normal(0, 0.03, n))
        for name, chunks in (("bootstrap", 0), ("batch means", CHUNKS)):
            ivs = [paired_ratio(s[j:j + 300], t[j:j + 300], resamples=300, seed=k, chunks=chunks) for j in (0, 300, 600)]
            overlap[name] += max(iv.low for iv in ivs) <= min(iv.high for iv in ivs)
    assert overlap["batch means"] >= 75 and overlap["bootstrap"] <= 45, overlap


def test_batch_means_needs_four_chunks_and_widens_only_where_chunks_disagree():
    """Under 12 ratios there are not 4 chunks of 3: the bootstrap alone. Chunks that agree
    (the same ratio throughout) leave the interval as the bootstrap made it. A machine that
    switches between two speeds every 48 pairs (ratio 1.0, then 1.1; 5 chunks of 48 ratios,
    each on one level) widens it on both sides: the chunk medians disagree beyond the pairs'
    noise, which the bootstrap's automatic blocks do not span."""
    from porter.core.stats import batch_means

    assert batch_means(np.full(11, 1.3), np.ones(11)) is None
    steady = paired_ratio(np.ones(40), np.full(40, 1.3))
    assert steady.low == steady.high == 1.3
    rng = np.random.default_rng(1)
    levels = np.repeat(np.tile([1.0, 1.1], 3)[:5], 48)
    s = rng.lognormal(np.log(2e-3), 0.1, 240)
    t = s * levels * rng.lognormal(0, 0.03, 240)
    alone, widened = paired_ratio(s, t, chunks=0), paired_ratio(s, t)
    assert widened.low < alone.low - 0.01 and widened.high > alone.high + 0.005, (alone, widened)
    assert "batch means" in widened.method and "batch means" not in alone.method


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_cpu_clock_leaves_out_time_the_process_did_not_run():
    """Both forwards do 2 ms of CPU work; the target also waits 3 ms off the CPU (as a forward
    preempted by another process would). On wall time the ratio is about (2+3)/2 = 2.5; on the
    process's CPU time it is about 1, and the wall samples are kept beside it. Bounds +-30%:
    a 2 ms spin on a shared machine is itself preempted now and then."""
    opts = InterleaveOptions(warmup=1, min_pairs=40, max_pairs=40, budget_s=60)
    source = lambda: _spin(0.002)  # noqa: E731
    target = lambda: (_spin(0.002), time.sleep(0.003))  # noqa: E731
    cpu = time_interleaved(source, target, opts, headline_clock="cpu")
    assert cpu.clock == "cpu" and 0.7 < cpu.interval().ratio < 1.3, cpu.interval()
    assert 1.75 < cpu.other_interval().ratio < 3.25, cpu.other_interval()
    wall = time_interleaved(source, target, opts)
    assert wall.clock == "wall" and 1.75 < wall.interval().ratio < 3.25
    with pytest.raises(ValueError):
        time_interleaved(source, target, opts, headline_clock="gpu")


def test_too_few_samples_give_no_interval_and_count_as_wide():
    iv = paired_ratio([1.0, 2.0], [1.0, 2.0])
    assert iv.ratio == 1.0 and iv.low != iv.low and iv.wide
    assert unpaired_ratio([1.0], [2.0]).wide


def _forward(model: torch.nn.Module, x: torch.Tensor, repeats: int):
    def step():
        with torch.no_grad():
            for _ in range(repeats):
                model(x)
    return step


def _timed_mlp(target_repeats: int):
    """A small MLP forward timed against the same forward run target_repeats times per step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 256)).eval()
    x = torch.randn(64, 256)
    return time_interleaved(_forward(model, x, 1), _forward(model, x, target_repeats),
                            InterleaveOptions(warmup=3, min_pairs=60, budget_s=3.0, goal_half_width=0.0)).interval()


SAME = 0.05  # see test_same_model_on_both_sides_gives_one_inside_the_interval


def test_same_model_on_both_sides_gives_one_inside_the_interval():
    """True ratio 1. A 30-block bootstrap interval covers the truth ~95% of the time only when
    the machine's load holds still; on this shared 2-core machine it does not, so the interval
    must meet 1 +- 5% (the slowed-model test below is the one that tells a broken ratio apart)."""
    iv = _timed_mlp(1)
    assert iv.low <= 1.0 + SAME and iv.high >= 1.0 - SAME, iv
    assert abs(iv.ratio - 1.0) < 0.2


def test_model_slowed_on_purpose_lands_inside_its_interval():
    """The target runs the forward three times per step: true ratio 3 (Python call overhead
    is < 1% of a 256x256 MLP forward on 64 rows). On a quiet machine the interval holds 3 to a
    few percent; on this shared 2-core machine (load averages of 15 seen) three forwards in a
    row do not always cost exactly three, so the check is that the interval meets 3 +- 15%:
    a swapped, unpaired or unblocked ratio (1/3, 1, 9) fails it by far."""
    iv = _timed_mlp(3)
    assert iv.low <= 3.0 * 1.15 and iv.high >= 3.0 * 0.85, iv
    assert 2.0 < iv.ratio < 4.0


def test_recorded_pair_headline_says_steps_and_spread(corpus, tmp_path):
    from tests.conftest import run_porter

    k = corpus / "kineto"
    r = run_porter("diagnose", "--from", str(k / "h100_gaunernst_bert-small-uncased.json.gz"),
                   "--to", str(k / "mi300x_gaunernst_bert-small-uncased.json.gz"), "-o", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr
    h = json.loads((tmp_path / "d" / "diagnosis.json").read_text())["headline"]
    assert h["basis"] == "device time per profiled step"
    assert h["steps"]["source"]["n"] >= 1 and h["steps"]["target"]["n"] >= 1
    lines = r.stdout.splitlines()
    first = " ".join(" ".join(lines[:3]).split())  # the answer first: the pair, the ratio, its interval (wrapped)
    assert first.startswith("headline: h100_gaunernst_bert-small-uncased -> mi300x_gaunernst_bert-small-uncased: "
                            f"target/source x{h['ratio']:.3f}"), first
    assert any(line.strip().startswith("UNCERTAIN:") for line in lines[:4]) == bool(h["advice"])
    assert not any(line.startswith("how measured:") for line in lines[:10])  # the method comes last


def test_oversubscribed_machine_runs_both_stacks_single_threaded():
    import os

    from porter.runtime.threads import XLA_SINGLE, applied, decide

    assert decide(3.0, 2).single and "load average 3.0 on 2 CPUs" in decide(3.0, 2).why
    assert not decide(1.9, 2).single and not decide(None, 2).single
    assert decide(0.1, 2, "1").single and not decide(9.0, 2, "all").single
    before, flags = torch.get_num_threads(), os.environ.get("XLA_FLAGS")
    with applied(decide(9.0, 2)):
        assert torch.get_num_threads() == 1 and XLA_SINGLE in os.environ["XLA_FLAGS"]
    assert torch.get_num_threads() == before and os.environ.get("XLA_FLAGS") == flags
    with applied(decide(0.5, 2)):  # a quiet machine: nothing changes
        assert torch.get_num_threads() == before


def test_one_thread_per_side_is_the_default_whatever_the_load():
    """A load-keyed rule flipped the demo's headline between runs (x1.012, x0.634, x0.822):
    the default must not depend on the load; PORTER_THREADS=all / auto opt out."""
    from porter.runtime.threads import current

    assert current({}).single and current({"PORTER_THREADS": "1"}).single
    assert not current({"PORTER_THREADS": "all"}).single
    quiet = current({"PORTER_THREADS": "auto"})
    assert quiet.single == (quiet.load_average is not None and quiet.load_average > quiet.cpus)


@pytest.mark.slow
def test_live_headline_comes_from_interleaved_unprofiled_forwards(tmp_path, monkeypatch):
    """cpu eager on both sides: the same prepared model twice, so the true ratio is 1."""
    from porter.analysis.headline import CPU_CLOCK, SINGLE_THREAD
    from porter.capture.options import CaptureOptions
    from porter.pipeline.diagnose import diagnose_specs

    monkeypatch.setenv("PORTER_THREADS", "1")  # as on an oversubscribed machine
    threads = torch.get_num_threads()

    d, path = diagnose_specs("cpu", "cpu", tmp_path / "d", model="mlp", report=False,
                             capture_options=CaptureOptions(steps=2, warmup=1, repeats=3, activations=False),
                             interleave=InterleaveOptions(min_pairs=60, budget_s=4.0, goal_half_width=0.0))
    h = json.loads(path.read_text())["headline"]
    assert h["basis"].startswith("unprofiled") and SINGLE_THREAD in h["basis"] and h["pairs"]["threads"]["single"]
    # both on the CPU, one thread each: the headline is on process CPU time, the wall ratio kept beside it
    assert h["pairs"]["clock"] == "cpu" and CPU_CLOCK in h["basis"] and "wall time gives x" in h["basis"]
    # freed memory kept in the process (porter.runtime.allocator), said in the basis, where glibc runs
    from porter.analysis.headline import HEAP_KEPT
    from porter.runtime.allocator import _glibc

    assert h["pairs"]["heap"]["kept"] == (_glibc() is not None) == (HEAP_KEPT in h["basis"])
    other = h["pairs"]["other_clock"]
    assert other["clock"] == "wall" and len(other["source_s"]) == len(h["pairs"]["source_s"])
    assert torch.get_num_threads() == threads  # restored once the pair is done
    assert len(h["pairs"]["source_s"]) // 2 == h["n"] >= 30  # A B B A blocks
    assert h["ci95"][0] <= 1.0 + SAME and h["ci95"][1] >= 1.0 - SAME
    for side in ("source", "target"):
        s = h["sides"][side]
        assert s["profiler_overhead"] == pytest.approx(s["profiled_step_s"] / s["unprofiled_wall_s"])
        assert s["unprofiled_wall_s"] == pytest.approx(float(np.median(other[f"{side}_s"])))
    doc = json.loads(path.read_text())
    total = sum(g["target_step_us"] for g in doc["groups"])
    assert total <= h["sides"]["target"]["unprofiled_step_s"] * 1e6 * (1 + 1e-9)
    # roll-ups hold every op, matched or not: each adds up to the side's profiled op time per step
    # less the profiler's slowdown (1e-6 relative: float sums of a few hundred rows), which is the
    # unprofiled step less the time between ops, so within it
    for key in ("by_module", "by_class", "by_framework_op", "by_module_kind"):
        for side in ("source", "target"):
            s = h["sides"][side]
            want = sum(r[f"{side}_us"] for r in doc[key]) / s["profiled_steps"] * s["step_scale"]
            got = sum(r[f"{side}_step_us"] for r in doc[key])
            assert got == pytest.approx(want, rel=1e-6), (key, side)
            assert 0.3 * s["unprofiled_step_s"] * 1e6 < got <= s["unprofiled_step_s"] * 1e6 * (1 + 1e-6), (key, side)


class _PythonBetweenOps(torch.nn.Module):
    """A dense layer, then pure Python arithmetic in the parent's forward (between ops): eager
    pays it every forward, a jitted forward only while tracing."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = torch.nn.Linear(512, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = 0
        for i in range(400_000):  # ~10-20 ms of interpreter time, no tensor op
            acc += i & 7
        return self.dense(x) * (1 + acc * 0)


def python_between_ops():
    torch.manual_seed(0)
    return _PythonBetweenOps().eval(), (torch.randn(256, 512),)


@pytest.mark.slow
def test_time_between_ops_is_not_spread_over_the_modules(tmp_path):
    """An eager forward whose parent spends 3-5x its GEMM in Python: its dense layer's step time
    stays the GEMM's, as on XLA (which runs the Python once, while tracing), instead of taking
    the Python time in proportion (the old share-of-step scaling read it 4-6x the target's)."""
    from porter.capture.options import CaptureOptions
    from porter.pipeline.diagnose import diagnose_specs

    d, path = diagnose_specs("cpu", "xla", tmp_path / "d", model=f"{__file__}:python_between_ops", report=False,
                             capture_options=CaptureOptions(steps=3, warmup=1, repeats=3, activations=False),
                             interleave=InterleaveOptions(min_pairs=20, budget_s=3.0, goal_half_width=0.0))
    doc = json.loads(path.read_text())
    sides = doc["headline"]["sides"]
    dense = next(r for r in doc["by_module"] if r["key"] == "dense")
    src, tgt = dense["source_step_us"], dense["target_step_us"]
    # the whole step: eager pays the Python, XLA does not
    assert sides["source"]["unprofiled_step_s"] > 2.5 * sides["target"]["unprofiled_step_s"]
    # the GEMM: within 2x of the same layer timed alone on the same stack and thread count (the
    # old scaling read it 4-6x). Not against XLA's: the XLA client of a process that started it
    # earlier keeps its own threads, and XLA:CPU's dot is not MKL's (CI read 2.04x with a correct
    # attribution).
    model, (x,) = python_between_ops()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the thread policy's default (porter/runtime/threads.py)
    try:
        with torch.no_grad():
            for _ in range(3):
                model.dense(x)
            alone_us = []
            for _ in range(15):
                t0 = time.perf_counter()
                model.dense(x)
                alone_us.append((time.perf_counter() - t0) * 1e6)
    finally:
        torch.set_num_threads(threads)
    alone = float(np.median(alone_us))
    assert 0.5 < src / alone < 2.0, (src, alone, tgt)
    assert src < 0.5 * sides["source"]["unprofiled_step_s"] * 1e6


def test_the_profilers_slowdown_is_taken_out_only_where_it_is_measured():
    """step_scale: a profiled step within the noise of the unprofiled ones leaves the groups as
    profiled (a 2% spread, drawn 40 and 9 times, put the ratio of medians 1-3% off 1 either way),
    a profiler that costs 25% is taken out, and profiled steps faster than the unprofiled ones
    (which alternate with the other stack's, caches cold) are not scaled up."""
    from porter.analysis.headline import step_scale

    for seed in range(20):
        rng = np.random.default_rng(seed)
        unprofiled = 0.05 * (1 + 0.02 * rng.standard_normal(40))
        same = 0.05 * (1 + 0.02 * rng.standard_normal(9))
        assert step_scale(unpaired_ratio(unprofiled, same)) == 1.0, seed
        slower = 1.25 * 0.05 * (1 + 0.02 * rng.standard_normal(9))
        slowdown = unpaired_ratio(unprofiled, slower)
        assert step_scale(slowdown) == pytest.approx(1 / 1.25, rel=0.03), seed
        assert step_scale(slowdown) == 1 / slowdown.ratio
        faster = 0.85 * 0.05 * (1 + 0.02 * rng.standard_normal(9))  # the unprofiled forwards' cold caches
        assert step_scale(unpaired_ratio(unprofiled, faster)) == 1.0, seed
    # too few profiled steps for an interval: the slowdown as measured
    assert step_scale(unpaired_ratio([0.05, 0.05], [0.07, 0.07])) == pytest.approx(0.05 / 0.07)


def test_few_steps_get_an_order_statistic_interval_that_holds_the_medians_spread():
    from porter.core.stats import SMALL_N, few_sample_ratio

    src, tgt = [1.0, 1.2, 5.0, 4.0, 1.1], [0.5, 0.52, 0.55, 0.6, 0.51]
    iv = few_sample_ratio(src, tgt)
    # five a side: each median's interval is its range, so [min_t / max_s, max_t / min_s]
    assert iv.ratio == pytest.approx(0.52 / 1.2)
    assert (iv.low, iv.high) == (pytest.approx(0.5 / 5.0), pytest.approx(0.6 / 1.0)) and iv.wide
    assert "order-statistic" in iv.method and len(src) < SMALL_N
    many = np.random.default_rng(0).normal(1.0, 0.01, SMALL_N)
    assert "bootstrap" in few_sample_ratio(many, many * 2).method  # enough samples: the bootstrap


def _bundle_pair(tmp_path):
    from tests.conftest import run_porter

    for name in ("a", "b"):
        r = run_porter("capture", "--on", "cpu", "--no-activations", "-o", str(tmp_path / name))
        assert r.returncode == 0, r.stderr[-2000:]
    return tmp_path / "a", tmp_path / "b"


@pytest.mark.slow
def test_two_captured_bundles_get_the_interval_their_steps_allow_and_a_noisy_capture_makes_it_uncertain(tmp_path):
    """Two `porter capture` bundles diagnosed as a pair: the per-step figures are the steps as the
    profiler measured them (not the per-call medians, whose step totals are all equal: "+-0%",
    an interval x0.806-x0.806), and a side whose capture said it was noisy makes the headline
    uncertain with the reason."""
    import pandas as pd

    from tests.conftest import run_porter

    a, b = _bundle_pair(tmp_path)
    r = run_porter("diagnose", "--from", str(a), "--to", str(b), "-o", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads((tmp_path / "d" / "diagnosis.json").read_text())
    steps = d["end_to_end"]["source_per_step_us"]["samples"]
    raw = pd.read_parquet(a / "ops.parquet").query("step >= 0").groupby("step")["device_us"].sum()
    assert len(steps) == len(raw) and len(set(steps)) > 1  # five steps measured alike to the microsecond: never
    assert sorted(steps) == pytest.approx(sorted(raw.to_numpy()), rel=0.02)  # fused splits only move time
    h = d["headline"]
    lo, hi = h["ci95"]
    assert lo < h["ratio"] < hi and "order-statistic" in h["method"]
    # either of a capture's checks, timed or profiled steps, as porter.analysis.headline.noisy_captures
    # reads them (a CI run's profiled steps read 12% and were flagged; the timed ones were not)
    noisy = [bool(m["timing"].get("noisy") or (m.get("profiled_timing") or {}).get("noisy"))
             for m in (json.loads((p / "manifest.json").read_text()) for p in (a, b))]
    assert bool(h.get("noisy_captures")) == any(noisy)
    # the source's capture marked noisy (as a busy machine marks it): uncertain, saying which side
    m = json.loads((a / "manifest.json").read_text())
    m["timing"]["noisy"], m["timing"]["spread"] = True, 3.25
    (a / "manifest.json").write_text(json.dumps(m))
    r = run_porter("diagnose", "--from", str(a), "--to", str(b), "-o", str(tmp_path / "d2"))
    assert r.returncode == 0, r.stderr[-2000:]
    h = json.loads((tmp_path / "d2" / "diagnosis.json").read_text())["headline"]
    assert h["wide"] and h["noisy_captures"][0].startswith("source (timing: IQR/median 325%)")
    assert "UNCERTAIN: source (timing: IQR/median 325%)" in r.stdout
