"""Chapter 00 — what the notebook runs: collectives shown on tiny tensors, checked against gloo,
timed over a size sweep, fitted with the α-β model, and slowed down by an emulated link.

Bandwidths follow NVIDIA nccl-tests (doc/PERFORMANCE.md): algbw = S / t; busbw = algbw ·
2(N-1)/N for all-reduce, the number to compare with a link's speed. The α-β model and the
algorithms' costs: Thakur, Rabenseifner & Gropp, IJHPCA 2005 (see parlab/core/cost.py).
"""

from __future__ import annotations

import statistics
import time

import torch

from parlab.core import cost
from parlab.core.comm import Comm
from parlab.core.launch import launch
from parlab.core.progress import progress as bar

ALGOS = ("ring", "tree", "naive", "gloo")


# ----------------------------------------------------------------------------- in the ranks
def show_collectives_worker(rank: int, world_size: int) -> dict:
    """Every collective on a tiny tensor whose entries say which rank made them."""
    comm = Comm()
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


def sweep_worker(rank: int, world_size: int, sizes: list[int], algos: list[str], repeats: int,
                 warmup: int = 2):
    """Time each all-reduce: barrier, op, stop; `warmup` untimed first; per-repeat seconds."""
    comm = Comm()
    times: dict = {}
    for nbytes in sizes:
        tensor = torch.ones(max(nbytes // 4, 1))  # float32
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


def undisturbed(samples: list[float], quantile: float = 0.0) -> float:
    """The `quantile` of `samples` (the fastest by default): the time of an op that was not
    stalled. On a shared 2-core machine many samples wait several ms for a descheduled peer or a
    delayed ACK (docs/measurements.md), at some sizes more than half of them, so the median
    measures the stalls, not the algorithm; an op cannot run faster than its cost, so the fastest
    repeat is the α-β model's quantity. The stalls are reported beside it (`stalled`)."""
    ordered = sorted(samples)
    return ordered[min(int(quantile * len(ordered)), len(ordered) - 1)]


def sweep(world_sizes=(2, 4), sizes=None, algos=ALGOS, repeats: int = 9, progress=None,
          warmup: int = 2, quantile: float = 0.0) -> list:
    """All-reduce time per (world size, bytes, algo): the slowest rank of each repeat, after
    `warmup` untimed ones; `seconds` is their `quantile` (`undisturbed`), `median_s` the median,
    `stalled` the share of repeats more than 2× `seconds` (what the machine's load did). algbw and
    busbw as nccl-tests define them."""
    sizes = list(sizes or [2 ** k for k in range(10, 27, 2)])  # 1 KB .. 64 MB
    rows = []
    for n in bar(world_sizes, desc="all-reduce sweep, world sizes"):
        per_rank = launch(sweep_worker, n, sizes, list(algos), repeats, warmup, timeout=1800)
        for key in per_rank[0]:
            slowest = [max(rank_times[key][i] for rank_times in per_rank) for i in range(repeats)]
            seconds = undisturbed(slowest, quantile)
            nbytes, algo = key
            rows.append({"world_size": n, "bytes": nbytes, "algo": algo, "seconds": seconds,
                         "median_s": statistics.median(slowest),
                         "stalled": sum(t > 2 * seconds for t in slowest) / repeats,
                         "algbw_GBps": nbytes / seconds / 1e9,
                         "busbw_GBps": cost.bus_bandwidth(nbytes, seconds, n) / 1e9})
        if progress is not None:
            progress(n)
    return rows


def fit_and_check(rows: list, world_size: int, algo: str, held_out="alternate"):
    """Fit α, β on part of the sizes and judge the fit on the rest. Returns (fit, table).

    held_out: "alternate" leaves every other size out (1st, 3rd, ... fitted; 2nd, 4th, ...
    predicted, the largest among them when the count is even); an int k leaves the k largest
    out (extrapolation). `fit.held_out_error` is the largest relative error on the left-out sizes;
    `fit.reliable` is False when one of them is off by more than 2× (`cost.FLAG_RATIO`).
    """
    mine = sorted((r for r in rows if r["world_size"] == world_size and r["algo"] == algo),
                  key=lambda r: r["bytes"])
    if held_out == "alternate":
        train = mine[0::2]
    elif isinstance(held_out, int) and 0 < held_out <= len(mine) - 2:
        train = mine[:-held_out]
    else:
        raise ValueError(f"held_out={held_out!r} must be 'alternate' or an int in "
                         f"[1, {len(mine) - 2}]")
    test = [r for r in mine if r not in train]
    fit = cost.fit_alpha_beta([r["bytes"] for r in train], [r["seconds"] for r in train],
                              world_size, algo)
    fit.held_out([r["bytes"] for r in test], [r["seconds"] for r in test])
    table = [{"bytes": r["bytes"], "measured_s": r["seconds"], "predicted_s": fit.predict(r["bytes"]),
              "used_in_fit": r in train} for r in mine]
    return fit, table


def print_fits(rows: list, world_sizes, algos=ALGOS, per_size: bool = True) -> dict:
    """Every (world size, algo) fit with its held-out error; a fit off by > 2× is flagged, and its
    predictions are not printed as predictions. These are this CPU's own α and β, raw (gloo on
    loopback): the per-message software overhead they measure is the lesson, so they are not paced."""
    print("this CPU, raw: gloo's own α-β on loopback")
    fits = {}
    for n in world_sizes:
        for algo in algos:
            fit, table = fit_and_check(rows, n, algo)
            fits[(n, algo)] = fit
            verdict = ("" if fit.reliable else
                       f"\n    FLAGGED: typically off by > {cost.FLAG_RATIO:g}× on held-out sizes — "
                       "not a prediction")
            print(f"N={n} {algo:<5} α = {fit.alpha * 1e6:6.1f} µs/round  β = {fit.beta / 1e9:6.3f} GB/s"
                  f"  held-out error {fit.held_out_error:4.0%} (median; worst {fit.worst_error:.0%})"
                  f"{verdict}")
            for t in table if per_size else ():  # the notebook draws them (`draw_fits`)
                tag = "fit     " if t["used_in_fit"] else "held out"
                label = "model" if fit.reliable or t["used_in_fit"] else "model (unreliable)"
                print(f"    {t['bytes']:>9,} B ({tag}): measured {t['measured_s'] * 1e3:8.3f} ms, "
                      f"{label} {t['predicted_s'] * 1e3:8.3f} ms")
    return fits


def draw_fits(rows: list, world_sizes, fits: dict, algos=ALGOS):
    """Measured seconds against bytes, log-log, one panel per world size: the sizes the fit used
    (filled) and the ones it predicts (hollow), beside each algorithm's fitted α-β line."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(world_sizes), figsize=(6 * len(world_sizes), 3.8), squeeze=False)
    worst = 0.0
    for ax, n in zip(axes[0], world_sizes):
        for k, algo in enumerate(algos):
            fit, table = fit_and_check(rows, n, algo)
            color = f"C{k}"
            xs = [t["bytes"] for t in table]
            ax.plot(xs, [fit.predict(x) * 1e3 for x in xs], "-", color=color, lw=1,
                    label=f"{algo}: α {fit.alpha * 1e6:.0f} µs, β {fit.beta / 1e9:.2f} GB/s")
            for used in (True, False):
                pts = [t for t in table if t["used_in_fit"] == used]
                ax.plot([t["bytes"] for t in pts], [t["measured_s"] * 1e3 for t in pts], "o",
                        color=color, markersize=4, fillstyle="full" if used else "none")
            worst = max(worst, fits[(n, algo)].held_out_error)
        ax.set(xscale="log", yscale="log", xlabel="bytes all-reduced", ylabel="ms (fastest repeat)",
               title=f"N={n}: filled = fitted, hollow = predicted")
        ax.legend(fontsize=7)
    fig.suptitle(f"α-β fits on loopback (this CPU, raw): median held-out errors up to {worst:.0%}",
                 fontsize=10)
    fig.tight_layout()
    return fig


def same_cost_at(rows: list, world_size: int, algos=ALGOS) -> None:
    """At the largest size swept: each algorithm's bytes on the busiest rank and its rounds (the
    closed forms) beside its measured time; where bytes and rounds are equal, the spread is each
    implementation's own work around the messages, which the α-β model does not see."""
    size = max(r["bytes"] for r in rows if r["world_size"] == world_size)
    numel = size // 4
    forms = {"ring": cost.ring_all_reduce, "tree": cost.tree_all_reduce,
             "naive": cost.naive_all_reduce}
    measured = {r["algo"]: r["seconds"] for r in rows
                if r["world_size"] == world_size and r["bytes"] == size and r["algo"] in algos}
    shapes = {}
    print(f"N={world_size}, {size / 2**20:g} MiB:")
    for algo, t in sorted(measured.items(), key=lambda kv: kv[1]):
        if algo in forms:
            busiest = max(forms[algo](numel, world_size, r) for r in range(world_size))
            shapes[algo] = (busiest[0], busiest[2])
            print(f"  {algo:<5} {t * 1e3:7.1f} ms   busiest rank sends {4 * busiest[0]:>12,} B in "
                  f"{busiest[2]} rounds")
        else:
            print(f"  {algo:<5} {t * 1e3:7.1f} ms   (gloo's own algorithm)")
    slowest = max(measured, key=measured.get)
    if len(set(shapes.values())) == 1 and len(shapes) > 1:
        print(f"  our {', '.join(shapes)} send the same bytes in the same rounds here, yet {slowest} is "
              f"{measured[slowest] / min(measured.values()):.2f}× the fastest: the difference is "
              "each implementation's own work around the messages, not the network"
              + (" (the ring cuts the tensor into N chunks and copies and reduces them chunk by "
                 "chunk in Python)" if slowest == "ring" else "")
              + ", and this machine's load — the ring's advantage, 2(N−1)/N·S against the root's "
              "(N−1)·S, only appears from N = 3 on")
    else:
        print(f"  slowest: {slowest}; the algorithms differ in bytes or rounds here (closed forms above)")


def link_comparison(world_size: int, nbytes: int, links=("loopback", "1GbE"), algo="ring"):
    """The same all-reduce on each link (a preset name or a `parlab.core.link.Link`): measured
    seconds beside k·α + bytes/β of that link."""
    from parlab.core.link import PRESETS, Link

    rows = []
    for name in links:
        link = name if isinstance(name, Link) else PRESETS[name]
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
    if world_size == 1:
        print("  one rank already holds the sum: nothing crosses a link (choose 2 or more ranks)")


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
