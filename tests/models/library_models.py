"""Real library models built from their configs with random weights (no downloads), small
sizes, plus a small resnet-style conv net (torchvision is not installable here).

Each factory returns (module, example_inputs) as porter's MODEL factories do.
"""

from __future__ import annotations

import torch
from torch import nn

SEQ = 32
BATCH = 2


def _tokens(vocab: int, seq: int = SEQ) -> torch.Tensor:
    return torch.randint(0, vocab, (BATCH, seq), generator=torch.Generator().manual_seed(0))


class _FirstOutput(nn.Module):
    """Returns the model's first output tensor: HF models return dataclasses."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.model = inner

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids, return_dict=False)[0]


def bert_small():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=512, max_position_embeddings=64, attn_implementation="eager")
    return _FirstOutput(BertModel(cfg, add_pooling_layer=False).eval()), (_tokens(cfg.vocab_size),)


def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=2, n_positions=64,
                     attn_implementation="eager", use_cache=False)
    return _FirstOutput(GPT2LMHeadModel(cfg).eval()), (_tokens(cfg.vocab_size),)


class _Block(nn.Module):
    """A resnet basic block: conv-bn-relu-conv-bn plus the (downsampled) input."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + self.down(x))


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = _Block(16, 16, 1)
        self.layer2 = _Block(16, 32, 2)
        self.layer3 = _Block(32, 64, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def small_resnet():
    torch.manual_seed(0)
    return SmallResNet().eval(), (torch.randn(2, 3, 32, 32),)


# Compute-dominated sizes, for checking a diagnosis against each module timed alone
# (benchmarks/live_modules.py): at these sizes a module's arithmetic (a 256 x 512 x 2048 GEMM
# is about 0.5 GFLOP) outweighs the tens of microseconds a compiled call pays alone in
# guards and dispatch, which a module inside the compiled program does not pay.
WIDE_SEQ = 128


def _bert_wide(layers: int, act: str = "gelu"):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=512, num_hidden_layers=layers, num_attention_heads=8,
                     intermediate_size=2048, max_position_embeddings=WIDE_SEQ, attn_implementation="eager",
                     hidden_act=act)
    return _FirstOutput(BertModel(cfg, add_pooling_layer=False).eval()), (_tokens(cfg.vocab_size, WIDE_SEQ),)


def bert_wide():
    return _bert_wide(2)


def gpt2_wide():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=1000, n_embd=512, n_layer=2, n_head=8, n_positions=WIDE_SEQ,
                     attn_implementation="eager", use_cache=False)
    return _FirstOutput(GPT2LMHeadModel(cfg).eval()), (_tokens(cfg.vocab_size, WIDE_SEQ),)


def resnet_wide():
    torch.manual_seed(0)
    return SmallResNet().eval(), (torch.randn(8, 3, 64, 64),)


def gpt2_wide3():
    """gpt2_wide with three blocks: three GELU chains whose fused form on a compiler is several
    times faster than eager's eight calls, each gap well above this machine's timing noise, so
    a top 3 by gap is defined by the model rather than by chance (tests/e2e/test_live_agreement.py)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=1000, n_embd=512, n_layer=3, n_head=8, n_positions=WIDE_SEQ,
                     attn_implementation="eager", use_cache=False)
    return _FirstOutput(GPT2LMHeadModel(cfg).eval()), (_tokens(cfg.vocab_size, WIDE_SEQ),)


def bert_wide3():
    """bert_wide with three layers. Its intermediate dense layers (512 -> 2048) ran 1-1.5 ms
    faster on XLA:CPU than eager while XLA's dots had a pool of two threads; with one (porter's
    default, porter.runtime.threads) they match eager, and every leaf's gap is within +-0.4 ms
    of the others, so no top 3 exists to agree on: the agreement test takes bert_wide3_newgelu
    on XLA too (BENCHMARKS.md, "Lab notes: live agreement")."""
    return _bert_wide(3)


def bert_wide3_newgelu():
    """bert_wide with three layers and hidden_act="gelu_new" (the tanh GELU as transformers
    writes it, eight eager ops; ALBERT's default): with BERT's own erf GELU, one aten::gelu on
    both stacks, eager and inductor run the same oneDNN GEMMs and every leaf's gap is within
    this machine's noise (a timing of each module alone tied 25 of them), so no top 3 exists to
    agree on. Here the three activations are gaps inductor's one fused kernel really makes."""
    return _bert_wide(3, "gelu_new")


def llama_tiny():
    """A stock LlamaForCausalLM, as a user has it: it returns a CausalLMOutputWithPast (logits
    and a DynamicCache), not a tensor, so every stack must take its output as a pytree."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval(), (_tokens(cfg.vocab_size, 16),)


def bert_stock():
    """A stock BertModel as transformers builds it by default: SDPA attention, and a
    BaseModelOutputWithPooling out (ONNX export decomposes its attention into MatMuls)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=512, max_position_embeddings=64)
    return BertModel(cfg).eval(), (_tokens(cfg.vocab_size),)


class Erfinv(nn.Module):
    """A planted activation: erfinv of its input clamped into (-1, 1). Inductor's C++ erfinv
    is scalar code tens of times slower than eager's, so fused with the BatchNorm before it
    (one kernel: the norm's four elementwise nodes, the clamp, the erfinv) nearly all of that
    kernel's time is the activation's, which an element count would give to the BatchNorm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.erfinv(torch.clamp(x, -0.99, 0.99))


ERFINV_AT = "model/encoder/stages/0/layers/0/layer/0/activation"  # where resnet_erfinv plants it
ERFINV_NORM = "model/encoder/stages/0/layers/0/layer/0/normalization"  # the BatchNorm fused with it


def hf_resnet():
    """transformers' ResNet from a config (basic layers, two stages of one layer), random weights,
    nothing planted: the conv net porter tune is checked on (BENCHMARKS.md, "porter tune")."""
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    cfg = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
    return _FirstOutput(ResNetModel(cfg).eval()), (torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)),)


def resnet_erfinv():
    """transformers' ResNet (basic layers, two stages of one layer) with the first layer's first
    activation replaced by Erfinv (ERFINV_AT), after its own BatchNorm (ERFINV_NORM)."""
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    cfg = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
    model = ResNetModel(cfg).eval()
    model.encoder.stages[0].layers[0].layer[0].activation = Erfinv()
    return _FirstOutput(model), (torch.randn(4, 3, 128, 128, generator=torch.Generator().manual_seed(0)),)


# Real sizes (issue 24's table): the configs' own defaults, as the published models are shaped,
# two sequences of SEQ tokens. Module gaps of the small models above are 1-30 us, below what a
# module timed alone can resolve (its call's residual cost alone is 10-70 us); at these sizes a
# dense layer is hundreds of microseconds.
def bert_base():
    """BERT-base: BertConfig()'s defaults (12 layers, hidden 768, 12 heads, vocab 30522)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig()
    return _FirstOutput(BertModel(cfg, add_pooling_layer=False).eval()), (_tokens(cfg.vocab_size),)


def gpt2_base():
    """GPT-2 small as published: GPT2Config()'s defaults (12 layers, n_embd 768, vocab 50257)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config()
    return _FirstOutput(GPT2LMHeadModel(cfg).eval()), (_tokens(cfg.vocab_size),)


def llama_base():
    """An unplanted LlamaForCausalLM of useful size: Llama's vocabulary (32000), 8 layers of
    hidden 512 with its SwiGLU ratio (intermediate 1376), grouped-query attention (8 heads, 4 KV)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048)
    return _FirstOutput(LlamaForCausalLM(cfg).eval()), (_tokens(cfg.vocab_size),)
