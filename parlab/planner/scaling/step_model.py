"""The step-time model of a scaling point: counted compute, α-β of the ledger, overlap, bubble.

Input: each rank's compute in the step as the paced clock's operator meter counted it
(deterministic) and the ledger's bytes and rounds (equal to the closed forms). The pipeline's
bubble is not a formula here: the run's own schedule (`parlab.pipeline.schedules`, the list of
actions the executor ran) is simulated (`parlab.pipeline.validate.simulate`) with the measured
per-stage forward and backward and one activation's α-β per hop — the schedule executed, drawn
and costed from the same source.
"""

from __future__ import annotations

from parlab.pipeline.cost import stage_durations
from parlab.pipeline.schedules import make_schedule
from parlab.pipeline.validate import simulate


# ----------------------------------------------------------------------------- the model
def _contained(inner, outer) -> float:
    return max(0.0, min(inner["t1"], outer["t1"]) - max(inner["t0"], outer["t0"]))


def rank_step(r, rank: int, step: int) -> dict:
    """What rank `rank` did in step `step` (the accelerator's seconds): its compute (spans, less the
    communication waited inside them), compute by span name, its wait, the step's window."""
    mine = [e for e in r.timeline if e["rank"] == rank]
    comp = [e for e in mine if e["kind"] == "compute"]
    this = [e for e in comp if e["args"].get("step") == step]
    before = [e for e in comp if e["args"].get("step") == step - 1]
    start = max((e["t1"] for e in before), default=min(e["t0"] for e in this))
    end = max(e["t1"] for e in this)
    waits = [e for e in mine if e["kind"] == "wait" and e["t1"] > start and e["t0"] < end]
    by_name: dict = {}
    for e in this:
        nested = sum(_contained(w, e) for w in waits)
        by_name[e["name"]] = by_name.get(e["name"], 0.0) + (e["t1"] - e["t0"]) - nested
    wait = sum(_contained(w, {"t0": start, "t1": end}) for w in waits)
    return {"compute": sum(by_name.values()), "by_name": by_name, "wait": wait,
            "window": end - start}


def op_seconds(r, record) -> float:
    """α-β seconds of one ledger record on the run's (paced) link, charged as `Comm` does: a
    message on its pair's link, a collective on its group's slowest link; sends and receives of
    one op overlap (full duplex)."""
    from parlab.core.topology import Topology

    link = r.config.link
    if link is None:
        return 0.0
    if isinstance(link, Topology):
        ranks = ([record["rank"], *record["peers"]] if record["op"] in ("send", "recv")
                 else list(record["group_ranks"]))
        link = link.link_for(ranks)
        if link is None:
            return 0.0
    nbytes = max(record["bytes_sent"], record["bytes_recv"])
    return link.cost(nbytes, record["rounds"])


def predict_step(r, step: int = 1) -> dict:
    """The model's step time (the accelerator's seconds) and per-rank wait for run `r`'s step `step`.

    Input: each rank's compute in the step as the clock's operator meter counted it
    (deterministic; the planner calls it a counted profile) and the ledger's bytes and rounds
    (equal to the closed forms: `exactness`). Predicted: communication time (α-β on the link each
    op crosses, `op_seconds`), its overlap and the pipeline bubble:
      serial (single, zero3, tp): T = max_r (C_r + Σ comm_r)
      ddp-overlap (WFBP): buckets ready through backward in proportion to their bytes, sent one
        after another: T = fwd + max(bwd, last bucket's end) + optimizer
      pipeline (pp-1f1b, nd with pp > 1): the run's schedule simulated (`pipeline_makespan`) with
        each stage's measured F and B (+ its blocking tp comm) per micro-batch, every hop one
        activation's α-β after its send; T = makespan + max_r (optimizer + grad sync)."""
    cfg, n = r.config, r.config.world_size
    ranks = [rank_step(r, k, step) for k in range(n)]
    recs = [[x for x in r.ledger if x["rank"] == k and x["step"] == step] for k in range(n)]
    cost = [[op_seconds(r, x) for x in recs[k]] for k in range(n)]
    opts = cfg.options
    pp = opts.get("pp") or 1
    if cfg.scheme == "ddp-overlap":
        per = []
        for k in range(n):
            c = ranks[k]["by_name"]
            fwd, bwd, opt = c.get("forward", 0.0), c.get("backward", 0.0), c.get("optimizer", 0.0)
            sizes = [x["numel"] for x in recs[k]]
            total, done, free = sum(sizes) or 1, 0, 0.0
            for size, t in zip(sizes, cost[k]):
                done += size
                free = max(fwd + bwd * done / total, free) + t
            per.append(fwd + max(fwd + bwd, free) - fwd + opt)
        model = "WFBP overlap"
    elif pp > 1:
        m = opts.get("microbatches") or 1
        inner = n // pp  # ranks per stage (nd: dp × cp × tp of them)
        fwd, bwd, hop, tail = [0.0] * pp, [0.0] * pp, 0.0, []
        for k in range(n):
            c, stage = ranks[k]["by_name"], k // inner
            tp_comm = {x["phase"]: 0.0 for x in recs[k]}
            for x, t in zip(recs[k], cost[k]):
                tp_comm[x["phase"]] += t
            fwd[stage] = max(fwd[stage], (c.get("F", 0.0) + tp_comm.get("tp-forward", 0.0)) / m)
            bwd[stage] = max(bwd[stage], (c.get("B", 0.0) + c.get("W", 0.0)
                                          + tp_comm.get("tp-backward", 0.0)) / m)
            hop = max([hop] + [t for x, t in zip(recs[k], cost[k])
                               if str(x["phase"]).startswith("pp-") and x["op"] == "send"])
            sync = sum(t for x, t in zip(recs[k], cost[k])
                       if not str(x["phase"]).startswith(("tp-", "pp-")))
            tail.append(c.get("optimizer", 0.0) + sync)
        # the sweep's pipelines: pp-1f1b, and nd with its `schedule` option
        schedule = make_schedule(opts.get("schedule") or "1f1b", pp, m)
        per = [pipeline_makespan(schedule, fwd, bwd, hop) + max(tail)] * n
        model = f"1F1B simulated (m={m}, p={pp})"
    else:
        per = [ranks[k]["compute"] + sum(cost[k]) for k in range(n)]
        model = "serial α-β"
    t = max(per)
    compute = [x["compute"] for x in ranks]
    return {"step_s": t, "model": model, "wait_s": sum(t - c for c in compute) / n,
            "measured_wait_s": sum(x["wait"] for x in ranks) / n, "compute_s": compute}


def pipeline_makespan(schedule, forward: list[float], backward: list[float], hop: float) -> float:
    """Seconds from the first F to the last B of `schedule` (its lowered actions, as the executor
    runs them) with stage s's F lasting forward[s], its B backward[s], and every message arriving
    `hop` after its send (`parlab.pipeline.validate.simulate`)."""
    events = simulate(schedule, stage_durations(schedule, forward, backward), hop)
    return max(e["t1"] for e in events) - min(e["t0"] for e in events)
