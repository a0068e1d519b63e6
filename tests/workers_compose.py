"""Rank workers for tests/test_compose.py: importable by the ranks."""

import copy

import torch

from parlab.core.comm import Comm
from parlab.core.mesh import Mesh
from parlab.models.gpt import GPT, GPTConfig
from parlab.models.mesh_gpt import gpt_on_mesh
from parlab.planner.compose import build_mesh, parallelize
from parlab.planner.plan import Plan
from parlab.tensor_parallel.apply import apply_tp


def tp_chapter_and_plan_build_the_same_model(rank, world_size):
    """Chapter 03's `tp` scheme's model (`apply_tp` on a dp × tp mesh, as
    `parlab.tensor_parallel.schemes.TensorParallel` builds it) and the planner's tp-only plan
    (`parallelize`, which orders the same `apply_tp` among the others) on the same reference: the
    same parameter names, the same local slices, the same loss and gradients. Returns the worst
    difference of each."""
    comm = Comm()
    cfg = GPTConfig(n_embd=16, n_head=4, n_layer=2, block_size=8)
    reference = GPT(cfg, seed=3)
    chapter = apply_tp(gpt_on_mesh(copy.deepcopy(reference)),
                       Mesh(comm, [("dp", 1), ("tp", world_size)]))
    plan = Plan(tp=world_size)
    planned = parallelize(copy.deepcopy(reference), build_mesh(comm, plan), plan)
    mine, theirs = dict(chapter.named_parameters()), dict(planned.named_parameters())
    report = {"names_only_in_chapter": sorted(set(mine) - set(theirs)),
              "names_only_in_plan": sorted(set(theirs) - set(mine))}
    report["weights"] = max((mine[n] - theirs[n]).abs().max().item() for n in mine if n in theirs)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.block_size), generator=g)  # (B, T)
    targets = torch.randint(0, cfg.vocab_size, (2, cfg.block_size), generator=g)  # (B, T)
    loss_chapter, loss_plan = chapter.loss(idx, targets), planned.loss(idx, targets)
    loss_chapter.backward()
    loss_plan.backward()
    report["loss"] = abs(loss_chapter.item() - loss_plan.item())
    report["grads"] = max((mine[n].grad - theirs[n].grad).abs().max().item()
                          for n in mine if n in theirs)
    return report
