"""A searched program, run: the tiny GPT cut by one sharding choice per operator (Zhang et al.,
"HAP: SPMD DNN Training on Heterogeneous GPU Clusters with Automated Program Synthesis", EuroSys
2024), with a resharding wherever two operators disagree on a tensor's layout.

`parlab.heterogeneous.programs` says what each choice holds and what each resharding does; this
module builds it. Every linear is the reference's weight cut by ranges (columns: output features,
rows: input features, whole heads for attention, by the sharding ratios of
`parlab.heterogeneous.tp_shares`), so the program computes what the single process does. The
block is the GPT's own (`parlab.models.gpt.Block`, `CausalSelfAttention`, `MLPBlock`) with these
linears plugged in: attention's q, k, v split and head count are read from the width it is given,
so one code path runs whole heads, this rank's heads, or this rank's batch rows.

`Reshard` is the one communication pattern, a named autograd Function: forward it turns the
producer's layout into the consumer's, backward the consumer's gradient into the producer's
(`programs.edge`). Its collectives are the exact-size ring all-gather / reduce-scatter of
`parlab.heterogeneous.uneven` and `Comm.all_reduce`; every byte lands in the ledger, and
`parlab.heterogeneous.cost.hap_bytes` predicts them.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.heterogeneous import programs as pg
from parlab.heterogeneous import uneven
from parlab.heterogeneous.tp_shares import bounds
from parlab.models.gpt import Block, CausalSelfAttention, MLPBlock
from parlab.models.gpt_trunk import embed_tokens, run_blocks, tied_head

FORWARD, BACKWARD = "hap-forward", "hap-backward"


@dataclass(frozen=True)
class Layouts:
    """How one tensor (B, T, width·C) is cut on this rank's group: batch rows and feature units
    (whole heads of `unit` features in `groups` stacked blocks, or hidden columns of one)."""

    rows: list
    features: list
    unit: int
    groups: int

    def sizes(self, layout: str) -> list[int]:
        return self.rows if layout == pg.D else [u * self.unit for u in self.features]


def layouts_of(width: int, model_config, split: dict) -> Layouts:
    if pg.feature_dimension(width) == "columns":
        return Layouts(split["rows"], split["columns"], 1, 1)
    return Layouts(split["rows"], split["heads"], model_config.head_dim, 3 if width == 3 else 1)


def _grouped(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(..., g·W) -> (..., g, W): q, k, v as three blocks, so each is cut by heads on its own."""
    return x.view(*x.shape[:-1], groups, x.shape[-1] // groups)


def apply_steps(comm, x: torch.Tensor, steps: tuple, cut: Layouts, phase: str) -> torch.Tensor:
    """Run resharding `steps` (`programs.resharding`) on this rank's tensor x (B or b_r, T, ...)."""
    if comm.size == 1:
        return x
    for step in steps:
        kind, layout = pg.step_kind(step)
        if kind == "all_reduce":
            x = x.clone()  # autograd's input stays as it was
            comm.all_reduce(x, phase=phase)  # (B, T, W) summed over the group
            continue
        sizes = cut.sizes(layout)
        lo, hi = bounds(sizes)[comm.rank]
        if layout == pg.D:
            if kind == "slice":
                x = x[lo:hi]  # (b_r, T, W) this rank's rows
            elif kind == "all_gather":
                x = uneven.all_gather(comm, x.contiguous(), sizes, 0, "exact", phase)  # (B, T, W)
            else:
                x = uneven.reduce_scatter(comm, x, sizes, 0, "exact", phase)  # (b_r, T, W)
            continue
        grouped = _grouped(x, cut.groups)  # (B, T, g, W/g)
        if kind == "slice":
            part = grouped[..., lo:hi]  # (B, T, g, w_r) this rank's heads or columns
        elif kind == "all_gather":
            part = uneven.all_gather(comm, grouped.contiguous(), sizes, 3, "exact", phase)  # (B, T, g, W/g)
        else:
            part = uneven.reduce_scatter(comm, grouped, sizes, 3, "exact", phase)  # (B, T, g, w_r)
        x = part.reshape(*part.shape[:2], -1)  # (B, T, g·w)
    return x


class Reshard(torch.autograd.Function):
    """Forward: this tensor from the producer's layout to the consumer's (`edge.forward`: a slice,
    an all-gather, an all-reduce or a reduce-scatter, along batch rows or features). Backward: the
    consumer's gradient to the producer's (`edge.backward`), e.g. Megatron's f: nothing forward,
    all-reduce backward; sequence parallelism's all-gather: reduce-scatter backward."""

    @staticmethod
    def forward(ctx, x, comm, edge: pg.Edge, cut: Layouts):
        ctx.comm, ctx.edge, ctx.cut = comm, edge, cut
        out = apply_steps(comm, x, edge.forward, cut, FORWARD)
        return out.view_as(out) if out is x else out  # a new autograd node even when unchanged

    @staticmethod
    def backward(ctx, grad):
        return apply_steps(ctx.comm, grad.contiguous(), ctx.edge.backward, ctx.cut, BACKWARD), \
            None, None, None


class Resharded(nn.Module):
    """A bias-free linear holding this rank's part of the weight (`weight`, the reference's name),
    with the reshardings of its input (`before`) and output (`after`) around it; either may be
    None (the other side of an elementwise operator reshards it)."""

    def __init__(self, weight: torch.Tensor, comm, before=None, after=None):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.comm, self.before, self.after = comm, before, after

    def forward(self, x):
        if self.before is not None:
            x = Reshard.apply(x, self.comm, *self.before)  # (..., in_r) the layout this linear takes
        y = F.linear(x, self.weight)  # (..., out_r)
        if self.after is not None:
            y = Reshard.apply(y, self.comm, *self.after)  # (..., out) the layout the next one takes
        return y


def cut_weight(weight: torch.Tensor, op: str, choice: str, cuts: dict, rank: int) -> torch.Tensor:
    """This rank's part of a linear's weight (out, in): columns keep its output features [lo, hi)
    (in q, k, v each), rows its input features, replicate and data-parallel all of it."""
    from parlab.tensor_parallel.layers import rows

    if choice == pg.COLUMNS:
        cut = cuts[pg.WIDTHS[op][1]]
        lo, hi = bounds(cut.sizes(pg.F))[rank]
        return rows(weight, 0, lo, hi, cut.groups)  # (out_r, in)
    if choice == pg.ROWS:
        lo, hi = bounds(cuts[pg.WIDTHS[op][0]].sizes(pg.F))[rank]
        return rows(weight, 1, lo, hi)  # (out, in_r)
    return weight.clone()  # (out, in)


def hap_block(block: Block, program: pg.Program, cuts: dict, comm) -> Block:
    """The GPT's block under `program` on this rank: LayerNorms copied (they work on the stream's
    layout), the four linears cut, and each tensor between operators resharded."""
    by = {e.name: (e, cuts[e.width]) for e in pg.edges(program)}
    rank = comm.rank

    def linear(module, op, before, after):
        return Resharded(cut_weight(module.weight.detach(), op, program[op], cuts, rank), comm,
                         *(by[e] if by[e][0].forward or by[e][0].backward else None
                           for e in (before, after)))

    attn = block.attn
    heads = cuts[3].features[rank] if program["core"] == pg.COLUMNS else attn.n_head
    c_attn = linear(attn.c_attn, "c_attn", "ln_1", "qkv")  # q, k, v in the core's layout
    c_proj = linear(attn.c_proj, "attn_proj", "heads", "attn_out")  # back in the stream's layout
    c_fc = linear(block.mlp.c_fc, "c_fc", "ln_2", "hidden")  # GeLU's layout
    mlp_proj = linear(block.mlp.c_proj, "mlp_proj", "act", "mlp_out")
    return Block(_copy(block.ln_1), CausalSelfAttention(c_attn, c_proj, heads, attn.head_dim),
                 _copy(block.ln_2), MLPBlock(c_fc, mlp_proj))


def _copy(module: nn.Module) -> nn.Module:
    """A deep copy; shapes-only, torch warns that deepcopy reads a fake tensor's data pointer."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
        return copy.deepcopy(module)


class HapGPT(nn.Module):
    """The tiny GPT on one rank under a HAP program: the blocks of `hap_block`, the embeddings,
    final LayerNorm and tied head on the stream's layout (all B rows when it is replicated, this
    rank's b_r rows when it is data-parallel). The loss is the summed cross-entropy of the rows
    this rank scores over all B·T tokens: the ranks' losses add up to the mean (data-parallel
    stream), or every rank holds the whole mean (replicated stream; rank 0 reports it)."""

    def __init__(self, model, program: pg.Program, split: dict, comm):
        super().__init__()
        m = model.config
        self.config, self.program, self.split = m, program, split
        self.rows = (bounds(split["rows"])[comm.rank] if program["stream"] == pg.DATA
                     else (0, sum(split["rows"])))
        self.wte, self.wpe, self.ln_f = (_copy(x) for x in (model.wte, model.wpe, model.ln_f))
        cuts = {w: layouts_of(w, m, split) for w in (1, 3, 4)}
        self.blocks = nn.ModuleList(hap_block(b, program, cuts, comm) for b in model.blocks)

    def partial_parameters(self) -> list[nn.Parameter]:
        """The parameters whose gradients are partial sums over the ranks (`programs.partial_gradients`)."""
        stream, linears = pg.partial_gradients(self.program)
        suffixes = {"attn.c_attn.weight": "c_attn", "attn.c_proj.weight": "attn_proj",
                    "mlp.c_fc.weight": "c_fc", "mlp.c_proj.weight": "mlp_proj"}
        out = []
        for name, p in self.named_parameters():
            op = next((o for s, o in suffixes.items() if name.endswith(s)), None)
            if (op is None and stream) or (op is not None and op in linears):
                out.append(p)
        return out

    def loss(self, idx, targets):
        B, T = targets.shape
        mine = slice(*self.rows)
        x = embed_tokens(self, idx[mine])  # (b_r, T, C) this rank's rows, or all
        logits = tied_head(self.ln_f, self.wte, run_blocks(self.blocks, x))  # (b_r, T, vocab)
        losses = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(),
                                 targets[mine].reshape(-1), reduction="sum")
        return losses / (B * T)


def assemble_hap_state(states: list[dict], program: pg.Program) -> dict:
    """The full reference-named state from every rank's (in rank order): columns glued along the
    output features (q, k, v each), rows along the input features, the rest from rank 0."""
    from parlab.tensor_parallel.layers import unshard_weight

    suffixes = {"attn.c_attn.weight": ("c_attn", 3), "attn.c_proj.weight": ("attn_proj", 1),
                "mlp.c_fc.weight": ("c_fc", 1), "mlp.c_proj.weight": ("mlp_proj", 1)}
    full = {}
    for name, value in states[0].items():
        op, groups = next((v for s, v in suffixes.items() if name.endswith(s)), (None, 1))
        choice = program[op] if op else None
        if choice == pg.COLUMNS:
            full[name] = unshard_weight([s[name] for s in states], 0, groups)
        elif choice == pg.ROWS:
            full[name] = unshard_weight([s[name] for s in states], 1)
        else:
            full[name] = value
    return full
