"""The rows of `python -m parlab bench all` whose regime is chosen from measurements, not a preset
link: each measures this machine's forward F and backward B (waits taken out) and the bytes per
step from the ledger, picks the emulated link where the overlap can pay most, and prints the
ideal-overlap ceiling of those same numbers beside the measured ratio.

* WFBP (Zhang et al., "Poseidon", USENIX ATC 2017) vs all-reduce after backward, at C = B;
* DeAR (Zhang et al., ICDCS 2023) vs WFBP, at C = 2B;
* ZeRO-3 with FSDP's prefetch (Zhao et al., VLDB 2023) vs without, where the forward's
  all-gathers take as long as the forward computes;
* async TP (Wang et al., ASPLOS 2023) vs tp-sp with the ring's collectives, on NVLink as an A100
  sees it (`parlab.core.link.faithful`).

Like `parlab.engine.bench_all`, it reaches the chapters only by scheme name (`run`).
"""

from __future__ import annotations

import statistics

from parlab.core.link import Link


def step_seconds(result) -> float:
    """A run's step time, the first step (connections, allocations) left out."""
    return result.step_time(warmup=1)


DP_MODEL = {"n_layer": 4, "n_embd": 64, "n_head": 4, "block_size": 64}  # F ≈ 15 ms at 24 rows


def _median_span(result, name: str, warmup: int = 2) -> float:
    return statistics.median(e["t1"] - e["t0"] for e in result.timeline
                             if e["kind"] == "compute" and e["name"] == name and e["rank"] == 0
                             and (e.get("args") or {}).get("step", 0) >= warmup)


def dp_regime_rows(repeats: int, steps: int, world_size: int = 2, rows_per_rank: int = 24) -> list:
    """WFBP vs all-reduce after backward, and DeAR vs WFBP, each on the emulated link where its
    overlap pays most, chosen from this machine's measured forward F and backward B (a loopback
    run of ddp-overlap, hooks included) and the all-reduce bytes per rank of its ledger.

    With an all-reduce of C seconds split evenly over the buckets, ideal overlap gives
    (Zhang et al., "Poseidon", USENIX ATC 2017, for WFBP; Zhang et al., "DeAR", ICDCS 2023):
    naive F + B + C;  WFBP F + max(B, C);  DeAR max(F, C/2) + max(B, C/2)
    so WFBP's gain over naive peaks at C = B, (F + 2B)/(F + B), and DeAR's over WFBP at C = 2B,
    1 + F/(2B): the forward it adds to the overlap, over the communication. Each row prints
    that ceiling beside the measured ratio."""
    from parlab.engine.runner import run

    kw = dict(world_size=world_size, batch_size=rows_per_rank * world_size, model_config=DP_MODEL)
    calib = run("ddp-overlap", steps=steps, **kw)
    forward, backward = _median_span(calib, "forward"), _median_span(calib, "backward")
    last = max(r["step"] for r in calib.ledger if r["step"] is not None)
    nbytes = sum(r["bytes_sent"] for r in calib.ledger
                 if r["rank"] == 0 and r["step"] == last and r["phase"] == "grad-sync")
    rows = []
    regimes = [("WFBP (ddp-overlap) vs ddp-naive", "ddp-overlap", "ddp-naive", backward,
                (forward + 2 * backward) / (forward + backward), "C = B"),
               ("DeAR vs WFBP (ddp-overlap)", "dear", "ddp-overlap", 2 * backward,
                1 + forward / (2 * backward), "C = 2B")]
    for name, a, b, comm_s, ceiling, where in regimes:
        link = Link(20e-6, nbytes / comm_s, f"{nbytes / comm_s / 1e6:.1f} MB/s")
        ratios = []
        for _ in range(repeats):
            t_a = step_seconds(run(a, steps=steps, link=link, **kw))
            result_b = run(b, steps=steps, link=link, **kw)
            ratios.append(step_seconds(result_b) / t_a)
        detail = (f"step time B / A on {link.name}; ideal ceiling {ceiling:.2f} from measured "
                  f"F {forward * 1e3:.1f} ms, B {backward * 1e3:.1f} ms, C {comm_s * 1e3:.1f} ms")
        if b == "ddp-naive":
            # naive issues one blocking all-reduce per parameter tensor: each pays the gloo
            # handshake between two processes on top of the link's charge, so its measured
            # communication exceeds C and the ratio can beat the ceiling; say by how much
            naive_comm = _blocking_comm_per_step(result_b)
            predicted = (forward + backward + naive_comm) / (forward + max(backward, comm_s))
            detail += (f"; naive measured {naive_comm * 1e3:.1f} ms of blocking all-reduces per "
                       f"step (vs C), which predicts {predicted:.2f}")
        rows.append({"chapter": "data_parallel", "name": f"{name}, {where}, N={world_size}",
                     "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios),
                     "ceiling": ceiling, "detail": detail})
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


def zero3_regime(steps: int, world_size: int = 2, rows_per_rank: int = 24) -> dict:
    """The emulated link where ZeRO-3's forward all-gathers take as long as the forward computes
    (FSDP's prefetch: Zhao et al., "PyTorch FSDP", VLDB 2023, §3.4), chosen from this machine's
    measured compute (a loopback run without prefetch, waits taken out) and the ledger's bytes
    per phase, with the ideal-overlap step times of all-gathers A_f, A_b and reduce-scatter R:
    without prefetch F + B + A_f + A_b + R; with prefetch max(F, A_f) + max(B, A_b + R).
    Returns the link, the run keywords, the measured F and B, A_f, A_b, R and both ideals (s)."""
    from parlab.engine.runner import run

    kw = dict(world_size=world_size, batch_size=rows_per_rank * world_size, model="gpt",
              model_config=DP_MODEL)
    calib = run("zero3", steps=steps, prefetch=False, **kw)
    forward, backward = (compute_per_step(calib, n) for n in ("forward", "backward"))
    last = max(r["step"] for r in calib.ledger if r["step"] is not None)
    nbytes = {}
    for r in calib.ledger:
        if r["rank"] == 0 and r["step"] == last:
            nbytes[r["phase"]] = nbytes.get(r["phase"], 0) + r["bytes_sent"]
    beta = nbytes["param-gather-fwd"] / forward
    gather_f, gather_b, scatter = (nbytes[p] / beta for p in
                                   ("param-gather-fwd", "param-gather-bwd", "grad-reduce-scatter"))
    return {"link": Link(20e-6, beta, f"{beta / 1e6:.1f} MB/s"), "run": kw, "forward": forward,
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
    for _ in range(repeats):
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
