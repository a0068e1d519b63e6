"""`python -m parlab bench all`: every chapter's headline comparison, quickly, in one table and a JSON.

Each row is a ratio measured in this run, never a constant: the two sides of a comparison run
interleaved (A, B, A, B, ...) `--repeats` times so the shared machine's load falls on both alike,
and the row gives the median of the per-repeat ratios with their range. Rows:

* collectives: the hand-written pipelined ring (parlab.core.collectives; Patarasuk & Yuan, JPDC
  2009) vs gloo's own, bus bandwidth (nccl-tests' definition) at 16 MB and 64 MB, world size 2
  and 4, for all-reduce, reduce-scatter and all-gather (> 1: ours is faster);
* step-time ratios of scheme pairs (> 1: the first is faster): ZeRO-3 with FSDP's prefetch vs
  without (Zhao et al., VLDB 2023) on loopback and on an emulated link, ours vs torch-fsdp, our
  GPipe vs torch.distributed.pipelining's;
* WFBP vs all-reduce after backward and DeAR vs WFBP, each on the emulated link where its overlap
  pays most, chosen from the measured forward and backward, beside its ideal ceiling
  (`dp_regime_rows`);
* async TP vs tp-sp with the ring's collectives on a faithful NVLink (`async_tp_pairs`);
* the overlap fraction of ring attention (Liu et al., ICLR 2024), forward and backward, measured
  from the timeline on an emulated link: the share of the K/V messages' link time that passed
  while the rank computed, before it waited (`overlap_fraction`).

This module sits in the engine layer: it reaches the chapters only by scheme name (`run`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from parlab.core import cost
from parlab.core.comm import Comm
from parlab.core.launch import launch
from parlab.core.link import Link

MB = 1 << 20


# ----------------------------------------------------------------------------- collectives
def collectives_worker(rank: int, world_size: int, sizes: list[int], repeats: int) -> dict:
    """Per (op, bytes): per-repeat seconds of gloo and ring, interleaved, after a warm-up."""
    comm = Comm()
    out = {}
    for nbytes in sizes:
        full = torch.ones(nbytes // 4)  # (S,) float32
        shard = torch.ones(nbytes // 4 // world_size)  # (S/N,)
        ops = {"all_reduce": lambda algo, t=full: comm.all_reduce(t, algo=algo),
               "reduce_scatter": lambda algo, t=full: comm.reduce_scatter(t, algo=algo),
               "all_gather": lambda algo, t=shard: comm.all_gather(t, algo=algo)}
        for op, fn in ops.items():
            samples = {"gloo": [], "ring": []}
            for algo in samples:
                fn(algo)  # warm-up: connections, buffers
            for _ in range(repeats):
                for algo in samples:
                    comm.barrier()
                    t0 = time.perf_counter()
                    fn(algo)
                    samples[algo].append(time.perf_counter() - t0)
            out[(op, nbytes)] = samples
            full.fill_(1.0)
        comm.drop_records()
    return out


def collective_rows(world_sizes, sizes, repeats) -> list[dict]:
    rows = []
    for n in world_sizes:
        per_rank = launch(collectives_worker, n, sizes, repeats, timeout=900)
        for (op, nbytes) in per_rank[0]:
            slow = {a: [max(r[(op, nbytes)][a][i] for r in per_rank) for i in range(repeats)]
                    for a in ("gloo", "ring")}  # the slowest rank of each repeat
            ratios = [g / m for g, m in zip(slow["gloo"], slow["ring"])]
            busbw = cost.bus_bandwidth(nbytes, min(slow["ring"]), n, op) / 1e9
            rows.append({"chapter": "core", "name": f"ring/gloo busbw {op} {nbytes // MB} MB N={n}",
                         "ratio": statistics.median(ratios), "low": min(ratios),
                         "high": max(ratios), "detail": f"ring {busbw:.2f} GB/s (fastest), gloo "
                         f"{cost.bus_bandwidth(nbytes, min(slow['gloo']), n, op) / 1e9:.2f}"})
    return rows


# ----------------------------------------------------------------------------- scheme pairs
def _step(result) -> float:
    return result.step_time(warmup=1)


def pair_rows(pairs, repeats: int, steps: int) -> list[dict]:
    """pairs: (chapter, name, kwargs of A, kwargs of B); ratio = step(B) / step(A)."""
    from parlab.engine.runner import run

    rows = []
    for chapter, name, a, b in pairs:
        ratios = []
        for _ in range(repeats):
            t_a = _step(run(steps=steps, **a))
            t_b = _step(run(steps=steps, **b))
            ratios.append(t_b / t_a)
        rows.append({"chapter": chapter, "name": name, "ratio": statistics.median(ratios),
                     "low": min(ratios), "high": max(ratios), "detail": "step time B / A"})
    return rows


def overlap_fraction(result, link: Link, phase_prefix: str, warmup: int = 1) -> float:
    """The share of the emulated link time of `phase_prefix` messages that compute covered, from
    every rank's timeline after `warmup` steps (the first opens connections): a message's link
    time α + bytes/β runs from its post (the comm event's start) and is hidden up to the moment
    the rank starts waiting for it (the wait event recorded just before the comm event by
    parlab.core.handle.Handle.wait): Σ min(link time, wait start − post) / Σ link time, over sends
    (an exchange's receive travels the other direction at the same time). Waiting on a peer that
    is still computing (load imbalance) does not count against the overlap."""
    covered = planned = 0.0
    for rank_events in _by_rank(result.timeline).values():
        start = min((e["t0"] for e in rank_events if e["kind"] == "compute"
                     and (e.get("args") or {}).get("step") == warmup), default=0.0)
        for before, event in zip(rank_events, rank_events[1:]):
            phase = (event.get("args") or {}).get("phase") or ""
            if (event["kind"] != "comm" or event["name"] != "send" or before["kind"] != "wait"
                    or not phase.startswith(phase_prefix) or event["t0"] < start):
                continue
            seconds = link.cost(event["args"]["bytes"], 1)
            covered += min(seconds, max(0.0, before["t0"] - event["t0"]))
            planned += seconds
    return covered / planned if planned else float("nan")


def _by_rank(events):
    ranks: dict = {}
    for e in events:
        ranks.setdefault(e["rank"], []).append(e)
    return ranks


def ring_attention_rows(repeats: int, steps: int, link: Link, model_config: dict) -> list[dict]:
    from parlab.engine.runner import run

    rows = []
    for recompute in (False, True):
        for phase in ("cp-forward", "cp-backward"):
            fractions = []
            for _ in range(repeats):
                result = run("cp-ring", world_size=2, steps=steps, link=link, cp=2,
                             recompute=recompute, model_config=model_config)
                fractions.append(overlap_fraction(result, link, phase))
            rows.append({"chapter": "context_parallel",
                         "name": f"ring attention{' (recompute)' if recompute else ''} overlap "
                         f"{phase}", "ratio": statistics.median(fractions), "low": min(fractions),
                         "high": max(fractions), "detail": f"fraction of K/V link time hidden, {link}"})
    return rows


# ----------------------------------------------------------------------------- overlap regimes
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
            t_a = _step(run(a, steps=steps, link=link, **kw))
            result_b = run(b, steps=steps, link=link, **kw)
            ratios.append(_step(result_b) / t_a)
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


def _compute_per_step(result, name: str, warmup: int = 2) -> float:
    """Median seconds of rank 0's `name` spans per step, less the waits on communication inside."""
    events = [e for e in result.timeline if e["rank"] == 0]
    spans = [e for e in events if e["kind"] == "compute" and e["name"] == name
             and (e.get("args") or {}).get("step", 0) >= warmup]
    waits = [e for e in events if e["kind"] == "wait"]
    return statistics.median(
        (s["t1"] - s["t0"]) - sum(w["t1"] - w["t0"] for w in waits
                                  if s["t0"] <= w["t0"] and w["t1"] <= s["t1"]) for s in spans)


def zero3_regime_row(repeats: int, steps: int, world_size: int = 2, rows_per_rank: int = 24) -> dict:
    """ZeRO-3 with FSDP's prefetch vs without (Zhao et al., "PyTorch FSDP", VLDB 2023, §3.4) on
    the emulated link where the forward's all-gathers take as long as the forward computes,
    chosen from this machine's measured compute (a loopback run, waits taken out) and the
    ledger's bytes per phase. Ideal overlap, all-gathers A_f and A_b and reduce-scatter R:
    without prefetch F + B + A_f + A_b + R; with prefetch max(F, A_f) + max(B, A_b + R)."""
    from parlab.engine.runner import run

    kw = dict(world_size=world_size, batch_size=rows_per_rank * world_size, model="gpt",
              model_config=DP_MODEL)
    calib = run("zero3", steps=steps, prefetch=False, **kw)
    forward, backward = (_compute_per_step(calib, n) for n in ("forward", "backward"))
    last = max(r["step"] for r in calib.ledger if r["step"] is not None)
    nbytes = {}
    for r in calib.ledger:
        if r["rank"] == 0 and r["step"] == last:
            nbytes[r["phase"]] = nbytes.get(r["phase"], 0) + r["bytes_sent"]
    beta = nbytes["param-gather-fwd"] / forward
    gather_f, gather_b, scatter = (nbytes[p] / beta for p in
                                   ("param-gather-fwd", "param-gather-bwd", "grad-reduce-scatter"))
    ceiling = ((forward + backward + gather_f + gather_b + scatter)
               / (max(forward, gather_f) + max(backward, gather_b + scatter)))
    link = Link(20e-6, beta, f"{beta / 1e6:.1f} MB/s")
    ratios = []
    for _ in range(repeats):
        t_a = _step(run("zero3", steps=steps, prefetch=True, link=link, **kw))
        t_b = _step(run("zero3", steps=steps, prefetch=False, link=link, **kw))
        ratios.append(t_b / t_a)
    return {"chapter": "zero", "name": f"zero3 prefetch vs none, A_f = F, N={world_size}",
            "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios),
            "ceiling": ceiling,
            "detail": f"step time B / A on {link.name}; ideal ceiling {ceiling:.2f} from measured "
                      f"F {forward * 1e3:.1f} ms, B {backward * 1e3:.1f} ms, A_f {gather_f * 1e3:.1f}"
                      f" ms, A_b {gather_b * 1e3:.1f} ms, R {scatter * 1e3:.1f} ms"}


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


# ----------------------------------------------------------------------------- main
def headline_pairs(link: str) -> list:
    gpt = {"model": "gpt"}
    return [
        ("zero", "zero3 prefetch vs none, loopback N=2",
         dict(scheme="zero3", world_size=2, prefetch=True, **gpt),
         dict(scheme="zero3", world_size=2, prefetch=False, **gpt)),
        ("zero", f"zero3 prefetch vs none, {link} N=2",
         dict(scheme="zero3", world_size=2, prefetch=True, link=link, **gpt),
         dict(scheme="zero3", world_size=2, prefetch=False, link=link, **gpt)),
        ("zero", "zero3 (prefetch) vs torch-fsdp, loopback N=2",
         dict(scheme="zero3", world_size=2, prefetch=True, **gpt),
         dict(scheme="torch-fsdp", world_size=2, **gpt)),
        ("pipeline", "pp-gpipe vs torch-pp gpipe, N=2, m=4",
         dict(scheme="pp-gpipe", world_size=2, microbatches=4, **gpt),
         dict(scheme="torch-pp", world_size=2, microbatches=4, schedule="gpipe", **gpt)),
        ("pipeline", "pp-1f1b vs torch-pp 1f1b, N=2, m=4",
         dict(scheme="pp-1f1b", world_size=2, microbatches=4, **gpt),
         dict(scheme="torch-pp", world_size=2, microbatches=4, schedule="1f1b", **gpt)),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench all")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per row")
    parser.add_argument("--collective-repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--link", default="1GbE", help="emulated link of the scheme pairs")
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--only", nargs="+",
                        choices=("collectives", "pairs", "dp-regimes", "async-tp", "ring-attention"),
                        default=("collectives", "pairs", "dp-regimes", "async-tp", "ring-attention"))
    parser.add_argument("--json", default="bench_all.json", help="write every row here")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    rows = []
    if "collectives" in args.only:
        rows += collective_rows(args.world_sizes, [s * MB for s in args.sizes_mb],
                                args.collective_repeats)
    if "pairs" in args.only:
        rows += pair_rows(headline_pairs(args.link), args.repeats, args.steps)
    if "dp-regimes" in args.only:
        rows += dp_regime_rows(args.repeats, max(args.steps, 6))
        rows.append(zero3_regime_row(args.repeats, max(args.steps, 6)))
    if "async-tp" in args.only:
        rows += pair_rows(async_tp_pairs(), args.repeats, args.steps)
    if "ring-attention" in args.only:
        # a K/V block of 2·B·(T/cp)·C·4 = 393 KB (T = 256, C = 32): ~2 ms on a 200 MB/s link,
        # slower than loopback's real transfer (so the emulated time is what is measured) and
        # about one block's attention compute here, the regime where overlap can hide it
        link = Link(20e-6, 200e6, "200 MB/s, 20 µs")
        rows += ring_attention_rows(args.repeats, args.steps, link,
                                    {"block_size": 256, "n_embd": 32, "n_head": 4, "n_layer": 2})
    width = max(len(r["name"]) for r in rows)
    print(f"{'chapter':16s} {'comparison':{width}s} {'ratio':>6s}  {'range':>13s}  detail")
    for r in rows:
        print(f"{r['chapter']:16s} {r['name']:{width}s} {r['ratio']:6.2f}  "
              f"[{r['low']:.2f}..{r['high']:.2f}]  {r['detail']}")
    print(f"({time.perf_counter() - t0:.0f} s; ratios > 1: the first named is faster, or the "
          "fraction of link time hidden)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0
