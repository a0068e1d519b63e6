"""Is a schedule runnable and complete? The checker and the list-scheduling simulator.

`check(schedule)` raises `ScheduleError` (a ValueError) unless every (stage, micro-batch) has one
F, one B (and one W when split) on its stage's rank, in order; bidirectional actions (DualPipe)
go their micro-batch's direction and F&B pairs are adjacent; and the lowered lists, with blocking
receives, non-blocking sends and one FIFO channel per (kind, src, dst), terminate (no deadlock).
`simulate(schedule, duration, latency)` is the same execution with time, returning trace events
(`parlab.core.trace`) from which `parlab.pipeline.cost` draws the ideal Gantt chart and bubbles:
the list-scheduling view of Qi et al. ("Zero Bubble Pipeline Parallelism", ICLR 2024, §3). Every
rule in full: docs/pipeline.md, `parlab.pipeline.validate`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from parlab.pipeline.schedules import Action, Schedule


class ScheduleError(ValueError):
    """A schedule that is incomplete, out of order, mismatched or deadlocked."""


def check_complete(schedule: Schedule) -> None:
    ops = ("F", "B", "W") if schedule.split_backward else ("F", "B")
    seen: dict[Action, int] = {}
    for rank, actions in enumerate(schedule.actions):
        for position, a in enumerate(actions):
            if a.op not in ops:
                raise ScheduleError(f"{schedule.name}: rank {rank} has {a}, op {a.op!r} not in {ops}")
            if a.dir != schedule.direction_of(a.mb):
                raise ScheduleError(f"{schedule.name}: {a} on rank {rank} goes direction {a.dir}, "
                                    f"but micro-batch {a.mb} flows direction "
                                    f"{schedule.direction_of(a.mb)}")
            if schedule.rank_of(a.stage, a.dir) != rank:
                raise ScheduleError(f"{schedule.name}: {a} on rank {rank}, but stage {a.stage} "
                                    f"lives on rank {schedule.rank_of(a.stage, a.dir)}")
            if a in seen:
                raise ScheduleError(f"{schedule.name}: {a} appears twice on rank {rank}")
            seen[a] = position
    for s in range(schedule.stages):
        for i in range(schedule.microbatches):
            d = schedule.direction_of(i)
            chain = [Action(op, s, i, d) for op in ops]
            missing = [str(a) for a in chain if a not in seen]
            if missing:
                raise ScheduleError(f"{schedule.name}: missing {missing} (p={schedule.pp}, "
                                    f"m={schedule.microbatches}, v={schedule.chunks})")
            for before, after in zip(chain, chain[1:]):
                if seen[before] > seen[after]:
                    raise ScheduleError(f"{schedule.name}: {after} runs before {before} on rank "
                                        f"{schedule.rank_of(s, d)}")
    for rank, pairs in enumerate(schedule.pairs):
        for f, b in pairs:
            if f.op != "F" or b.op != "B" or seen.get(f, -2) + 1 != seen.get(b, -1) \
                    or schedule.rank_of(f.stage, f.dir) != rank:
                raise ScheduleError(f"{schedule.name}: pair ({f}, {b}) on rank {rank} is not an F "
                                    "followed by a B on that rank")


def _channel(schedule: Schedule, a: Action):
    """(kind, src rank, dst rank, the stage the message comes from) of a comm action."""
    d = a.dir
    if a.op in ("SEND_F", "RECV_F"):
        src_stage = a.stage if a.op == "SEND_F" else a.stage - 1
        return "F", schedule.rank_of(src_stage, d), schedule.rank_of(src_stage + 1, d), src_stage
    src_stage = a.stage if a.op == "SEND_B" else a.stage + 1
    return "B", schedule.rank_of(src_stage, d), schedule.rank_of(src_stage - 1, d), src_stage


def simulate(schedule: Schedule, duration: Callable[[Action], float] | None = None,
             latency: float = 0.0, charged: str = "sender") -> list[dict]:
    """Run the lowered schedule in simulated time; return compute events per rank.

    duration(action) -> seconds of a compute action (default 1 for F, B, W; 2 for an unsplit B,
    which does the work of B and W). Raises ScheduleError on a mismatched message or a deadlock.

    charged="sender": a message arrives `latency` after its send (a wire). charged="receiver": it
    arrives at max(post + latency, send), the post being when the receiver asks for it (its
    receive in the list; for the B of an F&B pair, `Schedule.pairs`, the start of the pair's F) —
    what `parlab.core.comm`'s emulated link does, which charges a receive from its post.
    """
    if charged not in ("sender", "receiver"):
        raise ValueError(f"charged={charged!r} must be 'sender' or 'receiver'")
    receiver = charged == "receiver"
    pair_of = [schedule.paired(r) for r in range(schedule.pp)]  # {B: F} per rank
    started: dict[Action, float] = {}
    if duration is None:
        def duration(a):
            return 2.0 if a.op == "B" and not schedule.split_backward else 1.0
    lowered = schedule.lowered()
    p, last = schedule.pp, schedule.stages - 1
    position, clock = [0] * p, [0.0] * p
    finished: dict[Action, float] = {}  # compute action -> time its result exists
    channels: dict[tuple, deque] = {}
    arrived: dict[tuple, float] = {}  # (kind, dst stage, mb) -> arrival time at the receiver
    events: list[dict] = []

    def ready(rank: int, a: Action):
        """Time the inputs of `a` are there, or None if they never may be yet."""
        if a.op in ("SEND_F", "SEND_B"):
            return finished.get(Action("F" if a.op == "SEND_F" else "B", a.stage, a.mb, a.dir))
        if a.op in ("RECV_F", "RECV_B"):
            kind, src, dst, src_stage = _channel(schedule, a)
            queue = channels.get((kind, src, dst))
            if not queue:
                return None
            head_stage, head_mb, t = queue[0]
            if (head_stage, head_mb) != (src_stage, a.mb):
                raise ScheduleError(
                    f"{schedule.name}: rank {rank} waits for {a} but the next {kind} message from "
                    f"rank {src} is stage {head_stage} micro-batch {head_mb} (p={p}, "
                    f"m={schedule.microbatches}, v={schedule.chunks})")
            return t
        needs, d = [], a.dir
        if a.op == "F" and a.stage > 0:
            needs.append(("F", a.stage, a.mb) if schedule.rank_of(a.stage - 1, d) != rank
                         else Action("F", a.stage - 1, a.mb, d))
        if a.op == "B":
            needs.append(Action("F", a.stage, a.mb, d))
            if a.stage < last:
                needs.append(("B", a.stage, a.mb) if schedule.rank_of(a.stage + 1, d) != rank
                             else Action("B", a.stage + 1, a.mb, d))
        if a.op == "W":
            needs.append(Action("B", a.stage, a.mb, d))
        times = [arrived.get(n) if isinstance(n, tuple) and not isinstance(n, Action)
                 else finished.get(n) for n in needs]
        return None if any(t is None for t in times) else max(times, default=0.0)

    remaining = sum(len(seq) for seq in lowered)
    while remaining:
        progressed = False
        for rank in range(p):
            while position[rank] < len(lowered[rank]):
                a = lowered[rank][position[rank]]
                t = ready(rank, a)
                if t is None:
                    break
                start = max(clock[rank], t)
                if a.op in ("SEND_F", "SEND_B"):
                    kind, src, dst, src_stage = _channel(schedule, a)
                    channels.setdefault((kind, src, dst), deque()).append(
                        (src_stage, a.mb, start + (0.0 if receiver else latency)))
                elif a.op in ("RECV_F", "RECV_B"):
                    kind, src, dst, src_stage = _channel(schedule, a)
                    channels[(kind, src, dst)].popleft()
                    if receiver:
                        f = pair_of[rank].get(Action("B", a.stage, a.mb, a.dir)) \
                            if a.op == "RECV_B" else None
                        post = started[f] if f is not None else clock[rank]
                        start = max(clock[rank], post + latency, t)
                    arrived[(kind, a.stage, a.mb)] = start
                    clock[rank] = start
                else:
                    end = start + duration(a)
                    events.append({"rank": rank, "kind": "compute", "name": a.op, "t0": start,
                                   "t1": end, "args": {"stage": a.stage, "mb": a.mb}})
                    finished[a], started[a] = end, start
                    clock[rank] = end
                position[rank] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            blocked = [f"rank {r}: {lowered[r][position[r]]}" for r in range(p)
                       if position[r] < len(lowered[r])]
            raise ScheduleError(f"{schedule.name}: deadlock (p={p}, m={schedule.microbatches}, "
                                f"v={schedule.chunks}); blocked at {blocked}")
    return events


def check(schedule: Schedule) -> Schedule:
    """Raise ScheduleError unless the schedule is complete, ordered, matched and deadlock-free."""
    check_complete(schedule)
    simulate(schedule)
    return schedule
