"""transformers Llama, ResNet and ViT built from tiny configs (random weights, no downloads), each
with one slow op planted after the activation of one named module (``PLANTED[factory]``).

Two plants, one per compiler's weak spot:

- ``median``: each row less its median. Eager selects in linear time; XLA lowers a median to
  a full ``sort`` (its comparator a called computation), so ``--to xla`` loses its time there.
- ``erfinv``: erfinv of a squashed activation. Inductor's CPU code computes erfinv with a
  scalar polynomial per element where ATen's kernel is vectorised, so ``--to cpu:inductor``
  loses its time there, fused with whatever elementwise work surrounds it.

benchmarks/planted_runs.py checks that the diagnosis ranks the planted module first.
"""

from __future__ import annotations

import torch
from torch import nn

try:  # imported as a module of the tests package
    from tests.models.library_models import _FirstOutput
except ImportError:  # loaded by porter from its file: its folder's modules import by name
    from library_models import _FirstOutput

BATCH = 2


class Planted(nn.Module):
    """The activation, then the planted op."""

    def __init__(self, act: nn.Module, kind: str) -> None:
        super().__init__()
        self.act, self.kind = act, kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(x)
        if self.kind == "median":  # a feature map's median over its whole plane, a sequence's over features
            rows = y.flatten(2) if y.dim() == 4 else y
            return (rows - torch.median(rows, dim=-1, keepdim=True).values).reshape(y.shape)
        return torch.erfinv(torch.tanh(y) * 0.999)


def _llama(kind: str):
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                      use_cache=False, attn_implementation="eager")
    model = LlamaModel(cfg).eval()
    mlp = model.layers[1].mlp
    mlp.act_fn = Planted(mlp.act_fn, kind)
    ids = torch.randint(0, cfg.vocab_size, (BATCH, 64), generator=torch.Generator().manual_seed(0))
    return _FirstOutput(model).eval(), (ids,)


def _resnet(kind: str):
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    cfg = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
    model = ResNetModel(cfg).eval()
    # the first stage's feature maps at 96x96 images: with the second stage's at 64x64 the plant was
    # not the largest loss (porter's alone timing: XLA's stem convolution +277 us against the median's
    # +252; inductor's compiled-graph wrapper +205 us against the erfinv's +186)
    layer = model.encoder.stages[0].layers[0].layer[0]
    layer.activation = Planted(layer.activation, kind)
    images = torch.randn(BATCH, 3, 96, 96, generator=torch.Generator().manual_seed(0))
    return _FirstOutput(model).eval(), (images,)


def _vit(kind: str):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    cfg = ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                    image_size=64, patch_size=8, attn_implementation="eager")
    model = ViTModel(cfg, add_pooling_layer=False).eval()
    layer = _vit_layers(model)[1]
    act = layer.intermediate if hasattr(layer, "intermediate") else layer.mlp
    name = "intermediate_act_fn" if hasattr(act, "intermediate_act_fn") else "activation_fn"
    setattr(act, name, Planted(getattr(act, name), kind))
    images = torch.randn(BATCH, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    return _FirstOutput(model).eval(), (images,)


def _vit_layers(model: nn.Module) -> nn.ModuleList:
    enc = getattr(model, "encoder", model)
    return enc.layer if hasattr(enc, "layer") else model.layers


def llama_median():
    return _llama("median")


def resnet_median():
    return _resnet("median")


def vit_median():
    return _vit("median")


def llama_erfinv():
    return _llama("erfinv")


def resnet_erfinv():
    return _resnet("erfinv")


def vit_erfinv():
    return _vit("erfinv")


def planted_path(factory: str) -> str:
    """The porter path of the planted module of a factory, from the model itself."""
    model, _ = globals()[factory]()
    return next(n.replace(".", "/") for n, m in model.named_modules() if isinstance(m, Planted))
