"""A module re-timed alone reads the same on two identical stacks, whatever ran before it.

Confirmation times the source's call of a module first and the target's right after, on the
same recorded arguments; a large module earlier in the loop evicts those arguments, so without
settling calls the source pays the cache misses and the target does not, and eager against
eager reads a gap (-112 us of 470 on this machine's 32 MB L3). porter.capture.confirm.SETTLE_CALLS.
"""

from __future__ import annotations

import time

import torch

from porter.capture.confirm import confirm


class _EvictThenAct(torch.nn.Module):
    """A 36 MB GEMM (beyond a 32 MB last-level cache) before a GELU on a 3 MB activation."""

    def __init__(self) -> None:
        super().__init__()
        self.big = torch.nn.Linear(3072, 3072)
        self.act = torch.nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.big(x).repeat(1, 64))


def test_the_same_stack_on_both_sides_reads_no_gap_after_an_evicting_module() -> None:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = _EvictThenAct().eval()
        big, act = confirm(model, (torch.randn(4, 3072),), ["big", "act"], "eager", "eager", cpu_clock=True)
    finally:
        torch.set_num_threads(threads)
    assert big.error == "" and act.error == "" and act.calls == 1 and act.repeats >= 10
    assert act.source_us > 50, act  # the GELU does real work: a 0 gap is not a 0 time
    # tolerance: 5% of the module's time. Settled, four runs read -9 to +2 us of ~360 (2.5%);
    # unsettled the source read 24% slower, with one settling call 6-10%
    assert abs(act.gap_us) <= 0.05 * act.source_us or act.gap_low_us <= 0 <= act.gap_high_us, act


def test_each_module_is_timed_in_blocks_of_its_own_calls_each_side_first_in_half() -> None:
    """A module's calls run in blocks with nothing else between them, the modules' blocks in
    turn; within a block even repeats run a call's source first and odd repeats its target, so
    the order's bias falls on both sides alike."""
    from porter.capture.confirm import SETTLE_CALLS, WARM_ROUNDS, interleaved_samples

    ran: list[str] = []
    keys = ["m|src0", "m|floorsrc0", "m|tgt0", "m|floortgt0", "n/o|src0", "n/o|tgt0"]
    samples = interleaved_samples({k: (lambda k=k: ran.append(k)) for k in keys}, 5, time.perf_counter, block=2)
    assert {k: len(v) for k, v in samples.items()} == {k: 5 for k in keys}
    m_even, m_odd = keys[:4], ["m|tgt0", "m|floortgt0", "m|src0", "m|floorsrc0"]
    n_even, n_odd = keys[4:], ["n/o|tgt0", "n/o|src0"]
    # two calls of each, then untimed rounds of every module's block, each call once per repeat
    warm = 2 * len(keys) + WARM_ROUNDS * len(m_even + m_odd + n_even + n_odd)
    assert WARM_ROUNDS >= 1 and ran[2 * len(keys):warm] == (m_even + m_odd + n_even + n_odd) * WARM_ROUNDS
    timed = ran[warm:][SETTLE_CALLS::SETTLE_CALLS + 1]  # past the warm-up, each timed call
    assert timed == (m_even + m_odd + n_even + n_odd) * 2 + m_even + n_even  # rounds of 2, 2, then 1


def test_the_floor_reads_the_first_tensor_wherever_it_is_and_costs_what_a_bare_call_costs() -> None:
    """The floor is taken off every call on both sides, so on eager it must cost what the
    cheapest module call costs: searching the arguments in each call (a pytree flatten) made it
    15.5 us against 7.6 here, and every eager-side module read ~8 us cheaper (llama_base's
    RMSNorms -6.5 us against -13.5 in benchmarks/live_modules.py's alone timing)."""
    from porter.capture.confirm import _Floor

    x, cos = torch.randn(2, 8, 16), torch.randn(2, 8, 4)
    nested = _Floor((), {"mask": None, "position_embeddings": (cos, cos)})
    assert float(nested(mask=None, position_embeddings=(cos, cos))) == float(cos[0, 0, 0]) + 1
    assert float(_Floor((None, x), {})(None, x)) == float(x[0, 0, 0]) + 1

    class Bare(torch.nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return t[0, 0, 0] + 1

    floor, bare = _Floor((x,), {"flag": True}), Bare()
    times: dict[str, list[float]] = {"floor": [], "bare": []}
    for _ in range(3000):  # interleaved, so that load falls on both alike
        for name, f, kw in (("floor", floor, {"flag": True}), ("bare", bare, {})):
            t0 = time.process_time()
            f(x, **kw)
            times[name].append(time.process_time() - t0)
    med = {k: sorted(v)[len(v) // 2] * 1e6 for k, v in times.items()}
    # tolerance: 1.5x and 2 us over the bare call's median; the flattening floor read 2.0x
    assert med["floor"] <= 1.5 * med["bare"] + 2.0, med
