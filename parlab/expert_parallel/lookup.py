"""A lookup table to memorise: the task where an MoE's extra parameters show at equal FLOPs.

Jelassi et al. ("Mixture of Parrots: Experts improve memorization more than reasoning", 2024)
find that, at equal active parameters, adding experts helps most on facts the model must store
(closed-book recall) and little on reasoning. The smallest such task for the tiny GPT: a random
table maps each ordered pair of keys (a, b), a and b among the first K characters, to a value v
among all V = 96; a sequence is triples a b v a b v …, and only the value is scored (given a and
b, v is determined; a and b themselves are random and carry no loss). K² = 1,024 facts at K = 32.
Each seed draws its own table, so the seed spread covers the table too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from parlab.models.data import step_seed

KEYS = 32  # K: the facts are the K² ordered pairs
VOCAB = 96  # the GPT's characters (parlab.models.data.VOCAB): the values' range
IGNORE = -100  # F.cross_entropy's ignore_index: positions that carry no loss


def table(seed: int, keys: int = KEYS) -> torch.Tensor:
    """(K, K) values in [0, VOCAB): the facts of run `seed`."""
    g = torch.Generator().manual_seed(step_seed(seed, 2**32))  # a stream no step's batch uses
    return torch.randint(0, VOCAB, (keys, keys), generator=g)


def batch(step: int, batch_size: int, seed: int, facts: torch.Tensor, seq_len: int = 32):
    """(x (B, T), y (B, T)): triples a b v; y is v after each b and IGNORE elsewhere."""
    g = torch.Generator().manual_seed(step_seed(seed, step))
    keys, triples = facts.size(0), seq_len // 3 + 1
    a = torch.randint(0, keys, (batch_size, triples), generator=g)  # (B, n)
    b = torch.randint(0, keys, (batch_size, triples), generator=g)  # (B, n)
    seq = torch.stack([a, b, facts[a, b]], 2).reshape(batch_size, -1)[:, :seq_len + 1]  # (B, 3n)
    x, y = seq[:, :-1], seq[:, 1:].clone()  # (B, T), (B, T)
    scored = torch.zeros_like(y, dtype=torch.bool)
    scored[:, 1::3] = True  # x[t] is a b, so y[t] is its value
    return x, y.masked_fill(~scored, IGNORE)


def value_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the scored positions: (B, T, V), (B, T) -> ()."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1),
                           ignore_index=IGNORE)
