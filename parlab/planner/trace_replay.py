"""Replaying a measured run's trace on other hardware: MAD-Max's trace-driven model.

Hsia et al., "MAD-Max Beyond Single-Node" (ISCA 2024), §4: one iteration's trace — each rank's
compute and communication operators in issue order, with their dependencies — replayed with every
operator re-priced for another machine, compute and communication on separate streams, so the
replay finds the *exposed* communication (the paper's central metric, Fig. 2). Our trace is the
run's own timeline and ledger on paced time: `Trace.from_run` turns one step into per-rank actions
C(seconds), I(op), W(op), and `replay` runs them with the paced clock's link arithmetic
(`parlab.core.virtual_link`, `scaling.step_model.op_seconds`). What-ifs (§6): `flops=`,
`bandwidth=`, `latency=`, `clock=` another accelerator, `link=` another link or topology. The
replay's rules and its named simplifications: docs/planner.md, `parlab.planner.trace_replay`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from parlab.planner.scaling.step_model import op_seconds


@dataclass(eq=False)
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


def priced_on(link, record) -> tuple[float, float]:
    """(α part, β part) of `record` on `link` (a real Link or Topology, None: free)."""
    return _priced(SimpleNamespace(config=SimpleNamespace(link=link)), record)


@dataclass
class Trace:
    """One step of a run: per rank, the actions C / I / W in issue order (module docstring);
    `clock` and `speeds` the run's, for re-pricing kept kernels."""

    actions: list[list[tuple]]
    measured_step: float
    clock: object = None
    speeds: tuple = ()

    @classmethod
    def from_run(cls, r, step: int = 1) -> Trace:
        from parlab.core import speeds

        n = r.config.world_size
        kept = [(out.pace or {}).get("work") if out is not None else None
                for out in (r.outputs or [None] * n)]
        origin = _origin(r)
        actions = [_rank_actions(r, k, step, kept[k] if k < len(kept) else None, origin)
                   for k in range(n)]
        return cls(actions, r.step_times[step], r.config.clock,
                   tuple(speeds.speed_of(r.config, k) for k in range(n)))

    @property
    def has_kernels(self) -> bool:
        return any(len(a) > 2 for acts in self.actions for a in acts if a[0] == "C")


def _overlap(a0, a1, b0, b1) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _rank_actions(r, rank: int, step: int, work=None, origin: float = 0.0) -> list[tuple]:
    mine = [e for e in r.timeline if e["rank"] == rank]
    compute = sorted((e for e in mine if e["kind"] == "compute"), key=lambda e: e["t0"])
    this = [e for e in compute if e["args"].get("step") == step]
    before = [e for e in compute if e["args"].get("step") == step - 1]
    if not this:
        raise ValueError(f"rank {rank} has no compute span in step {step}")
    start = max((e["t1"] for e in before), default=this[0]["t0"])
    end = max(e["t1"] for e in this)
    spans = this
    waits = [e for e in mine if e["kind"] == "wait" and start <= e["t0"] < end]
    records = [x for x in r.ledger if x["rank"] == rank and x["step"] == step]
    counts: dict = {}
    markers = []
    for rec in records:  # issued at t_start, waited at t_wait (the ledger's, raw paced time)
        if rec["op"] in ("send", "recv"):
            src, dst = (rank, rec["peers"][0]) if rec["op"] == "send" else (rec["peers"][0], rank)
            base = ("p2p", src, dst)
        else:
            base = ("coll", tuple(rec["group_ranks"]))
        k = counts[base] = counts.get(base, -1) + 1
        op = Op(rank, rec, *_priced(r, rec), base + (k,))
        markers.append((max(start, rec["t_start"] - origin), 0, ("I", op)))
        if rec.get("t_wait") is not None and rec["t_wait"] - origin < end:  # else: next step's
            markers.append((rec["t_wait"] - origin, 1, ("W", op)))
    markers.sort(key=lambda m: (m[0], m[1]))
    eps = 1e-12 * max(1.0, end)
    segments = [s for s in (work or []) if any(e["t0"] - eps <= s[0] - origin
                                               and s[1] - origin <= e["t1"] + eps for e in spans)]

    def busy(a, b):  # compute on [a, b], less the waits inside the spans
        got = sum(_overlap(a, b, s["t0"], s["t1"]) for s in spans)
        return got - sum(_overlap(max(a, w["t0"]), min(b, w["t1"]), s["t0"], s["t1"])
                         for w in waits for s in spans if w["t0"] < b and w["t1"] > a)

    def compute(a, b):  # ("C", seconds[, kernels]): the kept segments that lie in [a, b]
        if work is None:
            return ("C", busy(a, b))
        return ("C", busy(a, b), tuple(s for s in segments
                                       if a - eps <= s[0] - origin and s[1] - origin <= b + eps))

    out, t = [], start
    for at, _, action in markers:
        if at > t:
            out.append(compute(t, at))
            t = at
        out.append(action)
    out.append(compute(t, end))
    return out


def _origin(r) -> float:
    """The raw paced time the normalized timeline starts at (`parlab.core.trace.normalize`): the
    first waited op's issue in the ledger less its comm span's start on the timeline."""
    issued = [x["t_start"] for x in r.ledger if x.get("t_wait") is not None]
    comms = [e["t0"] for e in r.timeline if e["kind"] == "comm"]
    return min(issued) - min(comms) if issued and comms else 0.0


def replay(trace: Trace, flops: float = 1.0, bandwidth: float = 1.0, latency: float = 1.0,
           clock=None, link=None) -> dict:
    """The step replayed with compute `flops`× faster and links `bandwidth`× wider (and
    `latency`× shorter α); `clock`: compute re-priced kernel by kernel on that paced Clock (the
    trace must have kept its kernels); `link`: every op re-priced on that real Link / Topology.
    {"step_s", "exposed_s" (mean over ranks of compute-stream waiting), "exposed_share",
    "wire_s" / "wire_share" (the part of that waiting while the rank's own ops were on the
    link: exposed communication, not a peer's compute), "comm_s" (mean seconds issued per rank),
    "compute_s" (mean compute per rank)}."""
    if clock is not None and not trace.has_kernels:
        raise ValueError("replay(clock=...) re-prices kernels, and this trace kept none: trace a "
                         "run with clock=parlab.core.clock.Clock(accelerator, keep_work=True)")
    n = len(trace.actions)
    cost: dict = {}  # id(op) -> (α, β) on `link`
    if link is not None:
        for acts in trace.actions:
            for a in acts:
                if a[0] == "I":
                    cost[id(a[1])] = priced_on(link, a[1].record)

    def seconds(op):  # α-β re-priced: α / latency + bytes·β / bandwidth
        alpha, beta = cost.get(id(op), (op.alpha_s, op.beta_s))
        return alpha / latency + beta / bandwidth

    def compute(k, act):
        seconds_ = act[1]
        if clock is not None:
            speed = trace.speeds[k] if trace.speeds else 1.0
            seconds_ += sum(clock.price(w, speed) - (t1 - t0) for t0, t1, w in act[2])
        return seconds_ / flops

    st = SimpleNamespace(free={}, ready={}, wire=[[] for _ in range(n)])
    now, waits, ptr, comm_total, busy = [0.0] * n, [], [0] * n, [0.0] * n, [0.0] * n
    remaining = sum(len(a) for a in trace.actions)
    while remaining:
        progressed = False
        for k in range(n):
            acts = trace.actions[k]
            while ptr[k] < len(acts):
                kind, x = acts[ptr[k]][:2]
                if kind == "C":
                    c = compute(k, acts[ptr[k]])
                    now[k] += c
                    busy[k] += c
                elif kind == "I":
                    comm_total[k] += _issue(st, k, x, now[k], seconds(x))
                else:
                    at = _end(st, k, x)
                    if at is None:  # a peer has not issued it yet
                        break
                    if at > now[k]:
                        waits.append((k, now[k], at))
                        now[k] = at
                ptr[k] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError("the trace does not replay: a wait on an op that never completes")
    step = max(now)
    exposed = sum(b - a for _, a, b in waits) / n
    wire = sum(_covered(a, b, st.wire[k]) for k, a, b in waits) / n
    return {"step_s": step, "exposed_s": exposed, "exposed_share": exposed / step if step else 0.0,
            "wire_s": wire, "wire_share": wire / step if step else 0.0,
            "comm_s": sum(comm_total) / n, "compute_s": sum(busy) / n}


OCCUPIES = {"send": ("tx",), "recv": ()}  # any other op (a collective): ("tx", "rx")


def _issue(st, k: int, op: Op, now: float, seconds: float) -> float:
    """Rank k issues `op` at `now`: it is ready once the directions it occupies on its
    communicator are free (`parlab.core.virtual_link`), and holds them for its α-β."""
    free = st.free.setdefault((k, op.record.get("group"), op.key[1]), {"tx": 0.0, "rx": 0.0})
    occupies = OCCUPIES.get(op.record["op"], ("tx", "rx"))
    ready = max([now] + [free[d] for d in occupies])
    for d in occupies:
        free[d] = max(free[d], ready + seconds)
    st.ready[(op.key, k)] = (ready, seconds, now, free, occupies)
    return seconds


def _end(st, k: int, op: Op) -> float | None:
    """When `op` completes for rank k (None while a peer it needs has not issued it)."""
    ready, seconds, issued, free, occupies = st.ready[(op.key, k)]
    if op.key[0] == "p2p" and op.key[1] == k:  # a send: eager
        start = ready
    elif op.key[0] == "p2p":  # a receive: the send's bytes, or its own posting if later
        sender = st.ready.get((op.key, op.key[1]))
        if sender is None:
            return None
        start = sender[0]
        st.wire[k].append((start, start + seconds))
        return max(issued, start + seconds)
    else:
        members = [st.ready.get((op.key, m)) for m in op.key[1]]
        if any(m is None for m in members):
            return None
        start = max(m[0] for m in members)
    end = start + seconds
    st.wire[k].append((start, end))
    for d in occupies:
        free[d] = max(free[d], end)
    return end


def _covered(a, b, intervals) -> float:
    """Seconds of [a, b] inside the union of `intervals`."""
    total, reach = 0.0, a
    for lo, hi in sorted(intervals):
        lo, hi = max(lo, reach), min(hi, b)
        if hi > lo:
            total += hi - lo
            reach = hi
    return total
