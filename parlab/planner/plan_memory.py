"""Predicted peak memory per rank of any `Plan` (the cost model's memory half, `costmodel`).

Memory per rank: parameters, gradients and AdamW's two moments of the rank's slice (tp divides the
block matrices, pp keeps its stage's blocks — the first stage the embeddings, the last the final
norm and the tied head — ZeRO stage s divides over dp × cp what the ZeRO paper's §5 divides,
padded per unit as `parlab.zero.shard` pads); activations per micro-batch from the tensor-parallel
chapter's tensor-by-tensor count (`parlab.tensor_parallel.cost.activation_bytes`; ring attention's
own graph with cp, `ring_attention_extra`) times the micro-batches in flight
(`parlab.pipeline.cost.in_flight_peak`); with checkpointing only each block's input stays.
"""

from __future__ import annotations

import dataclasses

from parlab.core.cost import FP32_BYTES, round_up, shard_sizes
from parlab.pipeline.cost import in_flight_peak
from parlab.tensor_parallel.cost import activation_bytes

FP32 = FP32_BYTES


def block_tensor_numels(m, tp: int) -> list[int]:
    """Elements of one block's 8 tensors on a tp rank: LayerNorms whole, matrices ÷ tp."""
    C = m.n_embd
    return [C, C, 3 * C * C // tp, C * C // tp, C, C, 4 * C * C // tp, 4 * C * C // tp]


def stage_numels(m, plan, stage: int) -> dict[str, list[int]]:
    """{unit: tensor numels} held by pipeline stage `stage` (blocks, then the root unit)."""
    counts = shard_sizes(m.n_layer, plan.pp)
    units = {f"block{i}": block_tensor_numels(m, plan.tp) for i in range(counts[stage])}
    root = []
    if stage == 0:
        root += [m.vocab_size * m.n_embd, m.block_size * m.n_embd]  # wte, wpe
    if stage == plan.pp - 1:
        root += [m.n_embd, m.n_embd] + ([m.vocab_size * m.n_embd] if plan.pp > 1 else [])
    units["root"] = root
    return units


def state_memory(m, plan, stage: int) -> dict[str, int]:
    """Bytes of params, grads, AdamW moments on one rank of `stage` (ZeRO paper §5, padded)."""
    units = stage_numels(m, plan, stage)
    group = plan.dp * plan.cp  # ZeRO shards over every rank holding the same slice (dp × cp)
    full = sum(sum(u) for u in units.values())
    shard = sum(round_up(sum(u), group) // group for u in units.values() if u)
    z = plan.zero if group > 1 else 0
    return {"params": FP32 * (shard if z >= 3 else full),
            "grads": FP32 * (shard if z >= 2 else full),
            "optimizer": 2 * FP32 * (shard if z >= 1 else full)}


def activation_memory(m, plan, stage: int, batch_size: int) -> int:
    """Bytes saved for backward at the peak on one rank of `stage` (tensor counts of chapter 03)."""
    rows = batch_size // (plan.dp * plan.microbatches)
    seq = m.block_size // plan.cp
    sub = dataclasses.replace(m, block_size=seq)
    one = activation_bytes(dataclasses.replace(sub, n_layer=1), rows, plan.tp, False)
    none = activation_bytes(dataclasses.replace(sub, n_layer=0), rows, plan.tp, False)
    per_block = one - none
    if plan.cp > 1:
        per_block += ring_attention_extra(m, plan, rows, seq)
    blocks = shard_sizes(m.n_layer, plan.pp)[stage]
    ids = 8 * (rows * seq + seq)  # token ids and positions on the first stage
    outside = (none - ids if stage == plan.pp - 1 else 0) + (ids if stage == 0 else 0)
    shared = 8 * seq if stage == 0 else 0  # the positions: one tensor for every micro-batch
    if plan.checkpoint:  # each block's input stays (measured at the end of forward)
        per_mb = blocks * FP32 * rows * seq * m.n_embd + outside
    else:
        per_mb = blocks * per_block + outside
    in_flight = in_flight_peak(plan.schedule if plan.pp > 1 else "naive", plan.pp,
                               plan.microbatches, stage) if plan.pp > 1 else 1
    return int(in_flight * (per_mb - shared) + shared)


def ring_attention_extra(m, plan, rows: int, seq: int) -> int:
    """Bytes ring attention (chapter 06, zigzag, causal) saves per layer beyond the plain
    attention that `activation_bytes` counts, counted tensor by tensor from its autograd graph:
    the same q, k, v storage 3·bsh, plus cp received K/V buffers 2·bsh each, the probabilities
    of the 2cp+1 chunk blocks a rank computes (b·nh·(T/2cp)² each) instead of one b·nh·s² score
    matrix, and per merge (2cp−1 of them, the online-softmax rule) the block outputs, log-sum-
    exps and their two weights — (4cp−2)·(b·nh·c·hs + 2·b·nh·c); no s² causal mask."""
    b, s, cp = rows, seq, plan.cp
    nh, hs, c = m.n_head // plan.tp, m.n_embd // m.n_head, seq // 2
    bsh = b * s * m.n_embd // plan.tp
    ring = (3 * bsh + 2 * cp * bsh + (2 * cp + 1) * b * nh * c * c
            + (4 * cp - 2) * (b * nh * c * hs + 2 * b * nh * c))
    plain = 3 * bsh + nh * b * s * s
    return FP32 * (ring - plain) - s * s


def memory(m, plan, batch_size: int) -> dict:
    """The peak rank's bytes by kind (the rank with the largest total)."""
    best = None
    for stage in range(plan.pp):
        row = state_memory(m, plan, stage)
        row["activations"] = activation_memory(m, plan, stage, batch_size)
        row["total"] = sum(row.values())
        if best is None or row["total"] > best["total"]:
            best = row
    return best


# ----------------------------------------------------------------------------- messages
