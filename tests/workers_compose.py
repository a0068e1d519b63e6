"""Rank workers for tests/test_compose.py: importable by the ranks."""

import copy

import torch

from parlab.core.comm import Comm
from parlab.models.gpt import GPT, GPTConfig
from parlab.planner.compose import build_mesh, parallelize
from parlab.planner.plan import Plan
from parlab.tensor_parallel.layers import TensorParallelGPT


def tp_chapter_and_plan_build_the_same_model(rank, world_size):
    """Chapter 03's TensorParallelGPT and the planner's tp-only plan (`parallelize`, which calls
    `parlab.tensor_parallel.apply.apply_tp`) on the same reference: the same parameter names, the
    same local slices, the same loss and gradients. Returns the worst difference of each."""
    comm = Comm()
    cfg = GPTConfig(n_embd=16, n_head=4, n_layer=2, block_size=8)
    reference = GPT(cfg, seed=3)
    chapter = TensorParallelGPT.from_reference(copy.deepcopy(reference), comm)
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
