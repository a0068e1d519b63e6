"""Scheme `torch-tp`: the same tensor (and sequence) parallelism through PyTorch's own DTensor API.

PyTorch's `torch.distributed.tensor.parallel.parallelize_module` (the API torchtitan uses;
Megatron-LM's split, Shoeybi et al. 2019, and sequence parallelism, Korthikanti et al. 2023)
turns the weights into DTensors sharded on a `DeviceMesh`: `ColwiseParallel` for the q, k, v and
first MLP projections, `RowwiseParallel` for the output projections, and with `sp=True`
`SequenceParallel` on the LayerNorms, `PrepareModuleInput` all-gathering the sequence in front of
attention and MLP, and row-parallel outputs reduce-scattered to `Shard(1)`.

DTensor shards a weight's dimension 0 in one piece, so the fused qkv projection (rows
[q; k; v]) is split into three linears first (`TorchTPAttention`): cutting the fused weight would
hand rank 0 all of q and half of k. The model is built from the reference weights, so it trains
exactly like "single".

Bytes: DTensor calls torch.distributed itself, not `parlab.core.comm`; `DTensorCollectivesInLedger`
(a TorchDispatchMode, the mechanism of PyTorch's CommDebugMode) sees each collective it issues and
records it in the ledger with *nominal* ring bytes (algo "dtensor"). Activation memory is not
measured (DTensors have no storage for `parlab.core.memory.ActivationMeter` to see). The data-parallel
gradient average and the sequence-parallel sum of the embedding gradients go through
`parlab.core.comm.Comm` and are in the ledger.
"""

from __future__ import annotations

import copy
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from parlab.core.checks import Bool
from parlab.core.memory import ActivationMeter, model_memory
from parlab.core.mesh import Mesh
from parlab.engine.loop import Strategy, build_model, make_optimizer, train
from parlab.engine.runner import register
from parlab.models.gpt import multi_head
from parlab.models.gpt_trunk import run_blocks, tied_head
from parlab.tensor_parallel.schemes import TP, check_fits, resolve_tp


class TorchTPAttention(nn.Module):
    """The reference attention with the fused qkv weight split into q, k, v linears; the number
    of local heads is read from the (possibly sharded) q width, so the same code runs on one
    rank or on tp ranks."""

    def __init__(self, attn):
        super().__init__()
        self.head_dim = attn.head_dim
        q, k, v = attn.c_attn.weight.detach().chunk(3, dim=0)  # 3 × (C, C)
        self.q, self.k, self.v = (nn.Linear(w.size(1), w.size(0), bias=False) for w in (q, k, v))
        for linear, w in zip((self.q, self.k, self.v), (q, k, v)):
            linear.weight.data.copy_(w)
        self.c_proj = copy.deepcopy(attn.c_proj)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)  # 3 × (B, T, C/tp) local shards
        y = multi_head(q, k, v, self.head_dim)  # (B, T, C/tp): the heads whose q this rank holds
        return self.c_proj(y)  # (B, T, C) or (B, T/tp, C) with SP: DTensor did the comm


class TorchTPGPT(nn.Module):
    """The reference GPT with split-qkv attention; `loss` embeds only this rank's sequence
    shard when sequence parallel (like parlab's tp-sp), so wte / wpe gradients are partial."""

    def __init__(self, model, sequence_rank: int = 0, sequence_parts: int = 1):
        super().__init__()
        self.wte, self.wpe, self.ln_f = (copy.deepcopy(m) for m in (model.wte, model.wpe, model.ln_f))
        self.blocks = copy.deepcopy(model.blocks)
        for block in self.blocks:
            block.attn = TorchTPAttention(block.attn)
        self.sequence_rank, self.sequence_parts = sequence_rank, sequence_parts
        self.activation_checkpointing = getattr(model, "activation_checkpointing", False)

    def loss(self, idx, targets):
        width = idx.size(1) // self.sequence_parts
        mine = slice(self.sequence_rank * width, (self.sequence_rank + 1) * width)
        x = shard_hidden(self, idx, mine)  # (B, T/sp, C)
        return shard_loss(self, x, targets, mine)  # this rank's share of the mean


def shard_hidden(model, idx, positions: slice):
    """Embed the tokens at `positions` (this rank's sequence shard, or all of them) and run the
    blocks: idx (B, T) -> (B, t, C). The embedding looks up a copy of the shard's ids, so its
    backward keeps only these."""
    tokens = idx[:, positions].clone()  # (B, t)
    x = model.wte(tokens) + model.wpe(torch.arange(positions.start, positions.stop))  # (B, t, C)
    # checkpointed blocks redo their forward comm in backward
    return run_blocks(model.blocks, x, model.activation_checkpointing)  # (B, t, C)


def shard_loss(model, x, targets, positions: slice):
    """The tied head and the *summed* cross-entropy of the shard's tokens, divided by all B·T
    tokens: the ranks' losses add up to the mean loss of the single process."""
    B, T = targets.shape
    logits = tied_head(model.ln_f, model.wte, x)  # (B, t, vocab)
    losses = F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                             targets[:, positions].reshape(-1).clone(), reduction="sum")
    return losses / (B * T)


class DTensorCollectivesInLedger(TorchDispatchMode):
    """Writes every collective DTensor issues (torch's functional all_reduce, all-gather and
    reduce-scatter) into the parlab ledger through `Comm.record_nominal`: gloo does the work, the
    ledger records what a ring moves for a tensor of that size (`nominal=True`)."""

    OPS = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather",
           "reduce_scatter_tensor": "reduce_scatter"}

    def __init__(self, comm, phase: str):
        super().__init__()
        self.comm, self.phase = comm, phase

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        name = func._overloadpacket.__name__
        if func.namespace == "_c10d_functional" and name in self.OPS:
            local = args[0]  # the rank's input: (S,), its shard for all-gather
            op = self.OPS[name]
            numel = local.numel() * (self.comm.size if op == "all_gather" else 1)
            self.comm.record_nominal(op, local, numel, algo="dtensor", phase=self.phase,
                                     t_start=t0)  # issue time only: DTensor waits later
        return out


def torch_tp_plan(n_layer: int, sequence_parallel: bool) -> dict:
    """parallelize_module plan: Megatron's split of each block, optionally sequence parallel."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )
    plan = {}
    for i in range(n_layer):
        p = f"blocks.{i}"
        for name in ("attn.q", "attn.k", "attn.v", "mlp.c_fc"):
            plan[f"{p}.{name}"] = ColwiseParallel()
        for name in ("attn.c_proj", "mlp.c_proj"):
            plan[f"{p}.{name}"] = RowwiseParallel(output_layouts=Shard(1)) if sequence_parallel \
                else RowwiseParallel()
        if sequence_parallel:
            plan[f"{p}.ln_1"] = plan[f"{p}.ln_2"] = SequenceParallel()
        # one replicated DTensor input for q, k and v: their input gradients are summed locally
        # and all-reduced (or reduce-scattered, SP) once, not once per projection
        layout = Shard(1) if sequence_parallel else Replicate()
        for name in ("attn", "mlp"):
            plan[f"{p}.{name}"] = PrepareModuleInput(input_layouts=(layout,),
                                                     desired_input_layouts=(Replicate(),))
    if sequence_parallel:
        plan["ln_f"] = SequenceParallel(use_local_output=True)
    return plan


def full_state(model) -> dict:
    """Reference-named full parameters: DTensors gathered, q/k/v fused back into c_attn."""
    from torch.distributed.tensor import DTensor
    state = {}
    for name, p in model.named_parameters():
        value = p.full_tensor() if isinstance(p, DTensor) else p
        state[name] = value.detach().clone()
    for i in range(len(model.blocks)):
        p = f"blocks.{i}.attn"
        state[f"{p}.c_attn.weight"] = torch.cat([state.pop(f"{p}.{n}.weight") for n in "qkv"])
    return state


def _validate(cfg):
    check_fits(cfg, cfg.options["sp"])


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


class TorchTP(Strategy):
    """`parallelize_module` does the tensor parallelism inside forward and backward (its
    collectives recorded by `DTensorCollectivesInLedger`); `sync` sums the SP embedding gradients
    over tp and averages every local shard over dp through `Comm`."""

    def __init__(self, ctx):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module

        cfg, sp = ctx.cfg, ctx.cfg.options["sp"]
        tp = resolve_tp(cfg, sp)
        dp = cfg.world_size // tp
        self.mesh = Mesh(ctx.comm, [("dp", dp), ("tp", tp)])
        device_mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        tp_rank = self.mesh.coords["tp"]
        model = TorchTPGPT(build_model(cfg), tp_rank if sp else 0, tp if sp else 1)
        parallelize_module(model, device_mesh["tp"], torch_tp_plan(cfg.model_config.n_layer, sp))
        # DTensors have no storage for the activation meter to see: activations are not measured
        super().__init__(ctx, model, make_optimizer(model.parameters(), cfg),
                         shard=self.mesh.coords["dp"], shards=dp, reports_loss=sp or tp_rank == 0,
                         holds_state=ctx.rank == 0, meter=ActivationMeter())
        self.sp, self.embeddings = sp, [model.wte.weight, model.wpe.weight]

    def forward_backward(self, step: int, batch) -> float:
        x, y = batch
        tp_comm = self.mesh["tp"]
        with self.ctx.span("forward", step=step), DTensorCollectivesInLedger(tp_comm, "tp-forward"):
            loss = self.model.loss(x, y)
        with self.ctx.span("backward", step=step), \
                DTensorCollectivesInLedger(tp_comm, "tp-backward"):
            loss.backward()
        return loss.item() / self.shards

    def sync(self, step: int) -> None:
        ctx, mesh = self.ctx, self.mesh
        if self.sp and mesh.size("tp") > 1:
            with ctx.ledger.label(phase="sp-grad-sync"):
                for p in self.embeddings:  # each rank embedded T/tp tokens: sum over tp
                    mesh["tp"].all_reduce(p.grad)  # (param shape,) over tp
        if mesh.size("dp") > 1:
            with ctx.ledger.label(phase="dp-grad-sync"):
                for p in self.model.parameters():
                    mesh["dp"].all_reduce(_local(p.grad), op="avg")  # (local shard,) over dp

    def update(self, step: int) -> None:
        with DTensorCollectivesInLedger(self.mesh["tp"], "optimizer"):
            super().update(step)

    def memory(self) -> dict:
        params = list(self.model.parameters())
        memory = model_memory([_local(p).detach() for p in params], None,
                              [_local(p.grad) for p in params if p.grad is not None])
        memory["optimizer"] = sum(_local(v).numel() * v.element_size()
                                  for state in self.optimizer.state.values()
                                  for v in state.values()
                                  if isinstance(v, torch.Tensor) and v.numel() > 1)
        return memory

    def state(self) -> dict | None:
        state = full_state(self.model)  # collective: every rank gathers the DTensors
        return state if self.holds_state else None

    def extras(self) -> dict:
        return {"tp": self.mesh.size("tp"), "dp": self.mesh.size("dp")}


@register("torch-tp", summary="PyTorch parallelize_module (Colwise/Rowwise/SequenceParallel)",
          exact=True, options={"tp": TP, "sp": Bool(False)}, validate=_validate, models=("gpt",))
def torch_tp(ctx):
    return train(ctx, TorchTP(ctx))
