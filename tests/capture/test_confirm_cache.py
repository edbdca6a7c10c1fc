"""A module given a KV cache replays without it: the cache grew with every replayed call.

transformers' Llama hands each layer's attention the model's cache; replayed from its recorded
call, every call appended its keys again (64 positions, then 128, ... 6816 after 100 calls), so the
attention timed alone did ever more work and inductor recompiled for each new length (865 compiles,
786 s for llama_base's 111 modules; 33 s without). porter.capture.confirm._kept.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from porter.capture.confirm import _is_kv_cache, confirm, recorded_calls, runner

transformers = pytest.importorskip("transformers")

ATTN = "model/layers/1/self_attn"


def _tiny_llama() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval(), torch.randint(0, 256, (1, 32))


def test_the_recorded_attention_call_holds_no_cache_and_replays_the_forwards_output() -> None:
    model, tokens = _tiny_llama()
    named = dict(model.named_modules())
    seen: list[torch.Tensor] = []
    hook = named[ATTN.replace("/", ".")].register_forward_hook(lambda _m, _a, out: seen.append(out[0].detach().clone()))
    try:
        with torch.no_grad():
            assert model(tokens, use_cache=True).past_key_values is not None  # the forward did carry a cache
    finally:
        hook.remove()
    (args, kwargs), = recorded_calls(model, (tokens,), [ATTN])[ATTN]
    leaves = [*args, *kwargs.values()]
    assert not any(_is_kv_cache(v) for v in leaves)
    call = runner("eager", named[ATTN.replace("/", ".")], args, kwargs)
    for _ in range(5):  # the same call again and again reads what the forward read, every time
        out = call()[0]
        assert out.shape == seen[-1].shape
        torch.testing.assert_close(out, seen[-1], rtol=1e-5, atol=1e-6)


def test_replaying_a_decoder_layer_on_inductor_compiles_once_per_call_not_per_repeat() -> None:
    model, tokens = _tiny_llama()
    before = counters["frames"]["total"]
    done, = confirm(model, (tokens,), ["model/layers/0"], "eager", "inductor", cpu_clock=True, repeats=10, budget_s=5)
    compiles = counters["frames"]["total"] - before
    assert not done.error and done.repeats == 10
    # timed whole: attention (4 projections, rotary), MLP (3 projections, act) and 2 norms inside
    assert done.inside == len([n for n, _ in model.model.layers[0].named_modules() if n]) >= 10, done.inside
    # the layer and its floor, each with its callees' frames; a growing cache made one per repeat (~100)
    assert compiles <= 8, compiles
