"""Looped breadth-first pipeline schedule (Lamy-Poirier, "Breadth-First Pipeline Parallelism",
MLSys 2023) as schedule data: the same `Schedule` that is validated, executed, drawn and costed.

Stages loop over the ranks as Megatron's interleaved chunks do (stage s on rank s mod p, its chunk
s // p), but each rank runs them *breadth first*: the forwards of every micro-batch through its
chunk 0, then through its chunk 1, …, then the backwards chunk by chunk in reverse, every
micro-batch each, the last micro-batch's first (GPipe's order per chunk, as PyTorch's
`ScheduleLoopedBFS` in `torch.distributed.pipelining.schedules` orders them:
`torch_order` rebuilds its list and `explore.bfs` compares the two). With F = 1/v per chunk
and B = 2F the ideal bubble is GPipe's with slots v times shorter, (p−1)/(v·m+p−1) for m ≥ p
(the simulator, `cost.ideal_bubble`, is the judge); the price is GPipe's memory: all m
micro-batches of every chunk are held before the first backward.
"""

from __future__ import annotations

from parlab.pipeline.actions import Action, Schedule, _schedule


def looped_bfs(p: int, m: int, chunks: int = 2) -> Schedule:
    """Rank r: F of every micro-batch through stage c·p + r for c = 0 … v−1, then B of every
    micro-batch (last first) through those stages in reverse."""
    if chunks < 1:
        raise ValueError(f"looped-bfs needs chunks >= 1, got {chunks}")
    v = chunks
    ranks = []
    for r in range(p):
        seq = [Action("F", c * p + r, i) for c in range(v) for i in range(m)]
        seq += [Action("B", c * p + r, i) for c in reversed(range(v)) for i in reversed(range(m))]
        ranks.append(seq)
    return _schedule("looped-bfs", p, m, v, False, ranks)


def torch_order(p: int, m: int, chunks: int = 2) -> list[list[Action]]:
    """PyTorch's own `ScheduleLoopedBFS` per-rank order (its `_calculate_single_rank_operations`,
    the list its runtime executes; idle slots dropped), as our `Action`s."""
    from types import SimpleNamespace

    from torch.distributed.pipelining.schedules import ScheduleLoopedBFS, _ComputationType

    ops = {_ComputationType.FORWARD: "F", _ComputationType.FULL_BACKWARD: "B"}
    out = []
    for r in range(p):
        shell = SimpleNamespace(_stages=[None] * chunks, pp_group_size=p, _n_microbatches=m)
        listed = ScheduleLoopedBFS._calculate_single_rank_operations(shell, r)
        out.append([Action(ops[a.computation_type], a.stage_index, a.microbatch_index)
                    for a in listed if a is not None])
    return out
