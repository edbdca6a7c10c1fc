"""porter.accuracy.rewrite_ops on JAX functions written two ways: a rewrite that computes the
same thing otherwise names nothing; one that parts from the original names the op where it does."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from porter.accuracy.rewrite_ops import describe, diverging_op, trace_values  # noqa: E402

TOL = 1e-4
X = jnp.asarray(np.random.default_rng(0).normal(0.5, 2.0, (8, 16, 64)), jnp.float32)


def two_pass_norm(x, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps)


def one_pass_norm(x, eps=1e-5):  # E[x^2] - E[x]^2: other values on the way, the same result at fp32 here
    mean = x.mean(-1, keepdims=True)
    var = (x * x).mean(-1, keepdims=True) - mean * mean
    return (x - mean) / jnp.sqrt(var + eps)


def test_the_same_math_another_way_names_nothing():
    original, rewrite = trace_values(two_pass_norm, (X,)), trace_values(one_pass_norm, (X,))
    d = diverging_op(original, rewrite, TOL)
    assert d.step is None and "counterpart" in d.why
    assert 0 < d.matched < d.computed  # E[x^2] and its square are the original's nowhere: unmatched, then matched again


def test_a_wrong_constant_is_named_with_the_originals_op():
    original = trace_values(two_pass_norm, (X,))
    d = diverging_op(original, trace_values(lambda x: one_pass_norm(x, eps=1e-1), (X,)), TOL)
    assert describe(d.rewrite, d.step) == "add(float32[8, 16, 1], 0.1)"
    assert describe(d.original, d.counterpart) == "add(float32[8, 16, 1], 1e-05)"
    assert d.rel_l2 > TOL and d.step.where.startswith("test_rewrite_ops.py:")


def test_a_cast_to_a_coarser_dtype_is_named_and_layout_ops_are_not():
    w = jnp.asarray(np.random.default_rng(1).normal(0, 0.1, (64, 32)), jnp.float32)

    def original(x):
        return jnp.einsum("btd,df->btf", x, w)

    def rewrite(x):  # the kernel stored transposed (a layout op), the input cast to bf16
        wt = w.T
        return (x.astype(jnp.bfloat16).astype(jnp.float32) @ wt.T)

    d = diverging_op(trace_values(original, (X,)), trace_values(rewrite, (X,)), TOL)
    assert describe(d.rewrite, d.step) == "convert_element_type(float32[8, 16, 64] -> bfloat16)"
    assert d.counterpart is None


def test_inner_jaxprs_are_evaluated_op_by_op():
    inner = jax.jit(lambda x: x * 3.0 + 1.0)
    d = diverging_op(trace_values(lambda x: x * 3.0 + 1.0, (X,)), trace_values(lambda x: inner(x) * 2.0, (X,)), TOL)
    assert describe(d.rewrite, d.step) == "mul(float32[8, 16, 64], 2)"  # the jit's mul and add matched inside it
