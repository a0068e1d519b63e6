"""Which rank holds the others up: the launcher's diagnosis when a launch times out or fails.

The parent keeps, per rank, what it last heard (`RankStatus`: its last heartbeat, the step of its
last `report_progress`, where its main thread was and the collective it waited in, from
`parlab.core.rank_process`). `stuck_rank` names the rank that one would attach a debugger to: one
that went silent (a stopped or frozen process: no heartbeat for `SILENT_S`), else the one furthest
behind in its reported steps that is *not* waiting in a collective while the others are (a rank
sleeping or spinning in its own code). These rules are ours, not a paper's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from parlab.core.rank_process import HEARTBEAT_S

SILENT_S = 4 * HEARTBEAT_S  # no heartbeat for this long: the rank is stopped or frozen


@dataclass
class RankStatus:
    """What the parent last heard from one rank (times on the parent's monotonic clock)."""

    heard: float
    step: tuple | None = None  # (done, total) of its last report_progress
    at: str | None = None  # where its main thread was at its last heartbeat
    op: str | None = None  # the communication op it was waiting in, or None

    def describe(self) -> str:
        step = f"step {self.step[0]} of {self.step[1]}" if self.step else "no step reported"
        where_ = (f"waiting in {self.op} (called at {self.at})" if self.op
                  else f"at {self.at}" if self.at
                  else "no heartbeat received" if self.step else "no word yet (still starting?)")
        return f"{step}, {where_}"


def stuck_rank(pending: list[int], status: list[RankStatus], now: float) -> tuple[int, str]:
    """(rank, why) of the rank that holds the others up: the one silent longest (no heartbeat for
    SILENT_S: stopped or frozen); else, among the ranks not waiting in a collective (all if every
    one waits), the one with the fewest steps reported, then the oldest heartbeat."""
    silent = [r for r in pending if now - status[r].heard > SILENT_S]
    if silent:
        rank = min(silent, key=lambda r: status[r].heard)
        return rank, (f"no heartbeat for {now - status[rank].heard:.1f} s (stopped or frozen); "
                      f"last heard: {status[rank].describe()}")
    busy = [r for r in pending if status[r].op is None]
    rank = min(busy or pending, key=lambda r: (status[r].step[0] if status[r].step else -1,
                                                status[r].heard))
    why = ("not in a collective while the others wait in one" if busy and len(busy) < len(pending)
           else "furthest behind")
    return rank, f"{why}: {status[rank].describe()}"


def stuck_report(pending: list[int], status: list[RankStatus]) -> tuple[int | None, str]:
    if not pending:
        return None, ""
    rank, why = stuck_rank(pending, status, time.monotonic())
    others = "; ".join(f"rank {r}: {status[r].describe()}" for r in pending if r != rank)
    return rank, (f"\nstuck: rank {rank}, {why}" + (f"\nthe others: {others}" if others else ""))
