"""Closed forms of expert parallelism: bytes per rank from the routing counts, memory per rank.

All-to-all (GShard, Lepikhin et al. 2020). With E experts over an ep group (expert e on ep rank
⌊e·ep/E⌋) and kept[s, e] the assignments of rank s that expert e keeps (after capacity), rank r
of the group sends, per MoE layer and step, in units of one row of C float32:

    dispatch           out_r = Σ_{e not on r} kept[r, e]          (its tokens to other ranks)
    combine            in_r  = Σ_{s ≠ r in the group} Σ_{e on r} kept[s, e]   (outputs back)
    dispatch-backward  in_r     (gradients of the rows it received go home)
    combine-backward   out_r    (gradients of its outputs go to the experts)

A perfectly balanced router without drops gives out_r = in_r = (ep-1)/ep · N_r·k rows; the
skew of the router is the skew of the bytes. Before that, one all-gather of every rank's (k, E)
counts over the world (int64): `ring_all_gather(W·k·E)`. The all-gather alternative moves every
token of the group to every rank, whatever the routing: an all-gather of N·(C + k) floats (tokens
and gates), one of N·k int64 expert ids, a reduce-scatter of N·C floats, and the conjugates in
backward — (ep-1)·N_r·(2C + k)·4 bytes forward, compared with the all-to-all's
2·(ep-1)/ep·N_r·k·C·4 when balanced: it loses whenever k < ep (Switch, Fedus et al. 2022, §2.2,
costs the same trade with k = 1).

Gradients: the replicated (dense) parameters are all-reduced over the world, the expert weights
only over their dp replicas (`dp = W / ep`).

Memory (Rajbhandari et al. 2020's 16 bytes per parameter with AdamW in fp32: weights, grads, two
moments): 16·(Ψ_dense + Ψ_experts/ep) per rank — experts add parameters that ep divides.
"""

from __future__ import annotations

from parlab.core import cost
from parlab.core.cost import FP32_BYTES
from parlab.core.messages import Message, bytes_by, total_bytes

INT64_BYTES = 8
A2A_PHASES = ("counts", "dispatch", "combine", "dispatch-backward", "combine-backward")
GATHER_PHASES = ("counts", "gather", "routing", "scatter", "gather-backward", "scatter-backward")
SYNC_PHASES = ("grad-sync", "expert-grad-sync")


def owner(expert: int, n_experts: int, ep: int) -> int:
    """The ep rank that holds `expert`: contiguous blocks of E/ep experts."""
    return expert // (n_experts // ep)


def all_to_all_rows(kept: list[list[int]], rank: int, group: list[int]) -> tuple[int, int]:
    """(rows rank sends away, rows it receives from others) in one dispatch: kept (W, E)."""
    n_experts, ep = len(kept[0]), len(group)
    me = group.index(rank)
    out = sum(n for e, n in enumerate(kept[rank]) if owner(e, n_experts, ep) != me)
    into = sum(kept[s][e] for s in group if s != rank for e in range(n_experts)
               if owner(e, n_experts, ep) == me)
    return out, into


def counts_messages(world_size: int, top_k: int, n_experts: int, count: int = 1) -> list[Message]:
    """The all-gather of every rank's (k, E) int64 routing counts (GShard, Lepikhin et al. 2020,
    §3.2: the dispatch needs every rank's counts), `count` times a step."""
    return [Message("ep", "all_gather", world_size, world_size * top_k * n_experts, count,
                    element_bytes=INT64_BYTES, phase="counts")]


def counts_bytes(world_size: int, rank: int, top_k: int, n_experts: int) -> int:
    """Bytes one rank sends in the all-gather of every rank's (k, E) int64 counts."""
    return total_bytes(counts_messages(world_size, top_k, n_experts), rank=rank)


def all_to_all_messages(kept, rank: int, group: list[int], n_embd: int, top_k: int) -> list:
    """One MoE layer's messages of `rank` in one step (GShard §3.2): the counts' all-gather, then
    the all-to-alls of rows of C float32 — dispatch and combine-backward its own tokens' rows
    away, combine and dispatch-backward the rows it computed for others back."""
    out, into = all_to_all_rows(kept, rank, group)
    return counts_messages(len(kept), top_k, len(kept[0])) + [
        Message("ep", "all_to_all", len(group), rows * n_embd, phase=phase)
        for phase, rows in (("dispatch", out), ("combine", into), ("dispatch-backward", into),
                            ("combine-backward", out))]


def all_to_all_layer_bytes(kept, rank: int, group: list[int], n_embd: int, top_k: int) -> dict:
    """Bytes one rank sends for one MoE layer and step of `ep`, by ledger phase:
    `all_to_all_messages` summed."""
    return bytes_by(all_to_all_messages(kept, rank, group, n_embd, top_k), rank=rank)


def all_gather_messages(tokens_per_rank: int, ep: int, world_size: int, n_embd: int, top_k: int,
                        n_experts: int) -> list[Message]:
    """One MoE layer's messages of `ep-allgather` in one step (N = ep·tokens_per_rank tokens in
    the group; Fedus et al. 2022, §2.2 trade): tokens and gates, expert ids all-gathered, outputs
    reduce-scattered, and the conjugates in backward."""
    N = ep * tokens_per_rank
    return counts_messages(world_size, top_k, n_experts) + [
        Message("ep", op, ep, elements, element_bytes=width, phase=phase)
        for phase, op, elements, width in (
            ("gather", "all_gather", N * (n_embd + top_k), FP32_BYTES),
            ("routing", "all_gather", N * top_k, INT64_BYTES),
            ("scatter", "reduce_scatter", N * n_embd, FP32_BYTES),
            ("gather-backward", "reduce_scatter", N * (n_embd + top_k), FP32_BYTES),
            ("scatter-backward", "all_gather", N * n_embd, FP32_BYTES))]


def all_gather_layer_bytes(tokens_per_rank: int, ep: int, ep_rank: int, world_size: int, rank: int,
                           n_embd: int, top_k: int, n_experts: int) -> dict:
    """Bytes one rank sends for one MoE layer and step of `ep-allgather`, by ledger phase:
    `all_gather_messages` summed (the counts at world rank `rank`, the rest at `ep_rank`)."""
    msgs = all_gather_messages(tokens_per_rank, ep, world_size, n_embd, top_k, n_experts)
    return {"counts": total_bytes(msgs[:1], rank=rank), **bytes_by(msgs[1:], rank=ep_rank)}


def sync_bytes(dense_numel: int, expert_numel_local: int, world_size: int, rank: int, dp: int,
               dp_rank: int) -> dict:
    """Bytes one rank sends per step to synchronise gradients: one flat all-reduce of the dense
    gradients over the world, one of its expert gradients over the dp replicas."""
    return {"grad-sync": cost.ring_all_reduce(dense_numel, world_size, rank)[0] * FP32_BYTES
            if world_size > 1 else 0,
            "expert-grad-sync": cost.ring_all_reduce(expert_numel_local, dp, dp_rank)[0]
            * FP32_BYTES if dp > 1 else 0}


def parameter_counts(model_cfg) -> dict[str, int]:
    """{'dense': Ψ_dense, 'experts': Ψ_experts} of a gpt-moe config (expert weights of all E)."""
    C, V, T, L = model_cfg.n_embd, model_cfg.vocab_size, model_cfg.block_size, model_cfg.n_layer
    n_moe = L // model_cfg.moe_every
    mlp = 2 * C * 4 * C  # a dense MLP block (c_fc, c_proj)
    dense = V * C + T * C + 2 * C  # wte (tied head), wpe, ln_f
    dense += L * (4 * C + 4 * C * C)  # ln_1, ln_2 (weight, bias), c_attn + c_proj
    dense += (L - n_moe) * mlp + n_moe * (C * model_cfg.n_experts  # router gate
                                          + (mlp if model_cfg.shared_expert else 0))
    experts = n_moe * model_cfg.n_experts * 2 * C * model_cfg.hidden
    return {"dense": dense, "experts": experts}


def memory_per_rank(model_cfg, ep: int) -> dict[str, int]:
    """Bytes of weights, grads and AdamW's two moments one rank holds at the step's peak."""
    counts = parameter_counts(model_cfg)
    held = (counts["dense"] + counts["experts"] // ep) * FP32_BYTES
    return {"params": held, "grads": held, "optimizer": 2 * held}
