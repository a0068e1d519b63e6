"""Vocabulary-parallel embedding and cross-entropy (Megatron-LM, Shoeybi et al. 2019, §3: "we
parallelize the output embedding GEMM ... and fuse it with the cross-entropy loss").

The token embedding (V, C) is tied to the output head, so both are split by vocabulary rows:
rank i owns ids [i·V/tp, (i+1)·V/tp). The embedding looks up the ids it owns, writes zeros for
the others and all-reduces (g) — every id is owned by exactly one rank. The head gives each rank
the logits of its own V/tp words, (B, T, V/tp), and the cross-entropy is computed without ever
gathering the (B, T, V) logits: the softmax needs only the max and the sum of exponentials over
the vocabulary, and the target's logit, three all-reduces of (B, T) numbers.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.tensor_parallel.ops import BACKWARD, FORWARD, CopyToTensorParallel, ReduceFromTensorParallel

__all__ = ["BACKWARD", "FORWARD", "VocabParallelCrossEntropy", "VocabParallelEmbedding"]


class VocabParallelEmbedding(nn.Module):
    """Rows [vocab_start, vocab_start + V/tp) of the token embedding; output (B, T, C) whole."""

    def __init__(self, weight_shard: torch.Tensor, comm, vocab_start: int):
        super().__init__()
        self.weight = nn.Parameter(weight_shard)
        self.comm, self.vocab_start = comm, vocab_start

    def forward(self, idx):
        local = idx - self.vocab_start  # (B, T) ids relative to this shard
        mine = (local >= 0) & (local < self.weight.size(0))  # (B, T) ids this rank owns
        x = F.embedding(local.clamp(0, self.weight.size(0) - 1), self.weight)  # (B, T, C)
        x = x * mine.unsqueeze(-1)  # (B, T, C) zero where another rank owns the id
        return ReduceFromTensorParallel.apply(x, self.comm)  # (B, T, C) summed over tp


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-token loss (B, T) from vocabulary-sharded logits (B, T, V/tp).

    Forward: all-reduce (max) of each token's largest logit, all-reduce (sum) of Σ exp(logit −
    max) and all-reduce (sum) of the target's logit (found on one rank, 0 on the others) — three
    (B, T) messages; loss = log Σ exp − target. Backward: softmax of the shard minus the one-hot
    target where this rank owns it, times the loss gradient — no communication."""

    @staticmethod
    def forward(ctx, logits, targets, comm, vocab_start: int):
        width = logits.size(-1)
        top = logits.max(dim=-1).values  # (B, T)
        comm.all_reduce(top, op="max", phase=FORWARD)  # (B, T) max over the whole vocabulary
        shifted = logits - top.unsqueeze(-1)  # (B, T, V/tp)
        exp = shifted.exp()  # (B, T, V/tp)
        total = exp.sum(dim=-1)  # (B, T)
        comm.all_reduce(total, phase=FORWARD)  # (B, T) Σ exp over the whole vocabulary
        local = targets - vocab_start  # (B, T)
        mine = (local >= 0) & (local < width)  # (B, T) targets this rank owns
        index = local.clamp(0, width - 1).unsqueeze(-1)  # (B, T, 1)
        target = shifted.gather(-1, index).squeeze(-1) * mine  # (B, T)
        comm.all_reduce(target, phase=FORWARD)  # (B, T) the target's logit, from its owner
        ctx.save_for_backward(exp / total.unsqueeze(-1), index, mine)
        return total.log() - target  # (B, T)

    @staticmethod
    def backward(ctx, grad_loss):
        softmax, index, mine = ctx.saved_tensors
        grad = softmax.clone()  # (B, T, V/tp)
        grad.scatter_add_(-1, index, -mine.to(grad.dtype).unsqueeze(-1))  # − one-hot target
        return grad * grad_loss.unsqueeze(-1), None, None, None


def vocab_parallel_loss(model, x, targets):
    """The criterion `apply_tp(vocab_parallel=True)` plugs into the GPT: x (B, T, C) after the
    blocks -> the tied head over this rank's V/tp words (f before it) -> the mean cross-entropy
    of the whole vocabulary, in fp32."""
    wte = model.wte  # a VocabParallelEmbedding
    h = CopyToTensorParallel.apply(model.ln_f(x), wte.comm)  # (B, T, C) f before the head
    logits = (h @ wte.weight.t()).float()  # (B, T, V/tp) this rank's words, fp32 loss
    losses = VocabParallelCrossEntropy.apply(logits, targets.clone(), wte.comm,
                                             wte.vocab_start)  # (B, T)
    return losses.sum() / losses.numel()
