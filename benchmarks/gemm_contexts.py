"""One GEMM in three contexts, eager against XLA:CPU, one thread each (a script, not a test).

BERT-base's `output/dense` (Linear(3072, 768) on 2x32x3072): warm (one layer, its weights in
cache), cold (twelve distinct layers in one forward, as the model holds them) and beside its
context in the model (the diagnosis' profiled time). Process CPU time, interleaved, median.
Why: at this size a leaf timed alone read 4.7-8.2 ms for twelve identical layers, so the alone
reference needs its own check (BENCHMARKS.md, issue 24, "Real sizes against modules timed alone").

    .venv/bin/python -m benchmarks.gemm_contexts [--layers 12] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any, Callable

import torch

from benchmarks.live_modules import samples_us
from porter.runtime.threads import applied, current, one_cpu_while_xla_starts


def median_cpu_us(calls: dict[str, Callable[[], Any]], repeats: int, per: int = 1) -> dict[str, float]:
    """Median process CPU time per call (live_modules' interleaved sampling), per layer."""
    return {k: statistics.median(v) / per for k, v in samples_us(calls, repeats).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args()
    with applied(current()):
        with one_cpu_while_xla_starts():
            import jax
            import jax.numpy as jnp

            jax.devices()
        torch.manual_seed(0)
        lins = [torch.nn.Linear(3072, 768).eval() for _ in range(a.layers)]
        x = torch.randn(2, 32, 3072)
        ws = [jnp.asarray(m.weight.detach().numpy()) for m in lins]
        bs = [jnp.asarray(m.bias.detach().numpy()) for m in lins]
        jx = jnp.asarray(x.numpy())
        one = jax.jit(lambda x, w, b: x @ w.T + b)
        many = jax.jit(lambda x, ws, bs: sum(x @ w.T + b for w, b in zip(ws, bs)))

        def eager_one() -> None:
            with torch.no_grad():
                lins[0](x)

        def eager_many() -> None:
            with torch.no_grad():
                sum(m(x) for m in lins)

        warm = median_cpu_us({"eager": eager_one, "xla": lambda: one(jx, ws[0], bs[0]).block_until_ready()},
                             a.repeats * 5)
        cold = median_cpu_us({"eager": eager_many, "xla": lambda: many(jx, ws, bs).block_until_ready()},
                             a.repeats, per=a.layers)
        threads = torch.get_num_threads()
    print(f"torch threads {threads}; Linear(3072, 768) on 2x32x3072, process CPU time per layer:")
    print(f"  warm (one layer):           eager {warm['eager']:.0f} us, xla {warm['xla']:.0f} us")
    print(f"  cold ({a.layers} distinct layers): eager {cold['eager']:.0f} us, xla {cold['xla']:.0f} us")


if __name__ == "__main__":
    main()
