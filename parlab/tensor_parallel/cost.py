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
from parlab.core.messages import Message, bytes_by

FP32 = FP32_BYTES


def tp_messages(cfg_model, batch_rows: int, tp: int, steps: int = 1,
                sequence_parallel: bool = False, regather: bool = True,
                vocab_parallel: bool = False, checkpoint: bool = False,
                element_size: int = FP32, pipelined: bool = False) -> list[Message]:
    """The collectives one tp rank issues in `steps` steps (Shoeybi et al. 2019, §3; sequence
    parallel: Korthikanti et al. 2023, §4.2.2), S = batch_rows·T·C elements each.

    tp: per block 2 all-reduces forward (g), 2 backward (f). tp-sp: per block 2 all-gathers and
    2 reduce-scatters forward, in backward 2 reduce-scatters and 2 all-gathers, + 2 all-gathers
    that rebuild the column inputs when `regather`, and one all-reduce of the replicated
    parameters' gradients in one bucket. vocab_parallel (tp only): + 1 all-reduce of S and 3 of
    B·T (the fp32 loss) forward, + 1 of S backward. checkpoint: backward recomputes each block's
    forward collectives but the last (PyTorch's non-reentrant checkpoint stops early).
    pipelined: the messages are a micro-batch's (the planner's time model)."""
    if tp == 1:
        return []
    S = batch_rows * cfg_model.block_size * cfg_model.n_embd
    L, c = steps * cfg_model.n_layer, 1 if checkpoint else 0

    def msg(op, count, phase, elements=S, width=element_size):
        return Message("tp", op, tp, elements, count, pipelined, width, phase)

    kv = _kv_grad_sync(cfg_model, tp, steps, pipelined)
    if not sequence_parallel:
        out = kv + [msg("all_reduce", L * (2 + c), "tp-forward"),
               msg("all_reduce", L * 2, "tp-backward")]
        if vocab_parallel:
            out += [msg("all_reduce", steps, "tp-forward"),
                    msg("all_reduce", 3 * steps, "tp-forward", batch_rows * cfg_model.block_size,
                        FP32),  # fp32 loss
                    msg("all_reduce", steps, "tp-backward")]
        return out
    return kv + [msg("all_gather", L * (2 + 2 * c), "tp-forward"),
            msg("reduce_scatter", L * (2 + c), "tp-forward"),  # all but the MLP's recomputed
            msg("reduce_scatter", L * 2, "tp-backward"),
            msg("all_gather", L * (4 if regather else 2), "tp-backward"),
            msg("all_reduce", steps, "sp-grad-sync", sum(replicated_numels(cfg_model)))]


def _kv_grad_sync(cfg_model, tp: int, steps: int, pipelined: bool) -> list[Message]:
    """Past tp = n_kv_head: one all-reduce per block and step of a (n_kv, 2·hs, C) fp32 gradient,
    each key/value head's copies summed (`parlab.tensor_parallel.gqa.sync_replicated_kv`)."""
    from parlab.tensor_parallel.gqa import copies_of

    if copies_of(cfg_model, tp) == 1:
        return []
    hs = cfg_model.n_embd // cfg_model.n_head
    return [Message("tp", "all_reduce", tp, cfg_model.n_kv_head * 2 * hs * cfg_model.n_embd,
                    steps * cfg_model.n_layer, pipelined, FP32, "kv-grad-sync")]


def closed_form_bytes(cfg_model, batch_rows: int, tp: int, tp_rank: int, steps: int,
                      sequence_parallel: bool, regather: bool = True,
                      vocab_parallel: bool = False, checkpoint: bool = False,
                      element_size: int = FP32) -> dict[str, int]:
    """Exact bytes one tp rank sends in `steps` steps, by ledger phase (tp comm only): the ring
    counts of `tp_messages` summed. element_size: 4 in fp32, 2 in bf16-/fp16-mixed
    (`parlab.core.cost.element_bytes`; the vocab-parallel loss's all-reduces stay fp32)."""
    out = {"tp-forward": 0, "tp-backward": 0, "sp-grad-sync": 0}
    msgs = tp_messages(cfg_model, batch_rows, tp, steps, sequence_parallel, regather,
                       vocab_parallel, checkpoint, element_size)
    out.update(bytes_by(msgs, "phase", rank=tp_rank))
    return out


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
