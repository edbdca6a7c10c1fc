"""Real library models (HF transformers) built from configs with random weights, no downloads.

``bert_small`` / ``gpt2_small`` are test sizes; ``bert_base`` / ``gpt2_base`` are the
BERT-base and GPT-2-small shapes (12 layers, width 768, 12 heads) the issue measures.
The models return tuples (return_dict=False); stock models returning an HF ModelOutput run too
(porter/targets/outputs.py, tests/e2e/test_pytree_outputs.py). Every factory runs the model on token ids of one fixed seed (batch 2, sequence SEQ).
"""

from __future__ import annotations

import torch

SEQ = 128


def _ids(vocab: int, seq: int) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(1)),)


def _bert(layers: int, width: int, heads: int, seq: int):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=4 * width, max_position_embeddings=max(seq, 128), attn_implementation="eager", return_dict=False)
    return BertModel(cfg).eval(), _ids(cfg.vocab_size, seq)


def _gpt2(layers: int, width: int, heads: int, seq: int):
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=1000, bos_token_id=0, eos_token_id=0, use_cache=False, n_embd=width, n_layer=layers, n_head=heads, n_positions=max(seq, 128), return_dict=False,
                     attn_implementation="eager")
    return GPT2Model(cfg).eval(), _ids(cfg.vocab_size, seq)


def bert_small():
    return _bert(2, 64, 4, 32)


def gpt2_small():
    return _gpt2(2, 64, 4, 32)


def bert_base():
    return _bert(12, 768, 12, SEQ)


def gpt2_base():
    return _gpt2(12, 768, 12, SEQ)
