"""The torchax import shim: imports torchax on torch 2.13, runs a model right, leaves torch as it was."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from tests.conftest import REPO


def test_shim_imports_torchax_and_leaves_torch_ops_as_found():
    # A fresh interpreter, so the state before torchax is imported can be observed.
    code = textwrap.dedent("""
        import torch
        from torch._ops import OpOverloadPacket
        lookup = OpOverloadPacket.__getattr__
        before = {k: hasattr(getattr(torch.ops.aten, p), k) for p, k in
                  [("prod", "dim_Dimname"), ("norm", "names_ScalarOpt_dim"), ("prod", "dim_int")]}
        from porter.targets.torchax_shim import REPORT, import_torchax
        tx = import_torchax()
        after = {k: hasattr(getattr(torch.ops.aten, p), k) for p, k in
                 [("prod", "dim_Dimname"), ("norm", "names_ScalarOpt_dim"), ("prod", "dim_int")]}
        assert OpOverloadPacket.__getattr__ is lookup, "torch's overload lookup was not restored"
        assert before == after, (before, after)
        assert "dim_Dimname" not in dir(torch.ops.aten.prod)
        print(tx.__version__, REPORT.shim_used, len(REPORT.placeholders))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    version, used, count = done.stdout.split()
    if used == "True":  # torchax 0.0.13 on torch >= 2.13: the named overloads it names are gone
        assert int(count) > 0
    else:  # a fixed torchax: the plain import worked and no placeholder was made
        assert int(count) == 0


def test_unrelated_attribute_errors_are_not_swallowed():
    from porter.targets.torchax_shim import MissingOverload, is_missing_overload_error

    assert not is_missing_overload_error(AttributeError("module 'x' has no attribute 'y'"))
    assert not is_missing_overload_error(ImportError("has no overload name"))
    with pytest.raises(NotImplementedError, match="aten.prod.dim_Dimname"):
        MissingOverload("aten.prod.dim_Dimname")()


def test_linear_gelu_layernorm_through_torchax_matches_eager():
    """fp32 on one CPU: XLA reorders the matmul/LayerNorm sums, so the results differ by a
    few ulps per element (relative ~1e-7); 1e-5 leaves room for K=256 accumulation while
    still catching any wrong lowering (those give errors of order 1)."""
    import jax

    from porter.targets.torchax_shim import import_torchax

    tx = import_torchax()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                                torch.nn.Linear(256, 32)).eval()
    x = torch.randn(8, 64)
    with torch.no_grad():
        ref = model(x)
        weights, fn = tx.extract_jax(model)
    env = tx.default_env()
    out = jax.jit(fn)(weights, (env.t2j_copy(x),))
    got = torch.from_numpy(jax.device_get(out).copy())
    rel = float((got.double() - ref.double()).norm() / ref.double().norm())
    assert rel <= 1e-5, rel


def test_torch_compile_still_works_after_torchax_is_imported():
    # torchax registers a "jax" accelerator; without the shim's fix, dynamo then fails every
    # later torch.compile in the process ("PyTorch is not linked with support for jax devices"),
    # which broke `porter diagnose --from xla --to cpu:inductor`.
    code = textwrap.dedent("""
        import torch
        from porter.targets.torchax_shim import import_torchax
        tx = import_torchax()
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval()
        x = torch.randn(2, 8)
        with torch.no_grad():
            compiled = torch.compile(model)(x)
            eager = model(x)
        assert torch.allclose(compiled, eager, atol=1e-6), (compiled - eager).abs().max()
        env = tx.default_env()
        with env:
            out = torch.nn.Linear(8, 8).to("jax")(torch.randn(2, 8, device="jax"))
        print(type(out).__module__)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith("torchax")
