"""Chapter 00's appendix and `python -m parlab bench core`: the all-reduce sweep on this machine's
loopback, on the wall clock (this CPU, raw, on purpose): how a real measurement is made.

Each size is timed on the slowest rank after a barrier, after untimed warm-ups, over several
repeats; the fastest repeat is kept (an op cannot run faster than it costs) and the share of
repeats more than 2× slower is reported beside it (on a shared machine a repeat can wait
milliseconds for a descheduled peer or a delayed ACK: docs/measurements.md). algbw and busbw as
NVIDIA nccl-tests define them (doc/PERFORMANCE.md); the fit: `fits.fit_and_check`.
"""

from __future__ import annotations

import statistics
import time

import torch

from parlab.core import cost
from parlab.core.comm import Comm
from parlab.core.explore.fits import fit_and_check
from parlab.core.launch import launch
from parlab.core.progress import progress as bar

ALGOS = ("ring", "tree", "naive", "gloo")
CLOCK = "this CPU, raw (the wall clock), on purpose: gloo over loopback"


def sweep_worker(rank: int, world_size: int, sizes: list[int], algos: list[str], repeats: int,
                 warmup: int = 2):
    """Time each all-reduce: barrier, op, stop; `warmup` untimed first; per-repeat seconds."""
    comm = Comm()
    times: dict = {}
    for nbytes in sizes:
        tensor = torch.ones(max(nbytes // 4, 1))  # (S/4,) float32
        for algo in algos:
            for _ in range(warmup):  # connections, allocations, caches
                comm.all_reduce(tensor, algo=algo)
            samples = []
            for _ in range(repeats):
                comm.barrier()
                t0 = time.perf_counter()
                comm.all_reduce(tensor, algo=algo)
                samples.append(time.perf_counter() - t0)
            times[(nbytes, algo)] = samples
        comm.drop_records()  # a sweep's ledger would be huge; the bytes are in the tests
    return times


def sweep(world_sizes=(2, 4), sizes=None, algos=ALGOS, repeats: int = 9, progress=None,
          warmup: int = 2) -> list:
    """All-reduce time per (world size, bytes, algo): the slowest rank of each repeat; `seconds`
    the fastest of them, `median_s` their median, `stalled` the share more than 2× `seconds`."""
    sizes = list(sizes or [2 ** k for k in range(10, 27, 2)])  # 1 KB .. 64 MB
    rows = []
    for n in bar(world_sizes, desc="all-reduce sweep, world sizes"):
        per_rank = launch(sweep_worker, n, sizes, list(algos), repeats, warmup, timeout=1800)
        for key in per_rank[0]:
            slowest = [max(rank_times[key][i] for rank_times in per_rank) for i in range(repeats)]
            seconds = min(slowest)
            nbytes, algo = key
            rows.append({"world_size": n, "bytes": nbytes, "algo": algo, "seconds": seconds,
                         "median_s": statistics.median(slowest),
                         "stalled": sum(t > 2 * seconds for t in slowest) / repeats,
                         "algbw_GBps": nbytes / seconds / 1e9,
                         "busbw_GBps": cost.bus_bandwidth(nbytes, seconds, n) / 1e9})
        if progress is not None:
            progress(n)
    return rows


def print_fits(rows: list, world_sizes, algos=ALGOS) -> dict:
    """Every (world size, algo) fit with its held-out error; a fit typically off by > 2× on the
    sizes it has not seen is flagged: not a prediction."""
    print(f"clock: {CLOCK}; α-β fits on every other size, judged on the rest")
    fits = {}
    for n in world_sizes:
        for algo in algos:
            fit, _ = fit_and_check(rows, n, algo)
            fits[(n, algo)] = fit
            flag = "" if fit.reliable else "  FLAGGED: not a prediction"
            bound = "" if fit.beta < cost.BETA_BOUNDS[1] * (1 - 1e-9) else " (the fit's bound)"
            print(f"N={n} {algo:<5} α = {fit.alpha * 1e6:7.1f} µs/round  β = {fit.beta / 1e9:6.3f} "
                  f"GB/s{bound}  held-out error {fit.held_out_error:4.0%} (median; worst "
                  f"{fit.worst_error:.0%}){flag}")
    return fits


def show(rows: list, world_sizes) -> dict:
    """The appendix's printout: per (N, algo) the fastest repeat and the median at the largest
    size and the share of stalled repeats, the fits, and at the largest size whether the ring's
    time follows its bytes against the tree's (on a CPU it need not: each implementation's own
    work around its messages and the machine's load are in the time)."""
    print(f"clock: {CLOCK}")
    for n in world_sizes:
        largest = max(r["bytes"] for r in rows if r["world_size"] == n)
        at = {r["algo"]: r for r in rows if r["world_size"] == n and r["bytes"] == largest}
        stalled = {a: statistics.mean(r["stalled"] for r in rows if r["world_size"] == n
                                      and r["algo"] == a) for a in at}
        print(f"N={n}, {largest:,} B: the fastest repeat, the median, and the share of repeats "
              "more than 2× the fastest over all sizes")
        for a, r in at.items():
            print(f"  {a:<5} {r['seconds'] * 1e3:8.2f} ms {r['median_s'] * 1e3:8.2f} ms   "
                  f"{stalled[a]:4.0%} stalled")
        sent = {a: max(form(largest // 4, n, k)[0] for k in range(n)) for a, form in
                (("ring", cost.ring_all_reduce), ("tree", cost.tree_all_reduce))}
        ratio_t, ratio_b = at["ring"]["seconds"] / at["tree"]["seconds"], sent["ring"] / sent["tree"]
        if ratio_b == 1:
            verdict = "equal bytes: the time's difference is each implementation's own work and load"
        elif (ratio_t < 1) == (ratio_b < 1):
            verdict = "the time follows the bytes"
        else:
            verdict = "the time does NOT follow the bytes (this CPU's per-message work and load, not a link)"
        print(f"  ring ÷ tree: time {ratio_t:.2f}×, bytes on the busiest rank {ratio_b:.2f}×: {verdict}")
    return print_fits(rows, world_sizes)
