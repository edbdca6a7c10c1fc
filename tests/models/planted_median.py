"""A transformers Llama built from a tiny config (random weights, no downloads) with one planted
``torch.median`` after the activation of one named module.

``model/layers/1/mlp/act_fn`` becomes ``MedianAct``: SiLU, then each row less its median. Eager runs
the median as a selection (linear time); XLA lowers it to a full ``sort`` whose comparator is a
called computation, so the planted module is where a compiler's time goes up, and the reader
must charge the comparator's work to it (profilers/xla_hlo.py: called computations inherit
their caller's module).
"""

from __future__ import annotations

import torch
from torch import nn

PLANTED = "model/layers/1/mlp/act_fn"
SEQ = 64
BATCH = 2


class MedianAct(nn.Module):
    """The activation, then every row centred on its median (a sort on XLA)."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(x)
        return y - torch.median(y, dim=-1, keepdim=True).values


class _Hidden(nn.Module):
    """The model's last hidden state: HF models return output dataclasses."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.model = inner

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids, return_dict=False)[0]


def llama_median():
    """LlamaConfig tiny (hidden 64, 2 layers, 4 heads, intermediate 256) with PLANTED's median."""
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                      use_cache=False, attn_implementation="eager")
    model = LlamaModel(cfg).eval()
    mlp = model.layers[1].mlp
    mlp.act_fn = MedianAct(mlp.act_fn)
    ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    return _Hidden(model).eval(), (ids,)
