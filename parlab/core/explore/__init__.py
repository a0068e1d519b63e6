"""Chapter 00 — what the notebook runs: collectives shown on tiny tensors, checked against gloo, their
ledger bytes, and one all-reduce for the panel, every time on the paced A100 clock over a real link
(`parlab.core.clock`; NVLink 3 unless told). The sweep and α-β fit: `paced_sweep`; ring vs tree at
scale: `real_link`, `real_link_show`; the appendix on this CPU's loopback, raw: `loopback`.

Bandwidths follow NVIDIA nccl-tests (doc/PERFORMANCE.md); the algorithms' costs: Thakur,
Rabenseifner & Gropp, IJHPCA 2005 (see parlab/core/cost.py).
"""

from __future__ import annotations

import math

import torch

from parlab.core import cost, trace
from parlab.core.clock import Clock
from parlab.core.comm import Comm
from parlab.core.explore import real_link as rl
from parlab.core.launch import launch
from parlab.core.link import ACCELERATORS, real
from parlab.core.pacer import Pacer

ACCELERATOR, LINK = "A100", "NVLink3"


def paced_comm(link: str = LINK) -> Comm:
    """A world Comm over the real `link` keeping paced A100 time (`parlab.core.clock`)."""
    comm = Comm(link=real(link, ACCELERATOR))
    comm.timeline.pacer = Pacer(Clock(ACCELERATORS[ACCELERATOR]))
    return comm


# ----------------------------------------------------------------------------- in the ranks
def show_collectives_worker(rank: int, world_size: int) -> dict:
    """Every collective on a tiny tensor whose entries say which rank made them (paced A100 time
    over NVLink 3: the timeline is in A100 seconds)."""
    comm = paced_comm()
    mine = torch.arange(4, dtype=torch.float32) + 10 * rank  # rank r holds [10r, 10r+1, ...]
    out = {"input": mine.tolist()}
    out["all_reduce (ring)"] = comm.all_reduce(mine.clone(), algo="ring").tolist()
    out["reduce_scatter (ring)"] = comm.reduce_scatter(mine.clone(), algo="ring").tolist()
    out["all_gather input: the first entry"] = mine[:1].tolist()
    out["all_gather (ring)"] = comm.all_gather(mine[:1].clone(), algo="ring").tolist()
    out["broadcast from 0"] = comm.broadcast(mine.clone(), src=0).tolist()
    sends = [torch.tensor([10.0 * rank + j]) for j in range(world_size)]  # block j goes to rank j
    out["all_to_all input: block j goes to rank j"] = [t.item() for t in sends]
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


def link_worker(rank: int, world_size: int, nbytes: int, algo: str, link: str = LINK) -> dict:
    """One all-reduce of `nbytes` on paced A100s over the real `link`: its paced seconds (A100 time)
    and its ledger record."""
    comm = paced_comm(link)
    tensor = torch.ones(nbytes // 4)  # (S/4,) float32
    comm.barrier()  # every rank starts at the same virtual time
    t0 = comm.timeline.now()
    comm.all_reduce(tensor, algo=algo)
    return {"seconds": comm.timeline.now() - t0, "record": comm.ledger.records[-1]}


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


def show_timeline(shown: dict, world_size: int, link: str = LINK):
    """Section 2's ops on the paced clock: for each op, the time from its last rank's post to rank
    0's end beside k·α + b/β of rank 0's ledger record (k rounds, b the busier direction's bytes),
    the verdict over every rank; then every rank's timeline."""
    from parlab import viz
    from parlab.core.explore.paced_sweep import clock_line

    lk = real(link, ACCELERATOR)
    events = [[e for e in shown["timeline"] if e["rank"] == q and e["kind"] == "comm"]
              for q in range(world_size)]
    records = [[r for r in shown["ledger"] if r["rank"] == q] for q in range(world_size)]
    print(f"clock: {clock_line(link)}")
    held = total = 0
    for i in range(len(events[0])):
        posted = max(events[q][i]["t0"] for q in range(world_size))  # the last rank's post
        for q in range(world_size):
            rec = records[q][i]
            b = max(rec["bytes_sent"], rec["bytes_recv"])
            took, price = events[q][i]["t1"] - posted, lk.cost(b, rec["rounds"])
            held, total = held + math.isclose(took, price, rel_tol=1e-9), total + 1
            if q == 0:
                print(f"  {rec['op']:<15} rank 0 ends {took * 1e6:8.5f} µs after the last rank posted "
                      f"it; k = {rec['rounds']}, b = {b:>2} B: k·α + b/β = {price * 1e6:8.5f} µs")
    print(f"every rank's end = the last post + k·α + b/β of its own ledger record at {held} of "
          f"{total} (rank, op): " + ("holds" if held == total else "does NOT hold"))
    return viz.timeline(trace.normalize(shown["timeline"]),
                        title=f"the collectives of section 2 on {world_size} ranks, paced A100 time")


def check_equal_to_gloo(world_size: int, lengths=(1, 3, 8, 37, 1000, 4099), seed: int = 0):
    """max |hand-written − gloo| over every length; match when all are float64 round-off."""
    rows = [row for res in launch(equality_worker, world_size, list(lengths), seed) for row in res]
    worst = max(row["max_abs_diff"] for row in rows)
    return {"match": worst < 1e-9, "max_abs_diff": worst, "rows": rows}


def show_all_reduce(world_size: int, size_kb: int = 64, algo: str = "ring", link: str = LINK) -> None:
    """Widget callback: one all-reduce on paced A100s over `link`; its time beside the clock's price
    and Thakur's, every rank's bytes beside the closed form, and which algorithm the clock prices
    fastest at this size."""
    from parlab.core.explore.paced_sweep import clock_line
    from parlab.core.explore.real_link_show import _ms

    nbytes = size_kb * 1024
    res = launch(rl.paced_worker, world_size, [nbytes], link, (algo,), 1 << 20)
    numel = nbytes // 4
    took = max(r[(algo, nbytes)][0] for r in res)
    print(f"clock: {clock_line(link)}; above 1 MB shapes-only")
    print(f"{algo} all-reduce of {size_kb:,} KB on {world_size} ranks: {_ms(took)} (the clock's price "
          f"from the bytes: {_ms(rl.priced(algo, world_size, nbytes, link))}; Thakur's closed form: "
          f"{_ms(rl.thakur(algo, world_size, nbytes, link))})")
    for rank, r in enumerate(res):
        formula = rl.BYTES[algo](numel, world_size, rank)[0] * 4
        print(f"  rank {rank}: sent {r[(algo, nbytes)][1]:,} B (closed form {formula:,} B)")
    prices = {a: rl.priced(a, world_size, nbytes, link) for a in rl.ALGOS}
    best = [a for a in rl.ALGOS if prices[a] <= min(prices.values()) * (1 + 1e-12)]
    print(f"fastest here on the clock's price: {' = '.join(best)} ({_ms(prices[best[0]])}); "
          + (f"{algo} is one of them" if algo in best else f"{algo} takes {took / prices[best[0]]:.2f}×"))


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
