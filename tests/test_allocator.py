"""Freed memory kept in the process during a live pair (porter.capture.allocator)."""

from __future__ import annotations


import pytest

from porter.capture.allocator import _glibc, keep_freed_memory
from tests.conftest import run_probe

PROBE = r"""
import json, resource, sys
import torch
from porter.capture.allocator import keep_freed_memory
from porter.capture.models import load_model
policy = keep_freed_memory(sys.argv[1])
torch.set_num_threads(1)
spec = load_model("tests/models/library_models.py:gpt2_wide")
act = spec.module.model.transformer.h[1].mlp.act  # GPT-2's GELU: eight eager ops on 2x128x2048
start, faults = {}, []
act.register_forward_pre_hook(lambda m, a: start.update(f=resource.getrusage(resource.RUSAGE_SELF).ru_minflt))
act.register_forward_hook(lambda m, a, o: faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start["f"]))
with torch.no_grad():
    for _ in range(15):
        spec.module(*spec.example_inputs)
print(json.dumps({"kept": policy.kept, "faults": sum(faults[3:])}))
"""

def _probe(setting: str) -> dict:
    return run_probe(PROBE, setting, drop_env=("PORTER_MALLOC",), timeout=120)


@pytest.mark.skipif(_glibc() is None, reason="glibc's mallopt only")
def test_kept_memory_is_not_faulted_in_again_for_each_new_output():
    """GPT-2's eager GELU over 12 forwards: glibc's defaults hand its 2 MiB outputs' pages back
    and fault them in again (704 to ~20000 faults over the 12 calls on this machine); kept, the
    pages stay (0-640)."""
    default, kept = _probe("os"), _probe("keep")
    assert not default["kept"] and kept["kept"]
    # at least half of one 2 MiB output's pages faulted in again (seen: 704 to ~20000; a clean CI
    # run gave 704, under the 1024 this first asked for)
    assert default["faults"] >= 256
    assert kept["faults"] <= default["faults"] / 4


def test_os_setting_leaves_the_allocator_alone():
    policy = keep_freed_memory("os")
    assert not policy.kept and "PORTER_MALLOC=os" in policy.why
