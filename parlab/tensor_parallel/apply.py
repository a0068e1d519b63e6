"""`apply_tp(model, mesh)`: Megatron tensor parallelism on the one GPT, even or uneven shares.

Shoeybi et al., "Megatron-LM" (2019), §3, on the GPT of `parlab.models.gpt`: in every block
q, k, v and the MLP's first linear become column-parallel (f before them), both output
projections row-parallel (g after them); the slices are cut from the reference's weights
(`parlab.tensor_parallel.layers`). Options, each the chapter's own:

- `sequence_parallel` (Korthikanti et al., MLSys 2023, §4.2.2): this rank holds only its T/tp
  positions between the blocks (`model.positions`), the all-reduces become all-gather /
  reduce-scatter pairs; `regather`, `algo` (gloo's or chapter 00's ring collectives);
- `vocab_parallel`: the tied embedding / head cut by vocabulary rows
  (`parlab.tensor_parallel.vocab`), its loss the model's `criterion`;
- `shares` (chapter 11, Zhang et al., "HAP", EuroSys 2024): heads, MLP columns and positions per
  rank, uneven (a split like heads [3, 1]), with the uneven sequence-parallel collectives that
  chapter passes in (`uneven=`: `parlab.heterogeneous.tp_layers.uneven_linears`, `collective`:
  padded or exact).

The chapter's schemes (`tp`, `tp-sp`, chapter 11's `hetero-tp`) and the planner
(`parlab.planner.compose`) all build their model with this call.
"""

from __future__ import annotations

import torch

from parlab.core.cost import chunk_bounds as bounds
from parlab.core.mesh import Mesh
from parlab.engine.dimension import Dimension, add_dimension
from parlab.models.gpt import GPT
from parlab.models.gpt_moe import MoE
from parlab.models.llama_parts import SwiGLU
from parlab.tensor_parallel.layers import (
    ParallelAttention,
    ParallelMLP,
    ParallelSwiGLU,
    assemble_state,
    even_linears,
    shard_weight,
)
from parlab.tensor_parallel.vocab import VocabParallelEmbedding, vocab_parallel_loss


class TensorParallel(Dimension):
    """Tensor parallelism as the step sees it: nothing to do (its messages run inside forward and
    backward); the parent glues its ranks' slices (`parlab.tensor_parallel.layers.assemble_state`)."""

    name = "tp"
    axes = ("tp",)

    def __init__(self, vocab_parallel: bool):
        self.vocab_parallel = vocab_parallel

    @staticmethod
    def assemble(pieces: list) -> dict:
        return assemble_state([p.state for p in pieces], pieces[0].extras["vocab_parallel"])

    def extras(self) -> dict:
        return {"vocab_parallel": self.vocab_parallel}


class CollectivesBy:
    """A tp `Comm` whose all-gathers and reduce-scatters run by `algo` unless told otherwise;
    everything else is the wrapped Comm's (so the ledger and link are the same)."""

    def __init__(self, comm, algo: str):
        self.comm, self.algo = comm, algo

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def all_gather(self, shard, *args, **kwargs):
        kwargs.setdefault("algo", self.algo)
        return self.comm.all_gather(shard, *args, **kwargs)

    def reduce_scatter(self, tensor, *args, **kwargs):
        kwargs.setdefault("algo", self.algo)
        return self.comm.reduce_scatter(tensor, *args, **kwargs)


def even_shares(config, tp: int) -> dict[str, list[int]]:
    """Heads, MLP columns and positions per rank, each 1/tp of the whole."""
    return {"heads": [config.n_head // tp] * tp, "columns": [config.hidden_width // tp] * tp,
            "tokens": [config.block_size // tp] * tp}


def apply_tp(model: GPT, mesh: Mesh, sequence_parallel: bool = False, regather: bool = True,
             vocab_parallel: bool = False, algo: str = "gloo", shares: dict | None = None,
             collective: str = "exact", uneven=None) -> GPT:
    """Every block's attention and dense MLP over mesh["tp"]: this rank's heads and hidden
    columns (nh/tp and 4C/tp, or `shares`); nothing to do when the mesh has no tp dimension.
    `shares` implies sequence parallelism over its uneven positions, by the linears
    `uneven(comm, tokens, collective)` makes (chapter 11 hands its own:
    `parlab.heterogeneous.tp_layers.uneven_linears`; this chapter never imports a later one)."""
    if shares is not None and uneven is None:
        raise ValueError(f"shares={shares!r} needs uneven= (the uneven sequence-parallel "
                         "linears, e.g. parlab.heterogeneous.tp_layers.uneven_linears)")
    tp = mesh.degree("tp")
    if tp == 1:
        return model
    comm, rank = mesh["tp"], mesh.coord("tp")
    if algo != "gloo":
        comm = CollectivesBy(comm, algo)
    if shares is None:
        shares = even_shares(model.config, tp)
        column, row = even_linears(comm, sequence_parallel, regather)
    else:
        sequence_parallel = True
        column, row = uneven(comm, shares["tokens"], collective)
    heads, columns = bounds(shares["heads"])[rank], bounds(shares["columns"])[rank]
    for block in model.blocks:
        attend = block.attn.attend  # keep a ring attention already set by apply_cp
        block.attn = ParallelAttention(block.attn, heads, column, row)
        block.attn.attend = attend
        if isinstance(block.mlp, SwiGLU):  # two column-parallel input projections
            block.mlp = ParallelSwiGLU(block.mlp, columns, column, row)
        elif not isinstance(block.mlp, MoE):  # experts stay whole on every tp rank (apply_ep)
            block.mlp = ParallelMLP(block.mlp, columns, column, row)
    if sequence_parallel:
        model.positions = torch.arange(*bounds(shares["tokens"])[rank])  # (t_r,) this rank's
    if vocab_parallel:  # tied embedding / head cut by vocabulary rows
        start = rank * model.config.vocab_size // tp
        model.wte = VocabParallelEmbedding(shard_weight(model.wte.weight.detach(), 0, rank, tp),
                                           comm, start)  # (V/tp, C)
        model.criterion = vocab_parallel_loss
    return add_dimension(model, TensorParallel(vocab_parallel))
