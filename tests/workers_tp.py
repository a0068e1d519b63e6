"""Rank workers for the chapter 03 tests (tensor parallelism, resharding): importable by the ranks."""

import torch

from parlab.core.comm import Comm
from parlab.models.gpt import Block, GPTConfig
from parlab.tensor_parallel.layers import ColumnParallelLinear, ParallelBlock, RowParallelLinear, shard_weight


def _max_diff(a, b):
    return (a - b).abs().max().item()


def parallel_layers_match(rank, world_size, sequence_parallel, regather=True):
    """Column-, row-parallel linears and a whole block, built from sliced reference weights, give
    the reference outputs and gradients. Returns the worst absolute difference of each check."""
    comm = Comm()
    g = torch.Generator().manual_seed(0)
    B, T, C = 2, 8, 16
    x = torch.randn(B, T, C, generator=g)  # (B, T, C) the same on every rank
    out_grad = torch.randn(B, T, 4 * C, generator=g)  # (B, T, 4C) dL/dy of the reference
    weight = torch.randn(4 * C, C, generator=g)  # (4C, C) reference column-linear weight
    seq = slice(rank * T // world_size, (rank + 1) * T // world_size)
    errors = {}

    # column-parallel: y_i = x·A_iᵀ; dL/dx needs every rank's part (all-reduce or reduce-scatter)
    ref_x, ref_w = x.clone().requires_grad_(), weight.clone().requires_grad_()
    ref_y = ref_x @ ref_w.t()  # (B, T, 4C)
    ref_y.backward(out_grad)
    layer = ColumnParallelLinear(shard_weight(weight, 0, rank, world_size), comm,
                                 sequence_parallel, regather)
    local_x = (x[:, seq] if sequence_parallel else x).clone().requires_grad_()  # (B, T/tp|T, C)
    y = layer(local_x)  # (B, T, 4C/tp)
    cols = slice(rank * 4 * C // world_size, (rank + 1) * 4 * C // world_size)
    y.backward(out_grad[..., cols])
    errors["column_output"] = _max_diff(y, ref_y[..., cols])
    errors["column_input_grad"] = _max_diff(local_x.grad, ref_x.grad[:, seq] if sequence_parallel
                                            else ref_x.grad)
    errors["column_weight_grad"] = _max_diff(layer.weight.grad, ref_w.grad[cols])

    # row-parallel: z = Σ_i y_i·B_iᵀ, the partial sums reduced (all-reduce or reduce-scatter)
    h = torch.randn(B, T, 4 * C, generator=g)  # (B, T, 4C)
    proj = torch.randn(C, 4 * C, generator=g)  # (C, 4C)
    z_grad = torch.randn(B, T, C, generator=g)  # (B, T, C)
    ref_h, ref_p = h.clone().requires_grad_(), proj.clone().requires_grad_()
    ref_z = ref_h @ ref_p.t()  # (B, T, C)
    ref_z.backward(z_grad)
    row = RowParallelLinear(shard_weight(proj, 1, rank, world_size), comm, sequence_parallel)
    local_h = h[..., cols].clone().requires_grad_()  # (B, T, 4C/tp)
    z = row(local_h)  # (B, T, C) or (B, T/tp, C)
    z.backward(z_grad[:, seq] if sequence_parallel else z_grad)
    errors["row_output"] = _max_diff(z, ref_z[:, seq] if sequence_parallel else ref_z)
    errors["row_input_grad"] = _max_diff(local_h.grad, ref_h.grad[..., cols])
    errors["row_weight_grad"] = _max_diff(row.weight.grad, ref_p.grad[:, cols])

    # a whole transformer block
    cfg = GPTConfig(n_embd=C, n_head=4, block_size=T)
    torch.manual_seed(1)
    block = Block.for_config(cfg)
    ref_in = x.clone().requires_grad_()
    ref_out = block(ref_in)  # (B, T, C)
    ref_out.backward(z_grad)
    pblock = ParallelBlock(block, comm, rank, world_size, sequence_parallel, regather)
    local_in = (x[:, seq] if sequence_parallel else x).clone().requires_grad_()
    out = pblock(local_in)  # (B, T/tp, C) or (B, T, C)
    out.backward(z_grad[:, seq] if sequence_parallel else z_grad)
    errors["block_output"] = _max_diff(out, ref_out[:, seq] if sequence_parallel else ref_out)
    errors["block_input_grad"] = _max_diff(local_in.grad, ref_in.grad[:, seq]
                                           if sequence_parallel else ref_in.grad)
    errors["block_qkv_grad"] = _max_diff(pblock.attn.c_attn.weight.grad, shard_weight(
        block.attn.c_attn.weight.grad, 0, rank, world_size, 3))
    ln_grad = pblock.ln_1.weight.grad.clone()
    if sequence_parallel:  # each rank's LayerNorm saw only its tokens: the sum is the gradient
        comm.all_reduce(ln_grad)
    errors["block_layernorm_grad"] = _max_diff(ln_grad, block.ln_1.weight.grad)
    return errors


def reshard_check(rank, world_size, shape, src_layout, dst_layout, method, link=None):
    """Sources are ranks [0, m), destinations [m, world) with m = world/2; check the result."""
    from parlab.tensor_parallel import reshard

    tx = Comm(link=link)
    rx = Comm(ledger=tx.ledger, timeline=tx.timeline, link=link, name="world-rx")
    m = world_size // 2
    src, dst = list(range(m)), list(range(m, world_size))
    full = reshard.full_tensor(shape)
    local = None
    if rank in src:
        r0, r1, c0, c1 = reshard.region(shape, src_layout, rank, m)
        local = full[r0:r1, c0:c1].clone()
    out, seconds = reshard.timed_reshard(tx, rx, local if local is not None else full[:0], shape,
                                         src_layout, src, dst_layout, dst, method)
    ok = True
    if rank in dst:
        r0, r1, c0, c1 = reshard.region(shape, dst_layout, rank - m, world_size - m)
        ok = torch.equal(out, full[r0:r1, c0:c1])
    records = [r for r in tx.ledger.records if r["phase"] == "reshard"]
    return {"ok": ok, "seconds": seconds, "sent": sum(r["elements_sent"] for r in records),
            "recv": sum(r["elements_recv"] for r in records)}



def vocab_parallel_loss_matches(rank, world_size):
    """Vocabulary-parallel embedding + cross-entropy equal F.embedding + F.cross_entropy,
    values and gradients."""
    import torch.nn.functional as F

    from parlab.tensor_parallel.ops import CopyToTensorParallel
    from parlab.tensor_parallel.vocab import VocabParallelCrossEntropy, VocabParallelEmbedding

    comm = Comm()
    g = torch.Generator().manual_seed(0)
    V, C, B, T = 16, 8, 2, 5
    weight = torch.randn(V, C, generator=g)  # (V, C) tied embedding / head
    idx = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    ref_w = weight.clone().requires_grad_()
    ref_x = F.embedding(idx, ref_w)  # (B, T, C)
    ref_loss = F.cross_entropy((ref_x @ ref_w.t()).reshape(-1, V), targets.reshape(-1))
    ref_loss.backward()
    start = rank * V // world_size
    embed = VocabParallelEmbedding(shard_weight(weight, 0, rank, world_size), comm, start)
    x = embed(idx)  # (B, T, C)
    logits = CopyToTensorParallel.apply(x, comm) @ embed.weight.t()  # (B, T, V/tp)
    loss = VocabParallelCrossEntropy.apply(logits, targets, comm, start).mean()
    loss.backward()
    rows = slice(start, start + V // world_size)
    return {"loss": abs(loss.item() - ref_loss.item()),
            "embedding": _max_diff(x, ref_x),
            "grad": _max_diff(embed.weight.grad, ref_w.grad[rows])}
