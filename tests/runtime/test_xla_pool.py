"""XLA:CPU's intra-op pool under porter's one-thread policy (porter.runtime.threads).

The Eigen flag alone left XLA:CPU's YNN dots and partitioned loop fusions on two threads of a
2-core machine, so the profile's dot events covered half the dot's CPU time while the headline
said "one intra-op thread". Checked in a fresh process (the client starts once per process):
how many threads did the work of 60 dots, from each thread's CPU time in /proc.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import run_probe

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs Linux and two CPUs or more (one CPU has one thread anyway)")

PROBE = r"""
import json, os, sys
from porter.runtime.threads import applied, decide
from porter.targets import get_stack

def ticks():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    return out

policy = decide(0.0, 2, sys.argv[1])
with applied(policy):
    assert get_stack("xla").availability("cpu").ok
    import jax, jax.numpy as jnp
    x, w = jnp.ones((256, 512)), jnp.ones((512, 4096))
    f = jax.jit(lambda a, b: a @ b)
    jax.block_until_ready(f(x, w))
    before = ticks()
    for _ in range(60):
        jax.block_until_ready(f(x, w))
    after = ticks()
    work = {t: after[t] - before.get(t, 0) for t in after}
    total = sum(work.values())
    print(json.dumps({"busy": sum(1 for v in work.values() if v > 0.1 * total), "ticks": total,
                      "cpus": sorted(os.sched_getaffinity(0))}))
"""


def _probe(setting: str) -> dict:
    return run_probe(PROBE, setting, drop_env=("XLA_FLAGS",), timeout=300)


def test_xla_runs_on_one_thread_under_the_policy_and_the_process_keeps_every_cpu():
    single = _probe("1")
    assert single["ticks"] >= 10  # enough work to count threads by
    assert single["busy"] == 1
    assert single["cpus"] == sorted(os.sched_getaffinity(0))  # the one-CPU start was undone


def test_xla_uses_its_pool_when_the_stacks_keep_their_threads():
    """The other side of the check: without the policy the same dots spread over threads, so
    the probe above can tell one thread from several."""
    assert _probe("all")["busy"] >= 2
