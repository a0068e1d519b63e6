"""Chapter 00 — what the notebook runs: collectives shown on tiny tensors, checked against gloo,
timed over a size sweep, fitted with the α-β model, and slowed down by an emulated link.

Bandwidths follow NVIDIA nccl-tests (doc/PERFORMANCE.md): algbw = S / t; busbw = algbw ·
2(N-1)/N for all-reduce, the number to compare with a link's speed. The α-β model and the
algorithms' costs: Thakur, Rabenseifner & Gropp, IJHPCA 2005 (see parlab/cost.py).
"""

from __future__ import annotations

import statistics
import time

import torch

from parlab.core import cost
from parlab.core.comm import Comm
from parlab.core.launch import launch

ALGOS = ("ring", "tree", "naive", "gloo")


# ----------------------------------------------------------------------------- in the ranks
def show_collectives_worker(rank: int, world_size: int) -> dict:
    """Every collective on a tiny tensor whose entries say which rank made them."""
    comm = Comm()
    mine = torch.arange(4, dtype=torch.float32) + 10 * rank  # rank r holds [10r, 10r+1, ...]
    out = {"input": mine.tolist()}
    out["all_reduce (ring)"] = comm.all_reduce(mine.clone(), algo="ring").tolist()
    out["reduce_scatter (ring)"] = comm.reduce_scatter(mine.clone(), algo="ring").tolist()
    out["all_gather (ring)"] = comm.all_gather(mine[:1].clone(), algo="ring").tolist()
    out["broadcast from 0"] = comm.broadcast(mine.clone(), src=0).tolist()
    sends = [torch.tensor([10.0 * rank + j]) for j in range(world_size)]  # block j goes to rank j
    out["all_to_all (pairwise)"] = [t.item() for t in comm.all_to_all(sends, algo="pairwise")]
    out["ledger"] = comm.ledger.records
    out["timeline"] = comm.timeline.records()
    return out


def equality_worker(rank: int, world_size: int, lengths: list[int], seed: int) -> list[dict]:
    """Hand-written all-reduce, reduce-scatter and all-gather vs gloo's on random data."""
    comm = Comm()
    rows = []
    for numel in lengths:
        g = torch.Generator().manual_seed(seed + 7919 * rank + numel)
        data = torch.randn(numel, generator=g, dtype=torch.float64)
        reference = comm.all_reduce(data.clone(), algo="gloo")
        for algo in ("ring", "tree", "naive"):
            mine = comm.all_reduce(data.clone(), algo=algo)
            rows.append({"op": "all_reduce", "algo": algo, "numel": numel,
                         "max_abs_diff": (mine - reference).abs().max().item()})
        shard_gloo = comm.reduce_scatter(data.clone(), algo="gloo")
        shard_ring = comm.reduce_scatter(data.clone(), algo="ring")
        rows.append({"op": "reduce_scatter", "algo": "ring", "numel": numel, "max_abs_diff":
                     (shard_gloo - shard_ring).abs().max().item() if shard_ring.numel() else 0.0})
        sizes = cost.shard_sizes(numel, world_size)
        piece = data[:sizes[rank]].clone()
        full_gloo = comm.all_gather(piece, sizes=sizes, algo="gloo")
        full_ring = comm.all_gather(piece, sizes=sizes, algo="ring")
        rows.append({"op": "all_gather", "algo": "ring", "numel": numel,
                     "max_abs_diff": (full_gloo - full_ring).abs().max().item()})
    return rows


def sweep_worker(rank: int, world_size: int, sizes: list[int], algos: list[str], repeats: int):
    """Time each all-reduce: barrier, op, stop; one warm-up; per-repeat seconds of this rank."""
    comm = Comm()
    times: dict = {}
    for nbytes in sizes:
        tensor = torch.ones(max(nbytes // 4, 1))  # float32
        for algo in algos:
            comm.all_reduce(tensor, algo=algo)  # warm-up: connections, allocations
            samples = []
            for _ in range(repeats):
                comm.barrier()
                t0 = time.perf_counter()
                comm.all_reduce(tensor, algo=algo)
                samples.append(time.perf_counter() - t0)
            times[(nbytes, algo)] = samples
        comm.ledger.records.clear()  # a sweep's ledger would be huge; the bytes are in the tests
    return times


def link_worker(rank: int, world_size: int, nbytes: int, algo: str) -> dict:
    """One all-reduce on whatever link the launch was given; its time and its ledger record."""
    comm = Comm()
    tensor = torch.ones(nbytes // 4)
    comm.all_reduce(tensor, algo=algo)  # warm-up
    comm.barrier()
    t0 = time.perf_counter()
    comm.all_reduce(tensor, algo=algo)
    return {"seconds": time.perf_counter() - t0, "record": comm.ledger.records[-1],
            "timeline": comm.timeline.records()}


# ----------------------------------------------------------------------------- in the notebook
def show_collectives(world_size: int) -> dict:
    """Run `show_collectives_worker` and print what every rank holds after each collective."""
    results = launch(show_collectives_worker, world_size)
    for key in [k for k in results[0] if k not in ("ledger", "timeline")]:
        print(f"{key}:")
        for rank, res in enumerate(results):
            print(f"  rank {rank}: {res[key]}")
    return {"ledger": [r for res in results for r in res["ledger"]],
            "timeline": [e for res in results for e in res["timeline"]]}


def check_equal_to_gloo(world_size: int, lengths=(1, 3, 8, 37, 1000, 4099), seed: int = 0):
    """max |hand-written − gloo| over every length; match when all are float64 round-off."""
    rows = [row for res in launch(equality_worker, world_size, list(lengths), seed) for row in res]
    worst = max(row["max_abs_diff"] for row in rows)
    return {"match": worst < 1e-9, "max_abs_diff": worst, "rows": rows}


def sweep(world_sizes=(2, 4), sizes=None, algos=ALGOS, repeats: int = 5, progress=None) -> list:
    """Median all-reduce time per (world size, bytes, algo) with algbw and busbw (nccl-tests)."""
    sizes = list(sizes or [2 ** k for k in range(10, 27, 2)])  # 1 KB .. 64 MB
    rows = []
    for n in world_sizes:
        per_rank = launch(sweep_worker, n, sizes, list(algos), repeats, timeout=1800)
        for key in per_rank[0]:
            slowest = [max(rank_times[key][i] for rank_times in per_rank) for i in range(repeats)]
            seconds = statistics.median(slowest)
            nbytes, algo = key
            rows.append({"world_size": n, "bytes": nbytes, "algo": algo, "seconds": seconds,
                         "algbw_GBps": nbytes / seconds / 1e9,
                         "busbw_GBps": cost.bus_bandwidth(nbytes, seconds, n) / 1e9})
        if progress is not None:
            progress(n)
    return rows


def fit_and_check(rows: list, world_size: int, algo: str, held_out: int = 2):
    """Fit α, β on all but the `held_out` largest sizes; predict those. Returns (fit, table)."""
    mine = sorted((r for r in rows if r["world_size"] == world_size and r["algo"] == algo),
                  key=lambda r: r["bytes"])
    train = mine[:-held_out]
    fit = cost.fit_alpha_beta([r["bytes"] for r in train], [r["seconds"] for r in train],
                              world_size, algo)
    table = [{"bytes": r["bytes"], "measured_s": r["seconds"], "predicted_s": fit.predict(r["bytes"]),
              "used_in_fit": r in train} for r in mine]
    return fit, table


def link_comparison(world_size: int, nbytes: int, links=("loopback", "1GbE"), algo="ring"):
    """The same all-reduce on each link: measured seconds beside k·α + bytes/β of that link."""
    from parlab.core.link import PRESETS

    rows = []
    for name in links:
        link = PRESETS[name]
        res = launch(link_worker, world_size, nbytes, algo, link=None if link.is_free else link)
        record = res[0]["record"]
        predicted = None if link.is_free else link.cost(
            max(record["bytes_sent"], record["bytes_recv"]), record["rounds"])
        rows.append({"link": str(link), "measured_s": max(r["seconds"] for r in res),
                     "emulated_s": predicted, "bytes_sent_rank0": record["bytes_sent"],
                     "rounds": record["rounds"]})
    return rows


def show_all_reduce(world_size: int, size_kb: int = 64, algo: str = "ring") -> None:
    """Widget callback: one all-reduce; every rank's bytes beside the closed form, and the time."""
    res = launch(link_worker, world_size, size_kb * 1024, algo)
    numel = size_kb * 1024 // 4
    closed = {"ring": cost.ring_all_reduce, "gloo": cost.ring_all_reduce,
              "tree": cost.tree_all_reduce, "naive": cost.naive_all_reduce}[algo]
    print(f"{algo} all-reduce of {size_kb} KB on {world_size} rank(s): "
          f"{max(r['seconds'] for r in res) * 1e3:.2f} ms")
    for rank, r in enumerate(res):
        formula = closed(numel, world_size, rank)[0] * 4
        print(f"  rank {rank}: sent {r['record']['bytes_sent']:,} B (closed form {formula:,} B)")


def draw_ring_schedule(world_size: int, ax=None):
    """Which chunk each rank sends in each round of a ring all-reduce (RS rounds, then AG)."""
    import matplotlib.pyplot as plt

    n = world_size
    rounds = 2 * (n - 1)
    grid = [[((r - k - 1) % n if k < n - 1 else (r - (k - n + 1)) % n) for k in range(rounds)]
            for r in range(n)]
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.8 * rounds, 0.6 + 0.5 * n))
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9, aspect="auto")
    for r in range(n):
        for k in range(rounds):
            ax.text(k, r, f"c{grid[r][k]}", ha="center", va="center", color="white")
    ax.set_xticks(range(rounds), [f"RS {k}" if k < n - 1 else f"AG {k - n + 1}"
                                  for k in range(rounds)])
    ax.set_yticks(range(n), [f"rank {r} → {(r + 1) % n}" for r in range(n)])
    ax.set_title(f"ring all-reduce on {n} ranks: the chunk each rank sends in each round")
    return ax


def check_exercise(answer, numel: int, world_size: int, rank: int, algo: str) -> str:
    """Compare a reader's predicted bytes sent by `rank` with a real all-reduce's ledger."""
    launched = launch(link_worker, world_size, numel * 4, algo)
    measured = launched[rank]["record"]["bytes_sent"]
    if answer is None:
        return f"(no answer yet) the ledger says rank {rank} sent {measured:,} bytes"
    verdict = "correct" if int(answer) == measured else "not quite"
    return f"{verdict}: you said {int(answer):,} bytes, the ledger says {measured:,}"
