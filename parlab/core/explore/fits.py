"""The α-β fit of chapter 00, on any clock's sweep rows: each algorithm's closed form (Thakur,
Rabenseifner & Gropp, IJHPCA 2005; `parlab.core.cost.fit_alpha_beta`) fitted to part of the sizes
and judged on the sizes it has not seen, and the figure of both.

A row is {"world_size", "bytes", "algo", "seconds"} (`paced_sweep.sweep`, `loopback.sweep`).
"""

from __future__ import annotations

from parlab.core import cost


def fit_and_check(rows: list, world_size: int, algo: str, held_out="alternate",
                  beta_bounds: tuple[float, float] = cost.BETA_BOUNDS):
    """Fit α, β on part of the sizes and judge the fit on the rest. Returns (fit, table).

    held_out: "alternate" leaves every other size out (1st, 3rd, ... fitted; 2nd, 4th, ...
    predicted); an int k leaves the k largest out (extrapolation). `fit.held_out_error` is the
    median relative error on the left-out sizes; `fit.reliable` is False when they are typically
    off by more than 2× (`cost.FLAG_RATIO`).
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
                              world_size, algo, beta_bounds)
    fit.held_out([r["bytes"] for r in test], [r["seconds"] for r in test])
    table = [{"bytes": r["bytes"], "measured_s": r["seconds"], "predicted_s": fit.predict(r["bytes"]),
              "used_in_fit": r in train} for r in mine]
    return fit, table


def draw_fits(rows: list, world_sizes, fits: dict, algos, clock: str,
              beta_bounds: tuple[float, float] = cost.BETA_BOUNDS):
    """Measured seconds against bytes, log-log, one panel per world size: the sizes the fit used
    (filled) and the ones it predicts (hollow), beside each algorithm's fitted α-β line; `clock`
    names the clock in the title."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(world_sizes), figsize=(5 * len(world_sizes), 3.8), squeeze=False)
    worst = 0.0
    for ax, n in zip(axes[0], world_sizes):
        for k, algo in enumerate(algos):
            fit, table = fit_and_check(rows, n, algo, beta_bounds=beta_bounds)
            color = f"C{k}"
            xs = [t["bytes"] for t in table]
            ax.plot(xs, [fit.predict(x) * 1e6 for x in xs], "-", color=color, lw=1,
                    label=f"{algo}: α {fit.alpha * 1e6:.3g} µs, β {fit.beta / 1e9:.3g} GB/s")
            for used in (True, False):
                pts = [t for t in table if t["used_in_fit"] == used]
                ax.plot([t["bytes"] for t in pts], [t["measured_s"] * 1e6 for t in pts], "o",
                        color=color, markersize=4, fillstyle="full" if used else "none")
            worst = max(worst, fits[(n, algo)].held_out_error)
        ax.set(xscale="log", yscale="log", xlabel="bytes all-reduced", ylabel="µs",
               title=f"N={n}: filled = fitted, hollow = predicted")
        ax.legend(fontsize=7)
    fig.suptitle(f"α-β fits ({clock}): median held-out errors up to {worst:.2%}", fontsize=10)
    fig.tight_layout()
    return fig
