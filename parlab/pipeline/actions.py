"""The data a pipeline schedule is made of: an `Action` (F, B, W or a message, of one stage and
micro-batch, in one direction) and a `Schedule` (per rank, its compute actions in order), with the
sends and receives they imply (`Schedule.lowered`). The generators are in `schedules` (and
DualPipe's in `dualpipe`); `validate` checks and simulates a schedule, `executor` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

COMPUTE = ("F", "B", "W")
COMM = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")


class Action(NamedTuple):
    op: str  # F, B, W or SEND_F, RECV_F, SEND_B, RECV_B
    stage: int
    mb: int
    dir: int = 0  # 0: fed at rank 0 (stage s on rank s); 1: fed at rank p−1 (DualPipe's reverse)

    def __str__(self) -> str:
        return f"{self.op}{self.stage}.{self.mb}" + ("r" if self.dir else "")


@dataclass(frozen=True)
class Schedule:
    name: str
    pp: int  # ranks in the pipeline
    microbatches: int
    chunks: int  # model chunks (virtual stages) per rank
    split_backward: bool  # True: B is the input gradient only and W the weight gradient
    actions: tuple  # per rank: tuple of compute Actions in execution order
    # True: micro-batches m/2 .. m−1 enter at rank p−1 and flow towards rank 0 (DualPipe), stage s
    # of that direction on rank p−1−s (`parlab.pipeline.dualpipe`)
    bidirectional: bool = False
    # per rank: (F, B) pairs run as one overlapped unit (DualPipe's F&B): B's input is asked for
    # when F starts, so its transfer hides behind F's compute (`parlab.pipeline.executor`)
    pairs: tuple = ()
    # stage -> rank, where stages are not a pipeline's loop over the ranks (a placed operator
    # graph: `parlab.planner.placement.placed`); empty: stage s on rank s mod p
    placement: tuple = ()
    # False: stages are not a chain — no stage takes its input from the one before; every message
    # is the stage strategy's (the placed graph's producer → consumer edges)
    main_path: bool = True

    @property
    def stages(self) -> int:
        return len(self.placement) if self.placement else self.pp * self.chunks

    def rank_of(self, stage: int, direction: int = 0) -> int:
        if self.placement:
            return self.placement[stage]
        return self.pp - 1 - stage if direction else stage % self.pp

    def direction_of(self, mb: int) -> int:
        """0 for a micro-batch fed at rank 0; 1 for one fed at rank p−1 (bidirectional only)."""
        return int(self.bidirectional and mb >= self.microbatches // 2)

    def lowered(self) -> list[list[Action]]:
        """Per rank: the compute actions with the sends and receives they imply, in order."""
        if not self.main_path:  # the strategy sends and receives what the stages exchange
            return [list(actions) for actions in self.actions]
        out = []
        for rank, actions in enumerate(self.actions):
            seq = []
            for a in actions:
                s, i, d = a.stage, a.mb, a.dir
                if a.op == "F" and s > 0 and self.rank_of(s - 1, d) != rank:
                    seq.append(Action("RECV_F", s, i, d))
                if a.op == "B" and s < self.stages - 1 and self.rank_of(s + 1, d) != rank:
                    seq.append(Action("RECV_B", s, i, d))
                seq.append(a)
                if a.op == "F" and s < self.stages - 1 and self.rank_of(s + 1, d) != rank:
                    seq.append(Action("SEND_F", s, i, d))
                if a.op == "B" and s > 0 and self.rank_of(s - 1, d) != rank:
                    seq.append(Action("SEND_B", s, i, d))
            out.append(seq)
        return out

    def text(self) -> str:
        """One line per rank, e.g. `rank 0: F0.0 F0.1 B0.0 ...`."""
        return "\n".join(f"rank {r}: " + " ".join(map(str, a)) for r, a in enumerate(self.actions))

    def paired(self, rank: int) -> dict:
        """{B action: the F it overlaps} on `rank` (empty unless the schedule pairs F&B)."""
        return {b: f for f, b in self.pairs[rank]} if self.pairs else {}


def _schedule(name, p, m, v, split, per_rank) -> Schedule:
    return Schedule(name, p, m, v, split, tuple(tuple(a) for a in per_rank))
