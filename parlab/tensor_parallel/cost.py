"""Cost model of tensor and sequence parallelism: exact bytes per rank, activation memory, time.

Bytes. Megatron-LM (Shoeybi et al. 2019, §3): per transformer block and step, 2 all-reduces of
the (B, T, C) activations in forward (operator g) and 2 in backward (operator f). Sequence
parallelism (Korthikanti et al., MLSys 2023, §4.2.2) replaces each all-reduce by an all-gather
and a reduce-scatter of the same tensor: a ring all-reduce is exactly those two (Patarasuk & Yuan
2009), so the bytes are equal. Ring counts per rank: `parlab.core.cost`.

Time. Per block and step the matmuls cost ≈ 3 · 2·B·T·(12C²)/tp flops (forward + 2× backward,
Kaplan et al. 2020's 6·N·D rule at 12C² weights per block) while communication costs
4 all-reduces of B·T·C·4 bytes: compute shrinks with tp, communication does not, so TP pays off
only on a link fast enough (`block_times`).
"""

from __future__ import annotations

from parlab.core import cost
from parlab.core.cost import FP32_BYTES

FP32 = FP32_BYTES


def closed_form_bytes(cfg_model, batch_rows: int, tp: int, tp_rank: int, steps: int,
                      sequence_parallel: bool, regather: bool = True,
                      vocab_parallel: bool = False, checkpoint: bool = False,
                      element_size: int = FP32) -> dict[str, int]:
    """Exact bytes one tp rank sends in `steps` steps, by ledger phase (tp comm only).

    S = batch_rows·T·C elements per activation message (batch_rows = batch / dp).
    tp: per block 2 ring all-reduces forward and 2 backward.
    tp-sp: per block 2 all-gathers + 2 reduce-scatters forward; in backward 2 reduce-scatters
    (of the gathers) + 2 all-gathers (of the reduce-scatters), + 2 all-gathers that rebuild the
    column inputs when `regather`; and one all-reduce of the replicated parameters' gradients,
    flattened into one bucket.
    vocab_parallel (tp only): + 1 all-reduce of S for the embedding and 3 of B·T for the
    cross-entropy in forward, + 1 all-reduce of S (f before the head) in backward.
    checkpoint (activation checkpointing of each block): backward recomputes the block's forward
    and with it its collectives (labelled tp-forward) — all but the last one, because PyTorch's
    non-reentrant checkpoint stops recomputing once every saved tensor is back ("early stop"),
    and nothing saved depends on the MLP's closing all-reduce / reduce-scatter.
    element_size: bytes of an activation / gradient element, 4 in fp32, 2 in bf16-mixed and
    fp16-mixed (`parlab.core.cost.element_bytes`; the 16-bit activations move half the bytes,
    the vocab-parallel cross-entropy's three all-reduces stay fp32: the loss is computed in fp32).
    """
    zero = {"tp-forward": 0, "tp-backward": 0, "sp-grad-sync": 0}
    if tp == 1:
        return zero
    S = batch_rows * cfg_model.block_size * cfg_model.n_embd
    per_block = steps * cfg_model.n_layer * element_size
    ar = cost.ring_all_reduce(S, tp, tp_rank)[0]
    ag = cost.ring_all_gather(S, tp, tp_rank)[0]
    rs = cost.ring_reduce_scatter(S, tp, tp_rank)[0]
    if not sequence_parallel:
        recompute = per_block * ar if checkpoint else 0  # the attention's g again
        out = {**zero, "tp-forward": per_block * 2 * ar + recompute,
               "tp-backward": per_block * 2 * ar}
        if vocab_parallel:
            tokens = cost.ring_all_reduce(batch_rows * cfg_model.block_size, tp, tp_rank)[0]
            out["tp-forward"] += steps * (element_size * ar + FP32 * 3 * tokens)  # fp32 loss
            out["tp-backward"] += steps * element_size * ar
        return out
    sync = cost.ring_all_reduce(sum(replicated_numels(cfg_model)), tp, tp_rank)[0]  # one bucket
    recompute = per_block * (2 * ag + rs) if checkpoint else 0  # all but the MLP's reduce-scatter
    return {"tp-forward": per_block * 2 * (ag + rs) + recompute,
            "tp-backward": per_block * (2 * (ag + rs) + (2 * ag if regather else 0)),
            "sp-grad-sync": steps * element_size * sync}


def replicated_numels(cfg_model) -> list[int]:
    """Element counts of the parameters every tp rank holds whole: wte, wpe, the LayerNorms."""
    C = cfg_model.n_embd
    return ([cfg_model.vocab_size * C, cfg_model.block_size * C]
            + [C] * (4 * cfg_model.n_layer)  # ln_1, ln_2: weight and bias per block
            + [C, C])  # ln_f


def block_times(batch_rows: int, seq_len: int, n_embd: int, tp: int, flops_per_s: float,
                alpha: float, beta: float) -> dict[str, float]:
    """Predicted seconds per block and step: matmul compute (÷ tp) and the 4 all-reduces."""
    flops = 6 * batch_rows * seq_len * 12 * n_embd ** 2 / tp
    nbytes = batch_rows * seq_len * n_embd * FP32
    comm = 4 * cost.all_reduce_time(nbytes, tp, alpha, beta) if tp > 1 else 0.0
    return {"compute_s": flops / flops_per_s, "comm_s": comm}


def activation_bytes(cfg_model, batch_rows: int, tp: int, sequence_parallel: bool,
                     regather: bool = True, element_size: int = FP32) -> int:
    """Bytes of tensors saved for backward at the peak (end of forward) on one tp rank (tp and
    tp-sp with the replicated head; vocab_parallel's head is not counted here).

    Counted tensor by tensor for this tiny GPT (fp32, no dropout; Korthikanti et al. 2023 §4.1
    do the same count for GPT-3 in fp16 with dropout and get sbh(34 + 5as/h) per layer). Per
    block, with b = batch_rows, s = T, h = C, a = heads:
    LayerNorm region (÷ tp only with SP): 2 LayerNorm inputs, 2 LayerNorm outputs (saved by the
    column linears) = 4·bsh floats, + mean and 1/std of each LayerNorm = 4·bs floats;
    (with SP and regather=False the column linears keep their all-gathered (B, T, C) inputs);
    tensor-parallel region (÷ tp): q, k, v copies for the two batched matmuls 3·bsh, the head
    outputs saved by the attention projection bsh, the MLP's 4h-wide GeLU input and output
    8·bsh, the softmax output a·bs² floats; and the causal mask, s² bools (one byte each).
    Outside the blocks (÷ tp only with SP): token ids, positions and targets (int64), the final
    LayerNorm's input, output and stats, the log-softmax over the vocabulary.
    element_size: 4 (fp32) or 2 (`precision="bf16-mixed"`/"fp16-mixed": every saved activation,
    LayerNorm statistics included, is 16-bit — except the log-softmax over the vocabulary and
    the loss weight, which the loss computes in fp32).
    """
    b, s, h, a, V = batch_rows, cfg_model.block_size, cfg_model.n_embd, cfg_model.n_head, \
        cfg_model.vocab_size
    ln_div = tp if sequence_parallel else 1  # what SP shards on top of TP
    gathered = 2 * b * s * h if sequence_parallel and not regather else 0  # full column inputs
    per_block = element_size * ((4 * b * s * h + 4 * b * s) / ln_div + gathered * (1 - 1 / tp)
                                + (12 * b * s * h + a * b * s * s) / tp) + s * s
    tokens = b * s / ln_div  # tokens this rank embeds and scores
    ids = 8 * (tokens + s / ln_div + tokens)  # token ids, positions, targets (int64)
    outside = (ids + element_size * (2 * tokens * h + 2 * tokens)
               + FP32 * (tokens * V + 1))  # fp32 log-softmax and loss weight
    return int(cfg_model.n_layer * per_block + outside)
