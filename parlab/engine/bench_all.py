"""`python -m parlab bench all`: every chapter's headline comparison, quickly, in one table and a JSON.

Each row is a ratio measured in this run, never a constant: the two sides run interleaved
(A, B, A, B, ...) `--repeats` times, and the row gives the median of the per-repeat ratios with
their range. Rows: our pipelined ring against gloo's collectives (Patarasuk & Yuan, JPDC 2009;
bus bandwidth as nccl-tests defines it); step-time ratios of scheme pairs (ZeRO-3 prefetch, Zhao
et al., VLDB 2023; ours vs torch-fsdp); overlaps in the regime where each pays most
(`parlab.engine.bench_regimes`); ring attention's overlap fraction (Liu et al., ICLR 2024); the
pipeline's rows (`parlab.pipeline.bench.headline_rows`). Each row in full: docs/engine.md,
`parlab.engine.bench_all`.

This module sits in the engine layer: it reaches the chapters only by scheme name (`run`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from parlab.core import collectives, cost
from parlab.core.comm import Comm
from parlab.core.launch import launch
from parlab.core.link import Link
from parlab.core.progress import progress
from parlab.engine.bench_regimes import async_tp_pairs, dp_regime_rows, step_seconds, zero3_regime_row

MB = 1 << 20


# ----------------------------------------------------------------------------- collectives
def collectives_worker(rank: int, world_size: int, sizes: list[int], repeats: int) -> dict:
    """Per (op, bytes): per-repeat seconds of gloo and ring, interleaved, after a warm-up, with
    the process CPU seconds each took (all threads: gloo's transport copies count); and per
    bytes the point-to-point pace of a ring: 2(N-1) ring steps back to back, each rank sending
    S/N to its successor while receiving S/N from its predecessor, with no reduction."""
    comm = Comm()
    out = {}
    nxt, prv = (comm.rank + 1) % world_size, (comm.rank - 1) % world_size
    for nbytes in sizes:
        full = torch.ones(nbytes // 4)  # (S,) float32
        shard = torch.ones(nbytes // 4 // world_size)  # (S/N,)
        incoming = torch.empty_like(shard)  # (S/N,)

        parts = collectives.segment_count([(0, shard.numel())], shard.element_size())
        pieces = list(zip(incoming.tensor_split(parts), shard.tensor_split(parts)))

        def exchange(pieces=pieces):  # 2(N-1) steps of (S/N,) each way, in the ring's segments
            for _ in range(2 * (world_size - 1)):
                handles = [h for into, piece in pieces
                           for h in (comm.irecv(into, prv), comm.isend(piece, nxt))]
                for handle in handles:
                    handle.wait()

        gathered = torch.empty_like(full)  # (S,) reused outputs, as FSDP's buffers are:
        scattered = torch.empty_like(shard)  # (S/N,) fresh pages per call would be timed
        ops = {"all_reduce": lambda algo, t=full: comm.all_reduce(t, algo=algo),
               "reduce_scatter": lambda algo, t=full, o=scattered: comm.reduce_scatter(
                   t, algo=algo, out=o),
               "all_gather": lambda algo, t=shard, o=gathered: comm.all_gather(t, algo=algo, out=o)}
        for op, fn in ops.items():
            samples = {"gloo": [], "ring": [], "gloo cpu": [], "ring cpu": []}
            for algo in ("gloo", "ring"):
                fn(algo)  # warm-up: connections, buffers
            for _ in range(repeats):
                for algo in ("gloo", "ring"):
                    comm.barrier()
                    c0, t0 = time.process_time(), time.perf_counter()
                    fn(algo)
                    samples[algo].append(time.perf_counter() - t0)
                    samples[algo + " cpu"].append(time.process_time() - c0)
            out[(op, nbytes)] = samples
            full.fill_(1.0)
        if world_size > 1:
            exchange()  # warm-up
            ceiling = []
            for _ in range(2 * repeats):
                comm.barrier()
                t0 = time.perf_counter()
                exchange()
                ceiling.append(time.perf_counter() - t0)
            out[("exchange", nbytes)] = ceiling
        comm.drop_records()
    return out


def collective_rows(world_sizes, sizes, repeats) -> list[dict]:
    """ring / gloo bus bandwidth per op, size and world size, with two diagnoses computed from
    the same runs: the ring's fastest bus bandwidth against the pace of its bare point-to-point
    steps (2(N-1) exchanges of S/N back to back, nothing reduced: what the messages alone cost),
    and how busy the CPUs were (Σ process CPU over ranks ÷ (wall × cores)): near 1 the copies
    through the loopback sockets, not the algorithm, set the pace, and both algorithms share it."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rows = []
    for n in progress(world_sizes, desc="collectives, world sizes"):
        per_rank = launch(collectives_worker, n, sizes, repeats, timeout=900)
        for (op, nbytes) in per_rank[0]:
            if op == "exchange":
                continue
            slow = {a: [max(r[(op, nbytes)][a][i] for r in per_rank) for i in range(repeats)]
                    for a in ("gloo", "ring")}  # the slowest rank of each repeat
            cpu = {a: statistics.median(sum(r[(op, nbytes)][a + " cpu"][i] for r in per_rank)
                                        for i in range(repeats)) for a in ("gloo", "ring")}
            ratios = [g / m for g, m in zip(slow["gloo"], slow["ring"])]
            busbw = cost.bus_bandwidth(nbytes, min(slow["ring"]), n, op) / 1e9
            detail = (f"ring {busbw:.2f} GB/s (fastest), gloo "
                      f"{cost.bus_bandwidth(nbytes, min(slow['gloo']), n, op) / 1e9:.2f}")
            if ("exchange", nbytes) in per_rank[0]:
                step = min(max(r[("exchange", nbytes)][i] for r in per_rank)
                           for i in range(2 * repeats))
                pace = 2 * (n - 1) * nbytes / n / step / 1e9  # GB/s one way per rank
                gloo_busbw = cost.bus_bandwidth(nbytes, min(slow["gloo"]), n, op) / 1e9
                detail += (f"; bare ring steps {pace:.2f} GB/s: ring at {busbw / pace:.0%}, gloo "
                           f"at {gloo_busbw / pace:.0%}")
            busy = cpu["ring"] / (statistics.median(slow["ring"]) * min(n, cores))
            detail += (f"; CPUs {busy:.0%} busy during the ring, ring used "
                       f"{cpu['ring'] / cpu['gloo']:.2f}× gloo's CPU time")
            rows.append({"chapter": "core", "name": f"ring/gloo busbw {op} {nbytes // MB} MB N={n}",
                         "ratio": statistics.median(ratios), "low": min(ratios),
                         "high": max(ratios), "detail": detail})
    return rows


# ----------------------------------------------------------------------------- scheme pairs
def pair_rows(pairs, repeats: int, steps: int) -> list[dict]:
    """pairs: (chapter, name, kwargs of A, kwargs of B); ratio = step(B) / step(A)."""
    from parlab.engine.runner import run

    rows = []
    for chapter, name, a, b in progress(pairs, desc="pairs"):
        ratios = []
        for _ in range(repeats):
            t_a = step_seconds(run(steps=steps, **a))
            t_b = step_seconds(run(steps=steps, **b))
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
    ]


def main(argv: list[str], sections: dict | None = None) -> int:
    """`sections`: more rows by name, each a function (repeats, steps) -> rows, from the layers
    above this one (`python -m parlab` passes the pipeline chapter's `headline_rows`)."""
    sections = sections or {}
    parser = argparse.ArgumentParser(prog="python -m parlab bench all")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per row")
    parser.add_argument("--collective-repeats", type=int, default=7)
    parser.add_argument("--section-repeats", type=int, default=5,
                        help="interleaved repeats of the rows passed in (the pipeline's: gains of "
                        "5–10%% beside ±10%% noise per repeat on a shared machine)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--link", default="1GbE", help="emulated link of the scheme pairs")
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    own = ("collectives", "pairs", "dp-regimes", "async-tp", "ring-attention")
    parser.add_argument("--only", nargs="+", choices=own + tuple(sections),
                        default=own + tuple(sections))
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
        rows += dp_regime_rows(args.repeats, max(args.steps, 8))  # 7 measured steps per run
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
    for name, section in sections.items():
        if name in args.only:
            rows += section(args.section_repeats, max(args.steps, 5))
    width = max(len(r["name"]) for r in rows)
    print(f"{'chapter':16s} {'comparison':{width}s} {'ratio':>6s}  {'range':>13s}  detail")
    for r in rows:
        print(f"{r['chapter']:16s} {r['name']:{width}s} {r['ratio']:6.2f}  "
              f"[{r['low']:.2f}..{r['high']:.2f}]  {r['detail']}")
    print(f"({time.perf_counter() - t0:.0f} s; ratios > 1: the first named is faster, or the "
          "fraction of link time hidden; rows named '(points)': percentage points)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0
