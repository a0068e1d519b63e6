"""Composing every dimension on one mesh: `apply_tp`, `apply_cp`, `split_pp`, `apply_dp` / `apply_zero`.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC 2021, §2-3: PTD-P) stack pipeline, tensor and data parallelism on one grid of
ranks; context parallelism (Liu et al., ring attention, ICLR 2024; Llama 3, Dubey et al. 2024,
§3.3.2) cuts the sequence as a fourth dimension. The style is torchtitan's `parallelize_llama`:
one reference model, then explicit functions applied in a fixed order, each taking the mesh and
returning the model:

    model = gpt_on_mesh(build_model(cfg))     # the reference's modules, same parameter names
    model = apply_tp(model, mesh)             # Megatron column/row slices of every block (ch. 03)
    model = apply_cp(model, mesh)             # this rank's zigzag tokens, ring attention (ch. 06)
    model = apply_ep(model, mesh, ep)         # gpt-moe: experts over ep ⊂ dp, all-to-all (ch. 07)
    model = split_pp(model, mesh, ...)        # keep this rank's stage, schedule it (ch. 04)
    model = apply_dp(model, mesh)             # or apply_zero(model, mesh, stage) (ch. 01, 02)

Nothing is global: every function reads the degrees from the mesh it is given (`plan.mesh_dims`
order pp, dp, cp, tp; dimensions of size 1 are left out, `degree` says 1 for them).

The loss bookkeeping that makes every plan exact: each rank's loss is the mean cross-entropy of
its own tokens (B/dp rows × T/cp positions, equal on every rank), so the global mean loss is the
average over the dp × cp ranks that hold the same parameter slice, and so is the global gradient:
one all-reduce *average* over that dp × cp group (or ZeRO's reduce-scatter average over it).
Tensor-parallel ranks (no sequence parallelism) compute the same loss and the same gradients of
the replicated parameters: nothing to sync over tp. Pipeline stages hold disjoint layers, except
the tied embedding of the first and last stage, whose two gradients are summed (Megatron's
embedding group).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.context_parallel import ring_attention as ring
from parlab.core.mesh import Mesh
from parlab.expert_parallel.layer import AllToAllMoE, ShardedMoE
from parlab.models.gpt import attention, maybe_checkpoint
from parlab.models.gpt_moe import MoE
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.schedules import make_schedule
from parlab.pipeline.validate import check
from parlab.tensor_parallel.layers import (
    ColumnParallelLinear,
    ParallelMLP,
    RowParallelLinear,
    shard_weight,
)
from parlab.zero.zero_engine import ZeroEngine


# ----------------------------------------------------------------------------- the mesh
def build_mesh(comm, plan) -> Mesh:
    """The plan's mesh (pp, dp, cp, tp; tp innermost), dimensions of size 1 left out."""
    return Mesh(comm, [(name, size) for name, size in plan.mesh_dims() if size > 1])


def degree(mesh: Mesh, name: str) -> int:
    return mesh.size(name) if name in mesh.names else 1


def coord(mesh: Mesh, name: str) -> int:
    return mesh.coords.get(name, 0)


def groups_by(mesh: Mesh, key) -> list[list[int]]:
    """The world's ranks grouped by key(rank, {name: coordinate}), each group sorted."""
    groups: dict = {}
    for rank in range(mesh.world.size):
        groups.setdefault(key(rank, dict(zip(mesh.names, mesh.coordinate(rank)))), []).append(rank)
    return sorted(groups.values())


def group_over(mesh: Mesh, names: tuple, label: str):
    """The Comm of the ranks that differ only along `names` (e.g. dp × cp), or None if one rank.
    Collective: every rank of the mesh calls it, with the same names."""
    if not any(n in mesh.names for n in names):
        return None
    return mesh.world.split(groups_by(mesh, lambda r, c: tuple(v for n, v in c.items()
                                                                if n not in names)), label)


# ----------------------------------------------------------------------------- the model
class MeshAttention(nn.Module):
    """Causal self-attention whose projections may be tensor-parallel (this rank's nh/tp heads)
    and whose attention may reach other ranks' tokens (`attend`: ring attention under cp)."""

    def __init__(self, c_attn, c_proj, n_head: int, head_dim: int):
        super().__init__()
        self.c_attn, self.c_proj = c_attn, c_proj
        self.n_head, self.head_dim = n_head, head_dim  # heads on this rank
        self.attend = attention  # plain causal attention over the tokens this rank holds

    def forward(self, x):
        qkv = self.c_attn(x)  # (B, T/cp, 3C/tp): [q; k; v] of this rank's heads
        B, T, width = qkv.shape
        q, k, v = qkv.split(width // 3, dim=2)  # 3 × (B, T/cp, C/tp)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh/tp, T/cp, hs)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh/tp, T/cp, hs)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh/tp, T/cp, hs)
        y = self.attend(q, k, v)  # (B, nh/tp, T/cp, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, width // 3)  # (B, T/cp, C/tp)
        return self.c_proj(y)  # (B, T/cp, C): g all-reduces the partial sums under tp


class MeshBlock(nn.Module):
    """The reference's pre-LayerNorm block (its own modules), recomputed in backward when
    `checkpoint` (the recomputation redoes its tp and cp communication too)."""

    def __init__(self, block, checkpoint: bool):
        super().__init__()
        self.ln_1, self.ln_2, self.mlp = block.ln_1, block.ln_2, block.mlp
        a = block.attn
        self.attn = MeshAttention(a.c_attn, a.c_proj, a.n_head, a.head_dim)
        self.checkpoint = checkpoint

    def _forward(self, x):
        x = x + self.attn(self.ln_1(x))  # (B, T/cp, C)
        return x + self.mlp(self.ln_2(x))  # (B, T/cp, C)

    def forward(self, x):
        return maybe_checkpoint(self._forward, self.checkpoint, x)  # (B, T/cp, C)


class MeshGPT(nn.Module):
    """The tiny GPT with the reference's modules and parameter names, open to every dimension:
    `positions` are the sequence positions of the tokens this rank holds (all of them until
    `apply_cp`); `embed` and `head` are what pipeline stages call."""

    def __init__(self, model):
        super().__init__()
        self.config = model.config
        self.wte, self.wpe, self.ln_f = model.wte, model.wpe, model.ln_f
        checkpoint = getattr(model, "activation_checkpointing", False)
        self.blocks = nn.ModuleList(MeshBlock(b, checkpoint) for b in model.blocks)
        self.positions = torch.arange(model.config.block_size)  # (T,) until apply_cp
        self.pipeline = None  # split_pp's PipelineParts
        self.data_comm = None  # apply_dp / apply_zero: the dp × cp group
        self.zero = None  # apply_zero's ZeroEngine
        self.expert_comm = None  # apply_ep: the ranks holding the same experts (dp / ep of them)
        self.dp = 1  # apply_ep: the dp degree its expert gradients are divided by

    def embed(self, idx):
        return self.wte(idx) + self.wpe(self.positions)  # (B, T/cp, C) at the tokens' positions

    def head(self, x):
        return self.ln_f(x) @ self.wte.weight.t()  # (B, T/cp, vocab), tied to the embedding

    def forward(self, idx):
        x = self.embed(idx)  # (B, T/cp, C)
        for block in self.blocks:
            x = block(x)  # (B, T/cp, C)
        return self.head(x)  # (B, T/cp, vocab)

    def loss(self, idx, targets):
        """Mean cross-entropy of this rank's tokens (its share: / (dp·cp), see the module doc)."""
        logits = self(idx)  # (B, T/cp, vocab)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        for block in self.blocks:  # mixture-of-experts: + the load-balancing terms (gpt-moe)
            if isinstance(block.mlp, MoE) and block.mlp.aux is not None:
                loss = loss + block.mlp.aux
        return loss


def gpt_on_mesh(model) -> MeshGPT:
    """The reference GPT's modules (no copy) in a MeshGPT: what the apply_* functions take."""
    return MeshGPT(model)


# ----------------------------------------------------------------------------- the dimensions
def apply_tp(model: MeshGPT, mesh: Mesh) -> MeshGPT:
    """Megatron tensor parallelism over mesh["tp"] (Shoeybi et al. 2019, §3): q, k, v and the
    MLP's first linear column-parallel (f before them), both output projections row-parallel (g
    after them); the slices are cut from the reference's weights (`shard_weight`)."""
    tp = degree(mesh, "tp")
    if tp == 1:
        return model
    comm, rank = mesh["tp"], coord(mesh, "tp")
    for block in model.blocks:
        a = block.attn
        c_attn = ColumnParallelLinear(shard_weight(a.c_attn.weight.detach(), 0, rank, tp, 3), comm)
        c_proj = RowParallelLinear(shard_weight(a.c_proj.weight.detach(), 1, rank, tp), comm)
        attend = a.attend
        block.attn = MeshAttention(c_attn, c_proj, a.n_head // tp, a.head_dim)
        block.attn.attend = attend
        if not isinstance(block.mlp, MoE):  # experts stay whole on every tp rank (apply_ep)
            block.mlp = ParallelMLP(block.mlp, comm, rank, tp)
    return model


def apply_ep(model: MeshGPT, mesh: Mesh, ep: int) -> MeshGPT:
    """Expert parallelism (GShard, Lepikhin et al. 2020) borrowing its ranks from dp: dp
    coordinate d is ep rank d mod ep of ep group ⌊d/ep⌋ (DeepSpeed-MoE's layout). Every MoE keeps
    E/ep experts and dispatches rows by all-to-all within its ep group
    (`parlab.expert_parallel.layer`); the routing counts are all-gathered over the dp group, so
    capacity and dropping follow the single process's global rule. Nothing to do without MoE
    layers or with one data-parallel rank. The tp ranks hold the experts whole (the same
    routing, the same rows)."""
    moes = [b for b in model.blocks if isinstance(b.mlp, MoE)]
    dp = degree(mesh, "dp")
    if not moes or dp == 1:
        return model
    data = group_over(mesh, ("dp",), "moe-counts")  # every rank whose tokens share the capacity
    def rest(c):
        return tuple(v for n, v in c.items() if n != "dp")

    if ep > 1:  # ep groups: dp coordinates ⌊d/ep⌋·ep ... ; replicas: the same d mod ep
        ep_comm = mesh.world.split(groups_by(mesh, lambda r, c: rest(c) + (c["dp"] // ep,)), "ep")
        if dp > ep:
            model.expert_comm = mesh.world.split(
                groups_by(mesh, lambda r, c: rest(c) + (c["dp"] % ep,)), "expert-replicas")
    else:  # experts whole here: only the counts travel
        ep_comm = SimpleNamespace(size=1, rank=0, ranks=[mesh.world.global_rank(mesh.world.rank)])
    for block in moes:
        layer = (AllToAllMoE if ep > 1 else ShardedMoE)(block.mlp, data, ep_comm)
        layer.group = [data.ranks.index(r) for r in ep_comm.ranks]  # ep peers' rows in the counts
        block.mlp = layer
    model.dp = dp
    return model


def expert_parameters(model: nn.Module) -> list:
    """The expert weights sharded over ep (apply_ep with ep > 1), whose gradients sum over ep."""
    return [p for b in model.blocks if isinstance(getattr(b, "mlp", None), AllToAllMoE)
            for p in (b.mlp.w_in, b.mlp.w_out)]


def apply_cp(model: MeshGPT, mesh: Mesh) -> MeshGPT:
    """Context parallelism over mesh["cp"]: this rank keeps the zigzag chunks r and 2cp−1−r of
    the sequence (balanced causal work, Llama 3 §3.3.2) and every attention layer reaches the
    other chunks by ring attention (K/V round the ring forward, dK/dV back)."""
    cp = degree(mesh, "cp")
    if cp == 1:
        return model
    T, rank = model.config.block_size, coord(mesh, "cp")
    positions = ring.all_positions("zigzag", cp, T)  # every rank's token positions
    model.positions = positions[rank]  # (T/cp,)
    for block in model.blocks:
        block.attn.attend = partial(ring.ring_attention, comm=mesh["cp"], positions=positions,
                                    causal=True)
    return model


@dataclass
class PipelineParts:
    """What `split_pp` leaves: this rank's stage, the schedule, the comms a step needs."""

    stage_id: int
    counts: list  # layers per stage
    stages: dict  # {stage id: Stage}
    schedule: object
    comm_f: object  # activations forward (mesh["pp"])
    comm_b: object  # gradients back: their own FIFO
    tie_comm: object  # first and last stage of one pipeline: the tied embedding's two copies

    @property
    def last(self) -> bool:
        return self.stage_id == len(self.counts) - 1


def split_pp(model: MeshGPT, mesh: Mesh, schedule: str = "1f1b", microbatches: int = 1) -> MeshGPT:
    """Pipeline parallelism over mesh["pp"]: keep only this rank's even share of the blocks (plus
    the embeddings on the first stage, the final norm and tied head on the last), and the checked
    schedule (`parlab.pipeline.schedules`) that the executor will run (GPipe, Huang et al. 2019;
    1F1B, Narayanan et al. ICML 2021)."""
    pp = degree(mesh, "pp")
    if pp == 1:
        return model
    stage = coord(mesh, "pp")
    counts = stages_mod.even_partition(len(model.blocks), pp)
    tie = groups_by(mesh, lambda r, c: tuple(v for n, v in c.items() if n != "pp")
                    if c["pp"] in (0, pp - 1) else ("alone", r))  # first + last stage of a pipeline
    tie_comm = mesh.world.split(tie, "embed-tie")
    comm_b = mesh.world.split(mesh.groups("pp"), "pp-bwd")
    stages = stages_mod.build_stages(model, [stage], counts)
    model.pipeline = PipelineParts(stage, counts, stages,
                                   check(make_schedule(schedule, pp, microbatches)),
                                   mesh["pp"], comm_b, tie_comm)
    return model


def apply_dp(model: MeshGPT, mesh: Mesh) -> MeshGPT:
    """Data parallelism over every rank that holds the same parameter slice (dp × cp): the
    gradients of those ranks are averaged after backward (`parlab.planner.schemes.sync_gradients`)."""
    model.data_comm = group_over(mesh, ("dp", "cp"), "dp×cp")
    return model


def apply_zero(model: MeshGPT, mesh: Mesh, stage: int, meter=None) -> MeshGPT:
    """ZeRO stage 1, 2 or 3 (Rajbhandari et al., SC 2020) over the dp × cp group, on the slice of
    the model this rank holds after tp and pp (`parlab.zero.engine`); `meter` (an
    ActivationMeter) is told which tensors are gathered parameters, not activations."""
    model.data_comm = group_over(mesh, ("dp", "cp"), "dp×cp")
    if model.data_comm is None:
        return model  # one replica: nothing to shard
    hooks = {}
    if meter is not None:
        from parlab.core.memory import storage_key
        hooks = {"on_gather": lambda t: meter.excluded.add(storage_key(t)),
                 "on_release": lambda t: meter.excluded.discard(storage_key(t))}
    model.zero = ZeroEngine(model, model.data_comm, stage, **hooks)
    return model
