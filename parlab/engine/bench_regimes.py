"""The rows of `python -m parlab bench all` whose regime is chosen from measurements, not a preset
link: each measures this machine's forward F and backward B (waits taken out) and the bytes per
step from the ledger, picks the emulated link where the overlap can pay most, and prints the
ideal-overlap ceiling of those same numbers beside the measured ratio.

* WFBP (Zhang et al., "Poseidon", USENIX ATC 2017) vs all-reduce after backward, near C = B;
* DeAR (Zhang et al., ICDCS 2023) vs WFBP, near C = 2B (each where its ideal ceiling peaks);
* ZeRO-3 with FSDP's prefetch (Zhao et al., VLDB 2023) vs without, where the forward's
  all-gathers take as long as the forward computes;
* async TP (Wang et al., ASPLOS 2023) vs tp-sp with the ring's collectives, on NVLink as an A100
  sees it (`parlab.core.link.faithful`).

Like `parlab.engine.bench_all`, it reaches the chapters only by scheme name (`run`).
"""

from __future__ import annotations

import math
import statistics

from parlab.core.link import REAL, Link
from parlab.core.progress import progress


def step_seconds(result) -> float:
    """A run's step time, the first step (connections, allocations) left out."""
    return result.step_time(warmup=1)


DP_MODEL = {"n_layer": 4, "n_embd": 64, "n_head": 4, "block_size": 64}  # F ≈ 15 ms at 24 rows


def _median_span(result, name: str, warmup: int = 2) -> float:
    return statistics.median(e["t1"] - e["t0"] for e in result.timeline
                             if e["kind"] == "compute" and e["name"] == name and e["rank"] == 0
                             and (e.get("args") or {}).get("step", 0) >= warmup)


def _bucket_posts(result, warmup: int = 2) -> list:
    """Rank 0's grad-sync posts of one step as (seconds into backward, bytes sent), the median
    offset of each bucket over the steps after `warmup`: when backward hands each bucket over."""
    per_step = []
    for span in result.timeline:
        if (span["rank"] == 0 and span["kind"] == "compute" and span["name"] == "backward"
                and (span.get("args") or {}).get("step", 0) >= warmup):
            per_step.append(sorted((e["t0"] - span["t0"], e["args"]["bytes"])
                                   for e in result.timeline
                                   if e["rank"] == 0 and e["kind"] == "comm"
                                   and (e.get("args") or {}).get("phase") == "grad-sync"
                                   and span["t0"] <= e["t0"] <= span["t1"] + 1e-3))
    n = min(len(posts) for posts in per_step)
    return [(statistics.median(posts[i][0] for posts in per_step), per_step[0][i][1])
            for i in range(n)]


def _fifo_done(posts: list, seconds_per_byte: float) -> float:
    """When a first-in first-out link that starts free has delivered every (time, bytes) post."""
    free = 0.0
    for t, nbytes in posts:
        free = max(free, t) + nbytes * seconds_per_byte
    return free


def dp_ideal_steps(forward: float, backward: float, optimizer: float, posts: list,
                   comm: float) -> dict:
    """Ideal-overlap step times of all-reduce after backward, WFBP and DeAR when the all-reduce
    takes `comm` seconds in all and each bucket goes on the link when backward hands it over
    (`posts`, from `_bucket_posts`), first in first out:
    naive F + B + C + O;  WFBP F + max(B, done(all-reduces)) + O (Zhang et al., "Poseidon",
    USENIX ATC 2017);  DeAR max(F + O, C/2) + max(B, done(reduce-scatters)) (Zhang et al.,
    "DeAR", ICDCS 2023: the reduce-scatter half, (N−1)/N·S of a bucket's 2(N−1)/N·S, in
    backward; the all-gather half and the per-bucket updates in the next forward). The buckets
    handed over last (the first layers) keep their transfer after backward in both."""
    per_byte = comm / sum(nbytes for _, nbytes in posts)
    f, b, o, c = forward, backward, optimizer, comm
    return {"ddp-naive": f + b + c + o,
            "ddp-overlap": f + max(b, _fifo_done(posts, per_byte)) + o,
            "dear": max(f + o, c / 2) + max(b, _fifo_done(posts, per_byte / 2))}


def dp_regime_rows(repeats: int, steps: int, world_size: int = 2, rows_per_rank: int = 96) -> list:
    """WFBP vs all-reduce after backward, and DeAR vs WFBP, each on the emulated link where its
    ideal overlap pays most (`dp_ideal_steps`), from this machine's measured forward F,
    backward B, optimizer step O and bucket hand-over times (a loopback run of ddp-overlap,
    hooks included) and the all-reduce bytes per rank of its ledger.

    Without the bucket times the peaks are WFBP's at C = B, (F + 2B)/(F + B), and DeAR's at
    C = 2B, 1 + F/(2B): the forward it adds to the overlap, over the communication. The
    buckets handed over at the end of backward lower both; the row prints the ceiling of its
    link beside the measured ratio. A large per-rank batch keeps the per-op overheads (hooks,
    gloo's handshakes, per-bucket updates) small beside F and B, as on a GPU at scale."""
    from parlab.engine.runner import run

    kw = dict(world_size=world_size, batch_size=rows_per_rank * world_size, model_config=DP_MODEL)
    calib = run("ddp-overlap", steps=steps, **kw)
    forward, backward = _median_span(calib, "forward"), _median_span(calib, "backward")
    optimizer, posts = _median_span(calib, "optimizer"), _bucket_posts(calib)
    nbytes = sum(nbytes for _, nbytes in posts)
    rows = []
    # DeAR's halves run on the pipelined ring: gloo's own reduce-scatter moves its shards at a
    # fraction of gloo's all-reduce bus bandwidth on CPU (the collective rows of `bench all`),
    # while WFBP keeps gloo's all-reduce, its faster implementation here: each side gets its best
    for name, a, b, a_options in (
            ("WFBP (ddp-overlap) vs ddp-naive", "ddp-overlap", "ddp-naive", {}),
            ("DeAR (ring halves) vs WFBP (ddp-overlap)", "dear", "ddp-overlap", {"algo": "ring"})):
        def ceiling_at(comm_s, a=a, b=b):
            ideal = dp_ideal_steps(forward, backward, optimizer, posts, comm_s)
            return ideal[b] / ideal[a]

        comm_s = max((backward * k / 20 for k in range(5, 61)), key=ceiling_at)
        ideal = dp_ideal_steps(forward, backward, optimizer, posts, comm_s)
        link = Link(20e-6, nbytes / comm_s, f"{nbytes / comm_s / 1e6:.1f} MB/s")
        ratios = []
        for _ in range(repeats):
            t_a = step_seconds(run(a, steps=steps, link=link, **a_options, **kw))
            result_b = run(b, steps=steps, link=link, **kw)
            ratios.append(step_seconds(result_b) / t_a)
        detail = (f"step time B / A on {link.name}; ideal ceiling {ceiling_at(comm_s):.2f} "
                  f"(ideal steps {ideal[b] * 1e3:.0f} / {ideal[a] * 1e3:.0f} ms) from measured "
                  f"F {forward * 1e3:.1f} ms, B {backward * 1e3:.1f} ms, O {optimizer * 1e3:.1f} "
                  f"ms, {len(posts)} buckets, C {comm_s * 1e3:.1f} ms")
        if b == "ddp-naive":
            # naive issues one blocking all-reduce per parameter tensor: each pays the gloo
            # handshake between two processes on top of the link's charge, so its measured
            # communication exceeds C and the ratio can beat the ceiling; say by how much
            naive_comm = _blocking_comm_per_step(result_b)
            predicted = (forward + backward + naive_comm + optimizer) / ideal[a]
            detail += (f"; naive measured {naive_comm * 1e3:.1f} ms of blocking all-reduces per "
                       f"step (vs C), which predicts {predicted:.2f}")
        rows.append({"chapter": "data_parallel",
                     "name": f"{name}, C = {comm_s / backward:.2f}·B, N={world_size}",
                     "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios),
                     "ceiling": ceiling_at(comm_s), "detail": detail})
    return rows


def _blocking_comm_per_step(result, warmup: int = 2) -> float:
    """Median seconds per step that rank 0 spent inside its (blocking) grad-sync ops."""
    per_step: dict = {}
    for r in result.ledger:
        if r["rank"] == 0 and r["phase"] == "grad-sync" and (r["step"] or 0) >= warmup:
            per_step[r["step"]] = per_step.get(r["step"], 0.0) + r["t_end"] - r["t_start"]
    return statistics.median(per_step.values())


def compute_per_step(result, name: str, warmup: int = 2) -> float:
    """Median seconds of rank 0's `name` spans per step, less the waits on communication inside."""
    events = [e for e in result.timeline if e["rank"] == 0]
    spans = [e for e in events if e["kind"] == "compute" and e["name"] == name
             and (e.get("args") or {}).get("step", 0) >= warmup]
    waits = [e for e in events if e["kind"] == "wait"]
    return statistics.median(
        (s["t1"] - s["t0"]) - sum(w["t1"] - w["t0"] for w in waits
                                  if s["t0"] <= w["t0"] and w["t1"] <= s["t1"]) for s in spans)


def zero3_regime(steps: int, world_size: int = 2, rows_per_rank: int = 24, clock: str = "wall") -> dict:
    """The emulated link where ZeRO-3's forward all-gathers take as long as the forward computes
    (FSDP's prefetch: Zhao et al., "PyTorch FSDP", VLDB 2023, §3.4), chosen from the measured
    compute (a run without link or prefetch, waits taken out) and the ledger's bytes per phase,
    with the ideal-overlap step times of all-gathers A_f, A_b and reduce-scatter R:
    without prefetch F + B + A_f + A_b + R; with prefetch max(F, A_f) + max(B, A_b + R).

    clock: "wall" measures this CPU, raw, and returns a link in its seconds (α = 20 µs); a paced
    clock ("A100", parlab.core.clock) measures virtual compute (the accelerator's seconds) and
    returns, of the real links (`parlab.core.link.REAL`), the one whose forward gathers A_f come
    nearest to F on that accelerator (no link made for the lesson) — the link to pass with
    `clock=` — and `paced_link`, that link as the run prices it (the same: a link that is not a
    preset is taken as real). Returns the link, the run keywords (the clock among them), the measured F and B,
    A_f, A_b, R and both ideals, in the run's seconds."""
    from parlab.core.clock import pace_link
    from parlab.engine.runner import make_config, run

    kw = dict(world_size=world_size, batch_size=rows_per_rank * world_size, model="gpt",
              model_config=DP_MODEL, clock=clock)
    calib = run("zero3", steps=steps, prefetch=False, **kw)
    forward, backward = (compute_per_step(calib, n) for n in ("forward", "backward"))
    last = max(r["step"] for r in calib.ledger if r["step"] is not None)
    ops = [r for r in calib.ledger if r["rank"] == 0 and r["step"] == last]
    nbytes = {}
    for r in ops:
        nbytes[r["phase"]] = nbytes.get(r["phase"], 0) + r["bytes_sent"]
    beta = nbytes["param-gather-fwd"] / forward  # bytes per second of the run's own time
    paced = calib.clock
    if paced.paced:  # virtual time: the forward is the accelerator's seconds; the link, a real one
        def gather_time(link):
            return sum(link.cost(r["bytes_sent"], r["rounds"]) for r in ops
                       if r["phase"] == "param-gather-fwd")
        real = {name: Link(a, b, f"{name} (real: its A_f is the nearest to F on the {paced.name})")
                for name, (a, b) in REAL.items() if name != "NVLink"}
        link = min(real.values(), key=lambda lk: abs(math.log(gather_time(lk) / forward)))
        emulated = pace_link(link, make_config("zero3", steps=1, **kw).clock)
    else:
        link = emulated = Link(20e-6, beta, f"{beta / 1e6:.1f} MB/s")
    gather_f, gather_b, scatter = (  # every op's rounds·α + bytes/β, as the link charges it
        sum(emulated.cost(r["bytes_sent"], r["rounds"]) for r in ops if r["phase"] == p)
        for p in ("param-gather-fwd", "param-gather-bwd", "grad-reduce-scatter"))
    return {"link": link, "paced_link": emulated, "run": kw, "forward": forward,
            "backward": backward, "gather_f": gather_f, "gather_b": gather_b, "scatter": scatter,
            "ideal_none": forward + backward + gather_f + gather_b + scatter,
            "ideal_prefetch": max(forward, gather_f) + max(backward, gather_b + scatter)}


def zero3_regime_row(repeats: int, steps: int, world_size: int = 2, rows_per_rank: int = 24) -> dict:
    """ZeRO-3 with FSDP's prefetch vs without on `zero3_regime`'s link, beside the ideal ceiling."""
    from parlab.engine.runner import run

    regime = zero3_regime(steps, world_size, rows_per_rank)
    link, kw = regime["link"], regime["run"]
    ceiling = regime["ideal_none"] / regime["ideal_prefetch"]
    ratios = []
    for _ in progress(range(repeats), desc="ZeRO-3 repeats"):
        t_a = step_seconds(run("zero3", steps=steps, prefetch=True, link=link, **kw))
        t_b = step_seconds(run("zero3", steps=steps, prefetch=False, link=link, **kw))
        ratios.append(t_b / t_a)
    ms = {k: regime[k] * 1e3 for k in ("forward", "backward", "gather_f", "gather_b", "scatter")}
    return {"chapter": "zero", "name": f"zero3 prefetch vs none, A_f = F, N={world_size}",
            "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios),
            "ceiling": ceiling,
            "detail": f"step time B / A on {link.name}; ideal ceiling {ceiling:.2f} from measured "
                      f"F {ms['forward']:.1f} ms, B {ms['backward']:.1f} ms, A_f {ms['gather_f']:.1f}"
                      f" ms, A_b {ms['gather_b']:.1f} ms, R {ms['scatter']:.1f} ms"}


def async_tp_pairs() -> list:
    """Async TP (Wang et al., ASPLOS 2023) vs tp-sp with the pipelined ring's collectives (the
    same bytes synchronously), tp = 2, on NVLink as an A100 sees it (`parlab.core.link.faithful`)
    with a model wide enough that a chunk's matmul is comparable to its transfer."""
    from parlab.core.link import achieved_flops, faithful
    from parlab.engine.runner import run

    config = dict(model="gpt", model_config={"n_embd": 256, "block_size": 128, "n_head": 4},
                  batch_size=8, optimizer="sgd")
    link = faithful("NVLink", achieved_flops(run("single", steps=3, **config)), "A100")
    return [("tensor_parallel", "async TP vs tp-sp (ring collectives), faithful NVLink, tp=2",
             dict(scheme="tp-sp", world_size=2, async_tp=True, link=link, **config),
             dict(scheme="tp-sp", world_size=2, algo="ring", link=link, **config))]
