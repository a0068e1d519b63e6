"""Grouped-query attention under tensor parallelism: key/value heads replicated past tp = n_kv.

Ainslie et al., "GQA" (EMNLP 2023): n_kv key/value heads, each read by nh/n_kv query heads.
Megatron-LM's TP cuts attention by heads (Shoeybi et al. 2019, §3): a rank holding query heads
[h0, h1) needs the key/value heads they read. For tp ≤ n_kv (tp dividing n_kv) each rank owns
n_kv/tp key/value heads. For tp > n_kv (n_kv dividing tp) a rank's query heads all fall inside one
group, so it holds that group's key/value head, and tp/n_kv ranks hold a copy of it: ⌈n_kv/tp⌉ = 1
per rank. The k and v projection weights and the K/V activations (at inference, the KV cache) per
rank stop shrinking at tp = n_kv — Llama 3 8B has n_kv = 8 (Meta, "The Llama 3 Herd of Models",
2024, Table 3). In training, the copies of a replicated head each compute only their query heads'
part of its weight gradient: the copies' gradients must be summed (an all-reduce over tp/n_kv
ranks). Ulysses (Jacobs et al., "DeepSpeed Ulysses", 2023) scatters heads over its
sequence-parallel ranks with an all-to-all, so its degree meets the same bound: past n_kv the
all-to-all carries copies of key/value heads.

This module is the closed form (the per-rank counts and bytes) and the gradient sum of the copies
(`sync_replicated_kv`); `parlab.tensor_parallel.layers.ParallelAttention` builds the copies.
Simplification: the sum is one all-reduce over the whole tp group of every head's slot (zeros
where a rank holds no copy): about n_kv times the bytes of an all-reduce inside each copy group.
"""

from __future__ import annotations

import math


def kv_heads_per_rank(n_kv: int, tp: int) -> int:
    """Key/value heads one tp rank holds: n_kv/tp, or 1 (a copy) when tp > n_kv.
    ValueError when neither divides the other (a group would be split unevenly)."""
    if n_kv % tp and tp % n_kv:
        raise ValueError(f"tp={tp} and n_kv_head={n_kv}: one must divide the other")
    return math.ceil(n_kv / tp)


def copies(n_kv: int, tp: int) -> int:
    """How many tp ranks hold each key/value head: 1 up to tp = n_kv, tp/n_kv beyond."""
    kv_heads_per_rank(n_kv, tp)  # checks the degrees
    return max(1, tp // n_kv)


def per_rank_bytes(cfg: dict, tp: int, batch_rows: int, seq_len: int,
                   element_size: int = 2) -> dict:
    """One tp rank's attention bytes for a model config (a `parlab.models.presets` entry):
    q and k/v projection weights per layer, K/V activations per layer (the KV cache at
    inference) for batch_rows × seq_len tokens, and the K/V of all layers."""
    nh, C, L = cfg["n_head"], cfg["n_embd"], cfg["n_layer"]
    n_kv, hs = cfg.get("n_kv_head") or nh, cfg["n_embd"] // cfg["n_head"]
    if nh % tp:
        raise ValueError(f"tp={tp} must divide n_head={nh}")
    kv_r = kv_heads_per_rank(n_kv, tp)
    kv_act = 2 * batch_rows * seq_len * kv_r * hs * element_size  # K and V: 2 × (B, T, kv_r·hs)
    return {"tp": tp, "q_heads": nh // tp, "kv_heads": kv_r, "copies": copies(n_kv, tp),
            "q_weight_B": (nh // tp) * hs * C * element_size,  # (h_r·hs, C)
            "kv_weight_B": 2 * kv_r * hs * C * element_size,  # k and v: 2 × (kv_r·hs, C)
            "kv_layer_B": kv_act, "kv_all_layers_B": L * kv_act}


def rows(cfg: dict, degrees=(1, 2, 4, 8, 16, 32), batch_rows: int = 1, seq_len: int = 8192,
         element_size: int = 2) -> list[dict]:
    """`per_rank_bytes` at each degree that divides the query heads."""
    return [per_rank_bytes(cfg, tp, batch_rows, seq_len, element_size) for tp in degrees
            if cfg["n_head"] % tp == 0]


def stops_shrinking(table: list[dict]) -> int | None:
    """The first degree whose K/V bytes per rank equal the previous degree's (computed), or None."""
    for prev, row in zip(table, table[1:]):
        if row["kv_all_layers_B"] == prev["kv_all_layers_B"]:
            return prev["tp"]
    return None


def copies_of(cfg, tp: int) -> int:
    """`copies` for a model config object (GPTConfig): 1 for multi-head attention."""
    n_kv = getattr(cfg, "n_kv_head", None)
    return 1 if n_kv is None or tp <= n_kv else copies(n_kv, tp)


def sync_replicated_kv(attns, comm, tp: int, rank: int, n_kv: int) -> None:
    """Sum each replicated key/value head's weight gradient over its tp/n_kv copies: every rank
    writes its k and v rows' gradient into its head's slot of a zero (n_kv, 2·hs, C) tensor, the
    tp group all-reduces it, and each rank takes its head's slot back (the zeros add nothing)."""
    import torch

    head = rank * n_kv // tp  # the key/value head this rank holds a copy of
    for attn in attns:
        grad = attn.c_attn.weight.grad  # ((h_r + 2)·hs, C): [q_r; k; v] rows
        if grad is None:
            continue
        q_rows = attn.n_head * attn.head_dim
        slots = torch.zeros((n_kv, grad.size(0) - q_rows, grad.size(1)), dtype=grad.dtype,
                            device=grad.device)  # (n_kv, 2·hs, C)
        slots[head] = grad[q_rows:]
        comm.all_reduce(slots)  # (n_kv, 2·hs, C) summed over tp: slot j over j's copies
        grad[q_rows:] = slots[head]
