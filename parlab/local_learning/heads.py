"""The auxiliary head of a stage: the small classifier its local loss is computed with.

Decoupled greedy learning (Belilovsky et al., ICML 2020, §3) gives every stage j an auxiliary
problem: a small head on the stage's output, trained with the model's own loss on the same
targets; the stage learns from that loss alone. Interlocking backpropagation (Gomez et al.,
JMLR 2022, §3) keeps the heads and lets each auxiliary loss also train the stages below, up to a
depth. The last stage needs no auxiliary head: it has the model's head and the true loss.

For the GPT the head is a LayerNorm and a linear map from the residual stream to the vocabulary
(the model's own head, untied); for the MLP one linear map from the hidden width to the classes.
Heads are initialised from the seed and the stage index, so every run and the one-process
emulation start from the same heads. They are not part of the model: the final state holds the
reference's parameters only.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class AuxHead(nn.Module):
    """Stage output -> logits, and the model's loss on them."""

    def __init__(self, model_config, stage: int, seed: int):
        super().__init__()
        # folded below 2**64: any valid seed (< 2**63) fits torch's generator
        g = torch.Generator().manual_seed((seed * 1009 + 101 + stage) % 2**64)
        if hasattr(model_config, "n_embd"):
            c = model_config.n_embd
            self.norm = nn.LayerNorm(c)
            self.proj = nn.Linear(c, model_config.vocab_size, bias=False)
            std = 0.02
        else:
            self.norm = nn.Identity()
            self.proj = nn.Linear(model_config.d_hidden, model_config.d_out)
            std = 1.0 / math.sqrt(model_config.d_hidden)
        with torch.no_grad():
            self.proj.weight.normal_(0.0, std, generator=g)
            if self.proj.bias is not None:
                self.proj.bias.zero_()

    def forward(self, h):
        return self.proj(self.norm(h))  # (mb, T, C) -> (mb, T, vocab), or (mb, d) -> (mb, d_out)

    def loss(self, h, targets):
        logits = self(h)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def head_numel(model_config) -> int:
    """Parameters of one auxiliary head."""
    if hasattr(model_config, "n_embd"):
        return 2 * model_config.n_embd + model_config.n_embd * model_config.vocab_size
    return model_config.d_hidden * model_config.d_out + model_config.d_out
