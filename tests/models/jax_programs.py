"""JAX programs as porter models (test-only): a plain jax.numpy MLP whose modules are its
named scopes, and a small Flax NNX transformer whose modules are its module tree."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

HIDDEN, BATCH = 256, 64


def _mlp(params, x):
    with jax.named_scope("mlp"):
        with jax.named_scope("fc1"):
            h = x @ params["w1"] + params["b1"]
        with jax.named_scope("act"):
            h = jax.nn.gelu(h)
        with jax.named_scope("fc2"):
            h = h @ params["w2"] + params["b2"]
    with jax.named_scope("head"):
        return jnp.tanh(h)


def mlp():
    """(fn, (params, x)): porter calls fn(params, x)."""
    rng = np.random.default_rng(0)
    params = {"w1": jnp.asarray(rng.standard_normal((HIDDEN, 4 * HIDDEN), np.float32) / 16),
              "b1": jnp.zeros((4 * HIDDEN,), jnp.float32),
              "w2": jnp.asarray(rng.standard_normal((4 * HIDDEN, HIDDEN), np.float32) / 32),
              "b2": jnp.zeros((HIDDEN,), jnp.float32)}
    x = jnp.asarray(rng.standard_normal((BATCH, HIDDEN), np.float32))
    return _mlp, (params, x)


def nnx_transformer():
    """A Flax NNX transformer: (module, (tokens,))."""
    from flax import nnx

    class Attention(nnx.Module):
        def __init__(self, dim: int, heads: int, rngs: nnx.Rngs):
            self.heads = heads
            self.qkv = nnx.Linear(dim, 3 * dim, rngs=rngs)
            self.proj = nnx.Linear(dim, dim, rngs=rngs)

        def __call__(self, x):
            b, t, d = x.shape
            q, k, v = jnp.split(self.qkv(x), 3, axis=-1)
            split = lambda a: a.reshape(b, t, self.heads, d // self.heads).transpose(0, 2, 1, 3)  # noqa: E731
            q, k, v = split(q), split(k), split(v)
            att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d // self.heads), axis=-1)
            return self.proj((att @ v).transpose(0, 2, 1, 3).reshape(b, t, d))

    class Mlp(nnx.Module):
        def __init__(self, dim: int, rngs: nnx.Rngs):
            self.fc1 = nnx.Linear(dim, 4 * dim, rngs=rngs)
            self.fc2 = nnx.Linear(4 * dim, dim, rngs=rngs)

        def __call__(self, x):
            return self.fc2(jax.nn.gelu(self.fc1(x)))

    class Block(nnx.Module):
        def __init__(self, dim: int, heads: int, rngs: nnx.Rngs):
            self.ln1 = nnx.LayerNorm(dim, rngs=rngs)
            self.attn = Attention(dim, heads, rngs)
            self.ln2 = nnx.LayerNorm(dim, rngs=rngs)
            self.mlp = Mlp(dim, rngs)

        def __call__(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class Transformer(nnx.Module):
        def __init__(self, vocab: int, dim: int, heads: int, layers: int, rngs: nnx.Rngs):
            self.tok = nnx.Embed(vocab, dim, rngs=rngs)
            self.blocks = nnx.List([Block(dim, heads, rngs) for _ in range(layers)])
            self.head = nnx.Linear(dim, vocab, rngs=rngs)

        def __call__(self, tokens):
            x = self.tok(tokens)
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    model = Transformer(512, 128, 4, 2, nnx.Rngs(0))
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 512, (4, 64)), jnp.int32)
    return model, (tokens,)


def _exp_add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.exp(x_ref[...]) + y_ref[...]


def _with_kernel(params, x):
    from jax.experimental import pallas as pl

    with jax.named_scope("block"):
        with jax.named_scope("proj"):
            h = x @ params["w"]
        with jax.named_scope("act"):  # a hand-written kernel over a grid of two row blocks (interpreted on the CPU)
            block = pl.BlockSpec((BATCH // 2, HIDDEN), lambda i: (i, 0))
            h = pl.pallas_call(_exp_add_kernel, out_shape=jax.ShapeDtypeStruct(h.shape, h.dtype), grid=(2,),
                               in_specs=[block, block], out_specs=block, interpret=True)(h, h)
    with jax.named_scope("head"):
        return jnp.tanh(h).sum()


def pallas_mlp():
    """A Pallas kernel in module block/act, between a matmul and a reduction."""
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.standard_normal((HIDDEN, HIDDEN), np.float32) / 16)}
    return _with_kernel, (params, jnp.asarray(rng.standard_normal((BATCH, HIDDEN), np.float32)))


def equinox_mlp():
    """An Equinox module: (module, (x,)); its submodules are its fields (layers/0, layers/1, norm)."""
    import equinox as eqx

    class Mlp(eqx.Module):
        layers: list
        norm: eqx.nn.LayerNorm

        def __init__(self, key):
            k1, k2 = jax.random.split(key)
            self.layers = [eqx.nn.Linear(HIDDEN, 4 * HIDDEN, key=k1), eqx.nn.Linear(4 * HIDDEN, HIDDEN, key=k2)]
            self.norm = eqx.nn.LayerNorm(HIDDEN)

        def __call__(self, x):
            h = jax.vmap(self.layers[0])(x)
            h = jax.vmap(self.layers[1])(jax.nn.gelu(h))
            return jax.vmap(self.norm)(h)

    x = jnp.asarray(np.random.default_rng(0).standard_normal((BATCH, HIDDEN), np.float32))
    return Mlp(jax.random.PRNGKey(0)), (x,)
