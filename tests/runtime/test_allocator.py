"""Freed memory kept in the process during a live pair (porter.runtime.allocator)."""

from __future__ import annotations


import pytest

from porter.runtime.allocator import _glibc, keep_freed_memory
from tests.conftest import run_probe

PROBE = r"""
import contextlib, json, os, resource, sys
import torch
setting, model, mode, warm_mb = sys.argv[1:5]
os.environ["PORTER_HEAP_WARM_MB"] = warm_mb
from porter.runtime.allocator import keep_freed_memory
from porter.capture.models import load_model
policy = keep_freed_memory(setting)
torch.set_num_threads(1)
spec = load_model("tests/models/library_models.py:" + model)
# GPT-2's GELU: eight eager ops on 2x128x2048; BERT's: one
acts = [m for n, m in spec.module.named_modules() if n.endswith(("mlp.act", "intermediate_act_fn"))]
start, faults = {}, []
for act in acts:
    act.register_forward_pre_hook(lambda m, a: start.update(f=resource.getrusage(resource.RUSAGE_SELF).ru_minflt))
    act.register_forward_hook(lambda m, a, o: faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start["f"]))
forwards = 15 if mode == "plain" else 27
with torch.no_grad(), (torch.profiler.profile() if mode == "profiled" else contextlib.nullcontext()):
    for _ in range(forwards):
        spec.module(*spec.example_inputs)
later = faults[3 * len(acts):]
print(json.dumps({"kept": policy.kept, "warmed_mb": policy.warmed_mb, "faults": sum(later),
                  "calls_faulting": sum(f > 0 for f in later), "calls": len(later)}))
"""


def _probe(setting: str, model: str = "gpt2_wide", mode: str = "plain", warm_mb: int = 256) -> dict:
    return run_probe(PROBE, setting, model, mode, str(warm_mb), drop_env=("PORTER_MALLOC",), timeout=180)


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


@pytest.mark.skipif(_glibc() is None, reason="glibc's mallopt only")
def test_a_profilers_growing_heap_lands_on_pages_touched_up_front():
    """Kept memory still faults the first time the heap grows into it, and torch.profiler's
    records grow it at every step: BERT's eager GELU (hidden 512) faulted 128-1024 pages in 6 of
    24 profiled calls, each then 2-3x its time. With the heap's first 256 MiB touched up front,
    none of them faulted in any run here."""
    cold = _probe("keep", "bert_wide", "profiled", warm_mb=0)
    warm = _probe("keep", "bert_wide", "profiled")
    assert cold["warmed_mb"] == 0 and warm["warmed_mb"] == 256
    assert cold["calls_faulting"] >= 1, cold  # 48 calls (24 forwards, 2 GELUs); 12 forwards showed 1-6 of 24
    assert warm["calls_faulting"] == 0, warm


def test_os_setting_leaves_the_allocator_alone():
    policy = keep_freed_memory("os")
    assert not policy.kept and "PORTER_MALLOC=os" in policy.why
