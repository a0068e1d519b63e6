"""Chapter 00's latency / bandwidth sweep and α-β fit, on paced A100 time over one real link.

The hand-written ring, tree and naive all-reduce (`parlab.core.collectives`) run at every size from
1 KB to 1 GB (×4 steps) on N paced A100s over a real, undilated link (`real_link.paced_worker`:
real data up to `REAL_MAX`, shapes-only above, where the clock prices the same bytes). Reported as
NVIDIA nccl-tests does (doc/PERFORMANCE.md): algbw = S/t, busbw = algbw·2(N−1)/N.

The α-β fit of each algorithm's closed form (Thakur, Rabenseifner & Gropp, IJHPCA 2005;
`fits.fit_and_check`) is made on every other size and judged on the rest. The paced clock prices
an op at k·α + b/β, b the busiest rank's busier direction (its ledger's bytes): every edge at once,
as a pipelined algorithm would. Where Thakur's form charges the bytes one phase after another (a
tree's levels, the naive root's gather then broadcast), the fit reads β off by the ratio of the two
byte counts; `show_fits` computes it, and refits with the clock's own form to recover the link.
"""

from __future__ import annotations

import math

import numpy as np

from parlab.core import cost
from parlab.core.explore import real_link as rl
from parlab.core.explore.fits import draw_fits, fit_and_check
from parlab.core.explore.real_link_show import _size
from parlab.core.launch import launch

SIZES = tuple(1024 * 4 ** k for k in range(11))  # 1 KB, 4 KB, ..., 1 GB
REAL_MAX = 1 << 20  # real tensors up to 1 MB, shapes-only above: the clock prices bytes, not values
BETA_BOUNDS = (1e6, 1e14)  # wide: a fit may read β above the link's (`show_fits` says why)


def clock_line(link: str) -> str:
    lk = rl.real(link, rl.ACCELERATOR)
    return (f"paced {rl.ACCELERATOR} time (parlab.core.clock) over {lk.name}, real and undilated "
            f"(α = {lk.latency_s * 1e6:g} µs, β = {lk.bandwidth_Bps / 1e9:g} GB/s per direction)")


def sizes_to(max_mb: int) -> list[int]:
    """The sweep's sizes up to `max_mb` MiB."""
    return [s for s in SIZES if s <= max_mb << 20]


def busiest(algo: str, n: int, nbytes: int) -> tuple[int, int]:
    """(rounds, bytes of the busiest rank's busier direction): what the clock charges, from
    `parlab.core.cost`'s exact counts (float32)."""
    counts = [rl.BYTES[algo](nbytes // 4, n, r) for r in range(n)]
    return counts[0][2], max(max(sent, recv) for sent, recv, _ in counts) * 4


def thakur_bytes(algo: str, n: int) -> float:
    """The multiple of S that Thakur's closed form sends one transfer after another."""
    return {"ring": 2 * (n - 1) / n, "tree": 2 * cost.tree_depth(n), "naive": 2 * (n - 1)}[algo]


def sweep(world_sizes=(4, 8, 16), link: str = rl.INTRA, max_mb: int = 1024,
          real_max: int = REAL_MAX) -> list[dict]:
    """Every algorithm at every size on each world size, one launch per N; per row the op's paced
    time (its slowest rank), algbw and busbw, the clock's price from `cost`'s bytes, Thakur's form,
    and whether every rank's ledger bytes equal the closed form."""
    sizes, rows = sizes_to(max_mb), []
    for n in world_sizes:
        ranks = launch(rl.paced_worker, n, sizes, link, rl.ALGOS, real_max, timeout=600.0)
        for nbytes in sizes:
            for algo in rl.ALGOS:
                t = max(r[(algo, nbytes)][0] for r in ranks)
                rounds, heaviest = busiest(algo, n, nbytes)
                rows.append({"world_size": n, "bytes": nbytes, "algo": algo, "seconds": t,
                             "algbw_GBps": nbytes / t / 1e9,
                             "busbw_GBps": cost.bus_bandwidth(nbytes, t, n) / 1e9,
                             "priced_s": rl.priced(algo, n, nbytes, link),
                             "thakur_s": rl.thakur(algo, n, nbytes, link), "rounds": rounds,
                             "busiest_bytes": heaviest, "link": link,
                             "bytes_ok": all(r[(algo, nbytes)][1] == rl.BYTES[algo](nbytes // 4, n, k)[0] * 4
                                             for k, r in enumerate(ranks))})
    return rows


def show_sweep(rows: list[dict]) -> dict:
    """Print the sweep's times (µs) per size, N and algorithm, the verdicts (paced run = the clock's
    price, ledger = closed form) and busbw at the largest size against the link's β."""
    link = rows[0]["link"]
    beta = rl.real(link, rl.ACCELERATOR).bandwidth_Bps
    ns = sorted({r["world_size"] for r in rows})
    sizes = sorted({r["bytes"] for r in rows})
    at = {(r["world_size"], r["algo"], r["bytes"]): r for r in rows}
    print(f"clock: {clock_line(link)}; data up to {_size(REAL_MAX)}, shapes-only above")
    print("all-reduce time (µs), the slowest rank's:")
    print(f"{'size':>8} " + " ".join(f"{f'N={n} {a}':>11}" for n in ns for a in rl.ALGOS))
    for s in sizes:
        print(f"{_size(s):>8} " + " ".join(f"{at[(n, a, s)]['seconds'] * 1e6:>11.4g}"
                                           for n in ns for a in rl.ALGOS))
    priced = sum(math.isclose(r["seconds"], r["priced_s"], rel_tol=1e-9) for r in rows)
    ledger = sum(r["bytes_ok"] for r in rows)
    print(f"paced run = the clock's price k·α + b/β from parlab.core.cost's bytes at {priced} of "
          f"{len(rows)}: {'holds' if priced == len(rows) else 'does NOT hold'}; every rank's ledger "
          f"bytes = the closed form at {ledger} of {len(rows)}")
    top = sizes[-1]
    print(f"busbw (nccl-tests: algbw·2(N−1)/N) at {_size(top)} against the link's β = "
          f"{beta / 1e9:g} GB/s:")
    for a in rl.ALGOS:
        print(f"  {a:<5} " + ", ".join(f"N={n}: {at[(n, a, top)]['busbw_GBps']:.4g} GB/s "
                                       f"({at[(n, a, top)]['busbw_GBps'] * 1e9 / beta:.1%})" for n in ns))
    return {"priced": priced, "ledger": ledger, "rows": len(rows),
            "ring_busbw": min(at[(n, "ring", top)]["busbw_GBps"] for n in ns) * 1e9 / beta}


def draw_bandwidths(rows: list[dict]):
    """algbw and busbw against size, one line per (algorithm, N), the link's β drawn across."""
    import matplotlib.pyplot as plt

    link = rows[0]["link"]
    beta = rl.real(link, rl.ACCELERATOR).bandwidth_Bps / 1e9
    ns = sorted({r["world_size"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for i, n in enumerate(ns):
        for k, algo in enumerate(rl.ALGOS):
            pts = sorted((r["bytes"], r["algbw_GBps"], r["busbw_GBps"]) for r in rows
                         if r["algo"] == algo and r["world_size"] == n)
            for ax, col in zip(axes, (1, 2)):
                ax.plot([p[0] for p in pts], [p[col] for p in pts], ("o-", "s--", "^:", "d-.")[i % 4],
                        color=f"C{k}", markersize=3, label=f"{algo}, N={n}")
    for ax, name in zip(axes, ("algorithm bandwidth S/t", "bus bandwidth algbw·2(N−1)/N")):
        ax.axhline(beta, color="gray", lw=0.8)
        ax.set(xscale="log", xlabel="message bytes", ylabel="GB/s", title=f"{name} ({link}, paced A100)")
    axes[1].text(axes[1].get_xlim()[0], beta, f" β = {beta:g} GB/s", va="bottom", fontsize=8)
    axes[0].legend(fontsize="small", ncol=len(ns))
    fig.tight_layout()
    return fig


def _ledger_form(rows: list[dict]) -> tuple[float, float]:
    """(α, β) of k·α + b/β fitted to `rows` by least relative squares, k the rounds and b the
    busiest rank's busier-direction bytes (the clock's own form)."""
    t = np.array([r["seconds"] for r in rows])
    a = np.stack([[r["rounds"] for r in rows], [r["busiest_bytes"] for r in rows]], 1) / t[:, None]
    (alpha, inv_beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return float(alpha), 1.0 / float(inv_beta)


def show_fits(rows: list[dict]) -> dict:
    """Fit Thakur's form of each (N, algorithm) on every other size, print α and β beside the
    link's and the held-out error; where β differs, the ratio of the byte counts that explains it;
    then the clock's own form refitted. Returns {(N, algo): AlphaBeta}."""
    link = rows[0]["link"]
    lk = rl.real(link, rl.ACCELERATOR)
    alpha0, beta0 = lk.latency_s, lk.bandwidth_Bps
    ns = sorted({r["world_size"] for r in rows})
    fits, why = {}, []
    print(f"clock: {clock_line(link)}; Thakur's forms fitted on every other size, judged on the rest")
    for n in ns:
        for algo in rl.ALGOS:
            fit, _ = fit_and_check(rows, n, algo, beta_bounds=BETA_BOUNDS)
            fits[(n, algo)] = fit
            print(f"N={n:<2} {algo:<5} α = {fit.alpha * 1e6:6.4g} µs/round ({fit.alpha / alpha0:.3f}× "
                  f"the link's)  β = {fit.beta / 1e9:6.4g} GB/s ({fit.beta / beta0:.3f}×)  held-out "
                  f"error {fit.held_out_error:.1e} (median; worst {fit.worst_error:.1e})"
                  + ("" if fit.reliable else "  FLAGGED: not a prediction"))
            if not math.isclose(fit.beta, beta0, rel_tol=1e-6):
                why.append((n, algo, fit))
    worst = max(f.held_out_error for f in fits.values())
    print(f"held-out error ≤ 1e-6 at every fit: {'holds' if worst <= 1e-6 else 'does NOT hold'} "
          f"(worst median {worst:.1e}): each form predicts the sizes it has not seen")
    if why:
        print("why a fit reads β off the link's: Thakur's form sends c_T·S one transfer after another "
              "(tree: ⌊log₂N⌋ levels up, then down, each carrying S; naive: N−1 transfers into the "
              "root, then N−1 out); the clock charges the busiest rank's busier direction once, c·S, "
              "every edge at once (as a pipelined algorithm would): β_fit/β = c_T/c")
    for n, algo, fit in why:
        top = max(r["bytes"] for r in rows if r["world_size"] == n)
        clock_c = busiest(algo, n, top)[1] / top
        expected = thakur_bytes(algo, n) / clock_c
        ok = math.isclose(fit.beta / beta0, expected, rel_tol=1e-6)
        print(f"  {algo:<5} N={n:<2}: c_T/c = {thakur_bytes(algo, n):g}/{clock_c:g} = {expected:.3f}, "
              f"fitted {fit.beta / beta0:.3f}: " + ("explained" if ok else "NOT explained"))
    own = {(n, a): _ledger_form([r for r in rows if r["world_size"] == n and r["algo"] == a])
           for n in ns for a in rl.ALGOS}
    link_ok = sum(math.isclose(x, alpha0, rel_tol=1e-6) and math.isclose(y, beta0, rel_tol=1e-6)
                  for x, y in own.values())
    print(f"refit with the clock's own form, k·α + b/β (k rounds, b the busiest rank's ledger bytes): "
          f"α = {alpha0 * 1e6:g} µs and β = {beta0 / 1e9:g} GB/s, the link's, at {link_ok} of "
          f"{len(own)} (N, algorithm): {'holds' if link_ok == len(own) else 'does NOT hold'}")
    return fits


def draw(rows: list[dict], fits: dict):
    """The fits' figure (`fits.draw_fits`) on this sweep, the clock named."""
    ns = sorted({r["world_size"] for r in rows})
    return draw_fits(rows, ns, fits, rl.ALGOS, f"paced A100 time over {rows[0]['link']}",
                     beta_bounds=BETA_BOUNDS)
