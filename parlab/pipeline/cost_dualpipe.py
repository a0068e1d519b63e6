"""What DualPipe should cost, in closed form (DeepSeek-AI, "DeepSeek-V3 Technical Report",
arXiv 2412.19437, §3.2.1 and Table 2): the idle time per rank of 1F1B, ZB1P and DualPipe by the
report's table, DualPipe's bubble fraction and activations in flight on our list-scheduled action
lists (`parlab.pipeline.dualpipe`), the bytes a DualPipe rank sends per step and what its mirror
group's gradient sync moves. The closed forms of every other schedule: `parlab.pipeline.cost`.

The report's F, B, W are a forward chunk, a *full* backward chunk and its weight part, F&B an
overlapped pair. Here, as in `parlab.pipeline.cost`, B is the input-gradient part only, so the
report's B is B + W.
"""

from __future__ import annotations

from parlab.core import cost as comm_cost
from parlab.core.messages import Message, total_bytes


def report_bubble(name: str, p: int, forward: float, backward: float, weight: float,
                  pair: float | None = None) -> float:
    """Idle seconds per rank per step by the report's Table 2: 1F1B (p−1)(F+B_full), ZB1P
    (p−1)(F+B_full−2W), DualPipe (p/2−1)(F&B+B_full−3W); `pair` = F&B (default F + B_full: our
    ranks run a pair's two chunks one after the other)."""
    full = backward + weight
    if name == "1f1b":
        return (p - 1) * (forward + full)
    if name == "zb":
        return (p - 1) * (forward + full - 2 * weight)
    if name == "dualpipe":
        pair = forward + full if pair is None else pair
        return (p / 2 - 1) * (pair + full - 3 * weight)
    raise ValueError(f"schedule={name!r}: the report's Table 2 gives 1f1b, zb and dualpipe")


def dualpipe_bubble(p: int, m: int) -> float:
    """DualPipe's bubble fraction with F = B = W, the pair run in sequence: (p/2−1)/(3m+p/2−1).

    The action lists (`parlab.pipeline.dualpipe`), list-scheduled like every schedule here
    (`validate.simulate`: an action starts when its inputs are there), idle p/2−1 units per rank
    (checked for even p <= 12, m >= 2p): half of what the report's formula gives for the same
    units (2(p/2−1) with F&B = F + B_full), zero at p = 2 as there.
    """
    return (p / 2 - 1) / (3 * m + p / 2 - 1)


def dualpipe_in_flight_peak(p: int, m: int, rank: int) -> int:
    """Micro-batch chunks whose activations a DualPipe rank holds at most (F run, W not yet):
    p+1 on every rank (the report's "PP+1"), counting both of its chunks; 1F1B: p−r."""
    return p + 1


def dualpipe_p2p_messages(pp: int, microbatches: int, pp_rank: int, boundary_numel: int,
                          itemsize: int = 4) -> list[Message]:
    """A DualPipe rank's sends in one step (DeepSeek-V3 report 2024, §3.2.1): in each direction
    m/2 activations onward (unless it holds that direction's last stage) and m/2 gradients back
    (unless its first) — 1F1B's m(2 − [r = 0] − [r = p−1]) messages, half of them the other way."""
    h = microbatches // 2
    out = []
    for stage in (pp_rank, pp - 1 - pp_rank):  # direction 0, direction 1
        out += [Message("pp", "p2p", 2, boundary_numel, h, element_bytes=itemsize, phase=phase)
                for phase, sends in (("pp-fwd", stage < pp - 1), ("pp-bwd", stage > 0)) if sends]
    return out


def dualpipe_p2p_bytes_per_step(pp: int, microbatches: int, pp_rank: int, boundary_numel: int,
                                itemsize: int = 4) -> int:
    """Bytes a DualPipe rank sends per step: `dualpipe_p2p_messages` summed."""
    return total_bytes(dualpipe_p2p_messages(pp, microbatches, pp_rank, boundary_numel, itemsize))


def mirror_sync_bytes(param_numels: list[int], group: int, index: int, itemsize: int = 4) -> int:
    """Bytes one rank sends summing its gradients over its mirror group (ranks r and p−1−r of
    every replica, `group` = 2·dp ranks): a ring all-reduce per tensor (`parlab.core.cost`)."""
    return sum(comm_cost.ring_all_reduce(n, group, index)[0] for n in param_numels) * itemsize
