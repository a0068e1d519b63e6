"""Rank workers for tests/test_compose.py: importable by the ranks."""

import copy

import torch

from parlab.context_parallel.apply import apply_cp
from parlab.core.comm import Comm
from parlab.core.mesh import Mesh
from parlab.expert_parallel.apply import apply_ep
from parlab.models.gpt import GPT, GPTConfig, gpt_on_mesh
from parlab.models.gpt_moe import GPTMoE, GPTMoEConfig
from parlab.planner.compose import build_mesh, parallelize
from parlab.planner.plan import Plan
from parlab.tensor_parallel.apply import apply_tp

CFG = GPTConfig(n_embd=16, n_head=4, n_layer=2, block_size=8)


def chapter_and_plan_build_the_same_model(rank, world_size, dimension):
    """A chapter's scheme's model and the planner's one-dimensional plan on the same reference
    (a deep copy each): the same parameter names, the same local slices and tokens, the same loss
    and gradients. `dimension`: "tp" (chapter 03's `TensorParallel`: `apply_tp` on a dp × tp
    mesh), "cp" (chapter 06's `ContextParallel`: `apply_cp`, ring attention, zigzag tokens, on a
    dp × cp mesh) or "ep" (chapter 07's `ExpertParallel`: `apply_ep` over a dp mesh, ep = world
    size). `parallelize` orders the same functions among the others. Returns the worst
    difference of each."""
    comm = Comm()
    if dimension == "ep":
        cfg = GPTMoEConfig(**vars(CFG), capacity_factor=None)
        reference = GPTMoE(cfg, seed=3)
        chapter = apply_ep(gpt_on_mesh(copy.deepcopy(reference)), Mesh(comm, [("dp", world_size)]),
                           world_size, "all_to_all")
        plan = Plan(dp=world_size, ep=world_size)
    else:
        cfg = CFG
        reference = GPT(cfg, seed=3)
        apply = {"tp": apply_tp, "cp": apply_cp}[dimension]
        chapter = apply(gpt_on_mesh(copy.deepcopy(reference)),
                        Mesh(comm, [("dp", 1), (dimension, world_size)]))
        plan = Plan(**{dimension: world_size})
    planned = parallelize(copy.deepcopy(reference), build_mesh(comm, plan), plan)
    mine, theirs = dict(chapter.named_parameters()), dict(planned.named_parameters())
    report = {"names_only_in_chapter": sorted(set(mine) - set(theirs)),
              "names_only_in_plan": sorted(set(theirs) - set(mine)),
              "same_tokens": chapter.positions.tolist() == planned.positions.tolist()}
    report["weights"] = max((mine[n] - theirs[n]).abs().max().item() for n in mine if n in theirs)
    g = torch.Generator().manual_seed(rank if dimension == "ep" else 0)  # ep: each rank its rows
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.block_size), generator=g)  # (B, T)
    targets = torch.randint(0, cfg.vocab_size, (2, cfg.block_size), generator=g)  # (B, T)
    mine_tokens = chapter.positions  # (T/cp,) all T outside context parallelism
    idx, targets = idx[:, mine_tokens], targets[:, mine_tokens]  # (B, T/cp)
    loss_chapter, loss_plan = chapter.loss(idx, targets), planned.loss(idx, targets)
    loss_chapter.backward()
    loss_plan.backward()
    report["loss"] = abs(loss_chapter.item() - loss_plan.item())
    report["grads"] = max((mine[n].grad - theirs[n].grad).abs().max().item()
                          for n in mine if n in theirs)
    return report
