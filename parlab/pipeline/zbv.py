"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §6) as schedule data: the same
`Schedule` that is validated, executed, drawn and costed.

Each of the p ranks holds two chunks placed in a V: rank r holds stage r (chunk 0, on the way down)
and stage 2p−1−r (chunk 1, on the way back up), so rank 0 holds both the first and the last stage
and the last rank hands stage p−1's output to stage p without a message. The backward is split as
in ZB-H1 (B: the input gradient; W: the weight gradient). Per rank, in the paper's handcrafted
order (Fig. 8):

- warm-up: 2(p−r)−1 forwards of chunk 0; then r times a forward of chunk 1 and one of chunk 0;
  then p−r times F, B, W of chunk 1 (the V's turn reaches this rank);
- steady state: F, B, W of chunk 0, then F, B, W of chunk 1, while forwards are left;
- cool-down: r times B of chunk 0 and B of chunk 1, p−r times B and W of chunk 0, then the W's left
  (chunk 1's, then chunk 0's).

The order assumes m ≥ 2p−1; with fewer micro-batches it is built for 2p−1 and the actions of
micro-batches ≥ m are dropped (as PyTorch's `ScheduleZBVZeroBubble` does: `torch_order` rebuilds
its list, `explore.zbv` compares the two). With chunk times F = B = W every rank holds at most p
micro-batches of its two chunks' activations in flight, each half a stage: 1F1B's peak (the paper's
"same memory as 1F1B"). The paper counts no bubble when F = B = W; what is left on our simulator
(`cost.ideal_bubble`, the judge) is the fill: each rank idles p−1 chunk forwards, so with a
chunk's F = B = W = half a stage's F the bubble is (p−1)/(6m+p−1) for m ≥ 2p−1 (`zbv_bubble`;
ZB-H1's is (p−1)/(3m+p−1)). The price is messages: both chunks of a middle rank send down and
back, 4 per micro-batch where 1F1B sends 2 (`zbv_p2p_bytes_per_step`).
"""

from __future__ import annotations

from parlab.pipeline.actions import Action, Schedule


def _rank_order(p: int, n: int, r: int) -> list[Action]:
    """Rank r's handcrafted order for n micro-batches (module docstring's three phases)."""
    stages = (r, 2 * p - 1 - r)  # the rank's chunks: down the V, back up the V
    count = {"F": [0, 0], "B": [0, 0], "W": [0, 0]}  # per op, per chunk: the next micro-batch
    seq: list[Action] = []

    def put(*ops: tuple[str, int]) -> None:
        for op, chunk in ops:
            seq.append(Action(op, stages[chunk], count[op][chunk]))
            count[op][chunk] += 1

    f, b, w = count["F"], count["B"], count["W"]
    for _ in range(2 * (p - r) - 1):
        put(("F", 0))
    for _ in range(r):
        put(("F", 1), ("F", 0))
    for _ in range(p - r):
        put(("F", 1), ("B", 1), ("W", 1))
    while f[1] < f[0] or f[0] < n:
        if f[0] < n:
            put(("F", 0))
        put(("B", 0), ("W", 0), ("F", 1), ("B", 1), ("W", 1))
    for _ in range(r):
        put(("B", 0), ("B", 1))
    for _ in range(p - r):
        put(("B", 0), ("W", 0))
    while w[1] < b[1]:
        put(("W", 1))
    while w[0] < b[0]:
        put(("W", 0))
    return seq


def zbv_order(p: int, m: int) -> list[list[Action]]:
    """Per rank: the handcrafted ZB-V order of F, B, W actions (module docstring)."""
    n = max(m, 2 * p - 1)  # the order is built for a full pipeline; the surplus is dropped
    return [[a for a in _rank_order(p, n, r) if a.mb < m] for r in range(p)]


def zbv(p: int, m: int, chunks: int = 2) -> Schedule:
    """ZB-V on p ranks with m micro-batches: two chunks per rank in a V (`chunks` must be 2)."""
    if chunks != 2:
        raise ValueError(f"zbv places exactly 2 chunks per rank in a V, got chunks={chunks}")
    placement = tuple(range(p)) + tuple(reversed(range(p)))  # stage s -> rank (V shape)
    return Schedule("zbv", p, m, 2, True, tuple(tuple(a) for a in zbv_order(p, m)),
                    placement=placement)


def torch_order(p: int, m: int) -> list[list[Action]]:
    """PyTorch's own `ScheduleZBVZeroBubble` per-rank order (its `_calculate_single_rank_operations`,
    idle slots dropped), as our `Action`s: I (input gradient) is our B."""
    from types import SimpleNamespace

    from torch.distributed.pipelining.schedules import ScheduleZBVZeroBubble, _ComputationType

    ops = {_ComputationType.FORWARD: "F", _ComputationType.BACKWARD_INPUT: "B",
           _ComputationType.BACKWARD_WEIGHT: "W"}
    out = []
    for r in range(p):
        shell = SimpleNamespace(pp_group_size=p, _n_microbatches=m, num_stages=2 * p)
        listed = ScheduleZBVZeroBubble._calculate_single_rank_operations(shell, r)
        out.append([Action(ops[a.computation_type], a.stage_index, a.microbatch_index)
                    for a in listed if a is not None])
    return out


def zbv_bubble(p: int, m: int) -> float:
    """Ideal bubble with a chunk's F = B = W (half a stage's F), m ≥ 2p−1: (p−1)/(6m+p−1)."""
    if m < 2 * p - 1:
        raise ValueError(f"the closed form needs m >= 2p-1 = {2 * p - 1}, got m={m}")
    return (p - 1) / (6 * m + p - 1)


def zbv_p2p_messages_per_step(p: int, m: int, pp_rank: int) -> int:
    """Sends per step of a rank: its two chunks' activations and gradients, less what stays local
    (rank 0: stage 0 sends no gradient, stage 2p−1 no activation; rank p−1: stages p−1 and p
    hand over in place): (4 − 2·[rank 0] − 2·[rank p−1])·m, 0 if p = 1."""
    if p == 1:
        return 0
    return (4 - 2 * (pp_rank == 0) - 2 * (pp_rank == p - 1)) * m


def zbv_p2p_bytes_per_step(p: int, m: int, pp_rank: int, boundary_numel: int,
                           itemsize: int = 4) -> int:
    """Bytes a rank sends per step: every message one boundary, (mb, T, C) numbers."""
    return zbv_p2p_messages_per_step(p, m, pp_rank) * boundary_numel * itemsize
