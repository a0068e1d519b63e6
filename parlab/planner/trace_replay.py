"""Replaying a measured run's trace on other hardware: MAD-Max's trace-driven model.

Hsia et al., "MAD-Max Beyond Single-Node" (ISCA 2024), §4: take one iteration's trace — each
rank's compute and communication operators in issue order, with their dependencies — and replay it
with every operator re-priced for another machine: compute by the accelerator's rate, every
collective and message by α-β on the link it crosses. Compute and communication run on separate
streams (as CUDA streams do), so the replay finds what overlaps and what is *exposed*: the time a
rank's compute stream stands waiting for a communication, whose share of the step is the paper's
central metric (14–32% of production GPU hours, its Fig. 2).

Our trace is the run's own timeline and ledger (`RunResult.timeline`, `.ledger`), on paced time
(`parlab.core.clock`): per rank, the compute spans (their counted, deterministic durations), every
communication op at its issue and its completion, and every wait (the compute stream blocked until
an op completes). `Trace.from_run` turns one step of it into per-rank action lists —

    C(seconds)  compute on the compute stream
    I(op)       issue `op` on the rank's communication stream (ops of one rank run in issue order)
    W(op)       the compute stream waits until `op` has completed

— and `replay` runs them: a collective starts when every member has issued it and its streams
are free, and lasts its α-β on the group's slowest link (`scaling_model.op_seconds`); a message
arrives one α-β after its send, or when its receiver asks, whichever is later. Scaling the
compute (`flops=2`: twice the FLOP/s) or the links (`bandwidth=2`: β halved) is MAD-Max's
what-if co-design question: which investment pays for this plan.

Simplifications, named: messages between two ranks do not contend with each other or with
collectives (full-duplex links, one channel per pair); the host's bookkeeping between spans
and gloo's real transfer time are not in the trace, as they are not paced time
(`parlab.core.clock`: the clock stands while the host works); memory does
not enter a fixed plan's step time (a 2× memory what-if changes which plans fit — the planner's
`plan_memory` — not this replay).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from parlab.planner.scaling_model import op_seconds


@dataclass
class Op:
    """One communication operator of one rank: its ledger record, its α and β seconds on the
    measured run's link, and its match key."""

    rank: int
    record: dict
    alpha_s: float  # rounds · α
    beta_s: float  # bytes · β
    key: tuple  # ("coll", group ranks, k) | ("p2p", src, dst, k): the same on its partners

    def seconds(self, bandwidth: float = 1.0, latency: float = 1.0) -> float:
        return self.alpha_s / latency + self.beta_s / bandwidth


def _priced(r, record) -> tuple[float, float]:
    """(α part, β part) of `op_seconds`: the same op priced with no bytes is its α part."""
    total = op_seconds(r, record)
    alpha = op_seconds(r, {**record, "bytes_sent": 0, "bytes_recv": 0})
    return alpha, total - alpha


@dataclass
class Trace:
    """One step of a run: per rank, the actions C / I / W in issue order (module docstring)."""

    actions: list[list[tuple]]
    measured_step: float

    @classmethod
    def from_run(cls, r, step: int = 1) -> Trace:
        n = r.config.world_size
        actions = [_rank_actions(r, k, step) for k in range(n)]
        return cls(actions, r.step_times[step])


def _overlap(a0, a1, b0, b1) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _rank_actions(r, rank: int, step: int) -> list[tuple]:
    mine = [e for e in r.timeline if e["rank"] == rank]
    compute = sorted((e for e in mine if e["kind"] == "compute"), key=lambda e: e["t0"])
    this = [e for e in compute if e["args"].get("step") == step]
    before = [e for e in compute if e["args"].get("step") == step - 1]
    if not this:
        raise ValueError(f"rank {rank} has no compute span in step {step}")
    start = max((e["t1"] for e in before), default=this[0]["t0"])
    end = max(e["t1"] for e in this)
    spans = [e for e in this]
    waits = [e for e in mine if e["kind"] == "wait" and start <= e["t0"] < end]
    comms = sorted((e for e in mine if e["kind"] == "comm" and start <= e["t0"] < end),
                   key=lambda e: e["t0"])
    records = [x for x in r.ledger if x["rank"] == rank and x["step"] == step]
    if len(records) != len(comms):
        raise ValueError(f"rank {rank} step {step}: {len(records)} ledger ops but {len(comms)} "
                         "on the timeline; the trace cannot be matched")
    counts: dict = {}
    ops = []
    for rec in records:
        if rec["op"] in ("send", "recv"):
            src, dst = (rank, rec["peers"][0]) if rec["op"] == "send" else (rec["peers"][0], rank)
            base = ("p2p", src, dst)
        else:
            base = ("coll", tuple(rec["group_ranks"]))
        k = counts[base] = counts.get(base, -1) + 1
        ops.append(Op(rank, rec, *_priced(r, rec), base + (k,)))
    markers = [(c["t0"], 0, ("I", op)) for c, op in zip(comms, ops)]
    for c, op in zip(comms, ops):  # the wait that ended when the op completed, else blocking
        waited = [w for w in waits if abs(w["t1"] - c["t1"]) < 1e-9 and w["t0"] >= c["t0"] - 1e-9]
        at = waited[0]["t0"] if waited else c["t0"]
        markers.append((at, 1, ("W", op)))
    markers.sort(key=lambda m: (m[0], m[1]))

    def busy(a, b):  # compute on [a, b], less the waits inside the spans
        got = sum(_overlap(a, b, s["t0"], s["t1"]) for s in spans)
        return got - sum(_overlap(max(a, w["t0"]), min(b, w["t1"]), s["t0"], s["t1"])
                         for w in waits for s in spans if w["t0"] < b and w["t1"] > a)

    out, t = [], start
    for at, _, action in markers:
        if at > t:
            out.append(("C", busy(t, at)))
            t = at
        out.append(action)
    out.append(("C", busy(t, end)))
    return out


def replay(trace: Trace, flops: float = 1.0, bandwidth: float = 1.0,
           latency: float = 1.0) -> dict:
    """The step replayed with compute `flops`× faster and links `bandwidth`× wider (and
    `latency`× shorter α): {"step_s", "exposed_s" (mean over ranks of compute-stream waiting),
    "exposed_share", "comm_s" (mean communication seconds issued per rank)}."""
    n = len(trace.actions)

    def seconds(op):  # α-β re-priced: α / latency + bytes·β / bandwidth
        return op.seconds(bandwidth, latency)

    clock = [0.0] * n
    waited = [0.0] * n
    stream = [0.0] * n  # when each rank's communication stream is free
    queue = [deque() for _ in range(n)]  # issued collectives, in issue order
    issued: dict = {}  # key -> {rank: issue time}
    done: dict = {}  # key -> completion time
    ptr = [0] * n
    comm_total = [0.0] * n
    remaining = sum(len(a) for a in trace.actions)
    while remaining:
        progressed = False
        for k in range(n):
            acts = trace.actions[k]
            while ptr[k] < len(acts):
                kind, x = acts[ptr[k]]
                if kind == "C":
                    clock[k] += x / flops
                elif kind == "I":
                    issued.setdefault(x.key, {})[k] = clock[k]
                    comm_total[k] += seconds(x)
                    if x.key[0] == "coll":
                        queue[k].append(x)
                else:  # W
                    if x.key not in done:
                        break
                    if done[x.key] > clock[k]:
                        waited[k] += done[x.key] - clock[k]
                        clock[k] = done[x.key]
                ptr[k] += 1
                remaining -= 1
                progressed = True
        progressed |= _start_collectives(trace, queue, issued, done, stream, seconds)
        progressed |= _deliver_messages(trace, issued, done, seconds)
        if not progressed:
            raise ValueError("the trace does not replay: a wait on an op that never completes")
    step = max(clock)
    exposed = sum(waited) / n
    return {"step_s": step, "exposed_s": exposed, "exposed_share": exposed / step if step else 0.0,
            "comm_s": sum(comm_total) / n}


def _start_collectives(trace, queue, issued, done, stream, seconds) -> bool:
    progressed = False
    for q in queue:
        while q:
            op = q[0]
            members = op.key[1]
            if op.key in done:
                q.popleft()
                progressed = True
                continue
            if len(issued.get(op.key, {})) < len(members) or \
                    any(not queue[m] or queue[m][0].key != op.key for m in members):
                break
            start = max(max(issued[op.key][m], stream[m]) for m in members)
            end = start + max(seconds(queue[m][0]) for m in members)
            done[op.key] = end
            for m in members:
                stream[m] = end
            progressed = True
    return progressed


def _deliver_messages(trace, issued, done, seconds) -> bool:
    progressed = False
    for key, by_rank in issued.items():
        if key[0] != "p2p" or key in done:
            continue
        src, dst = key[1], key[2]
        if src in by_rank and dst in by_rank:
            op_time = next(seconds(x) for kind, x in trace.actions[src]
                           if kind == "I" and x.key == key)
            done[key] = max(by_rank[src] + op_time, by_rank[dst])
            progressed = True
    return progressed
