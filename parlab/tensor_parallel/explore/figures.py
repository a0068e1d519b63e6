"""Figures of chapter 03: the matmul split by columns and by rows (Megatron-LM, Shoeybi et al.
2019, Fig. 3) and when tensor parallelism pays off (compute ÷ tp against all-reduce time).
"""

from __future__ import annotations

RANK_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
               "#8C8C8C"]


def _grid(ax, x0, rows, cols, split, tp, label, cell=0.3):
    """Draw a rows × cols matrix from x0 (top at y=0), coloured by owner: split 'col' / 'row'."""
    from matplotlib.patches import Rectangle
    for i in range(rows):
        for j in range(cols):
            owner = j * tp // cols if split == "col" else i * tp // rows if split == "row" else None
            color = RANK_COLORS[owner % len(RANK_COLORS)] if owner is not None else "#BBBBBB"
            ax.add_patch(Rectangle((x0 + j * cell, -(i + 1) * cell), cell, cell,
                                   facecolor=color, edgecolor="white"))
    ax.text(x0 + cols * cell / 2, -rows * cell - 0.2, label, ha="center", va="top", fontsize=9)
    return x0 + cols * cell


def draw_matmul_splits(tp: int = 2):
    """Y = GeLU(X·A) with A cut by columns (each rank a block of Y's columns, no comm), then
    Z = Y·B with B cut by rows (each rank a partial Z, summed by all-reduce: operator g)."""
    import matplotlib.pyplot as plt
    tp = max(tp, 1)
    wide = 8 if tp <= 8 else tp
    fig, ax = plt.subplots(figsize=(14, 3.6))
    x = 0.0
    pieces = [(4, 4, None, "X (B·T, C)\nevery rank, via f"), "·",
              (4, wide, "col", "A (C, 4C)\ncolumn-parallel"), "→",
              (4, wide, "col", "Y = GeLU(X·Aᵢ)\nlocal, no comm"), "·",
              (wide, 4, "row", "B (4C, C)\nrow-parallel"), "= Σᵢ",
              (4, 4, None, "Z = Σᵢ Yᵢ·Bᵢ\nall-reduce (g)")]
    for piece in pieces:
        if isinstance(piece, str):
            ax.text(x + 0.35, -0.6, piece, fontsize=16, ha="center", va="center")
            x += 0.8
        else:
            x = _grid(ax, x, *piece[:3], tp, piece[3])
    ax.set_xlim(-0.2, x + 0.2)
    ax.set_ylim(-wide * 0.3 - 0.9, 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"Megatron MLP on tp={tp} ranks (colour = the rank that owns it)")
    return fig


# part 10's two models (the chapter's tiny GPT, then a wider one), read by its when-to-use verdict
TINY_MODEL = {"batch_rows": 12, "seq_len": 32, "n_embd": 32}
WIDE_MODEL = {"batch_rows": 8, "seq_len": 1024, "n_embd": 1024}
TEACHING_LINKS = ("1GbE", "10GbE", "100Gb-IB", "NVLink")


def degree_times(batch_rows: int, seq_len: int, n_embd: int, flops_per_s: float,
                 links=TEACHING_LINKS, degrees=(1, 2, 4, 8)) -> dict[str, dict]:
    """Per link (the teaching presets, `parlab.core.link.PRESETS`): the predicted ms per block and
    step at each tp degree (`cost.block_times`: matmul compute ÷ tp plus 4 all-reduces), and the
    fastest degree. {link name: {"ms": [per degree], "best": degree, "best_ms", "base_ms"}}."""
    from parlab.core.link import PRESETS
    from parlab.tensor_parallel.cost import block_times

    out = {}
    for name in links:
        link = PRESETS[name]
        total = [sum(block_times(batch_rows, seq_len, n_embd, t, flops_per_s, link.latency_s,
                                 link.bandwidth_Bps).values()) * 1e3 for t in degrees]
        best = min(range(len(degrees)), key=total.__getitem__)
        out[link.name] = {"ms": total, "best": degrees[best], "best_ms": total[best],
                          "base_ms": total[0], "base": degrees[0]}
    return out


def when_tp_pays(batch_rows: int = TINY_MODEL["batch_rows"], seq_len: int = TINY_MODEL["seq_len"],
                 n_embd: int = TINY_MODEL["n_embd"],
                 links=TEACHING_LINKS, degrees=(1, 2, 4, 8), flops_per_s: float | None = None):
    """Predicted per-block time: matmul compute ÷ tp plus 4 all-reduces on each link; prints,
    per link, the fastest degree computed from the same numbers the figure draws."""
    import matplotlib.pyplot as plt

    from parlab.core.link import cpu_flops
    from parlab.tensor_parallel.cost import block_times

    flops = flops_per_s or cpu_flops()  # this machine's rate, measured once per run (parlab.core.link)
    fig, ax = plt.subplots(figsize=(7, 4))
    verdicts = []
    for name, row in degree_times(batch_rows, seq_len, n_embd, flops, links, degrees).items():
        ax.plot(degrees, row["ms"], "o-", label=f"compute + comm, {name}")
        verdicts.append(f"{name}: tp={row['best']} fastest ({row['best_ms']:.3g} ms vs "
                        f"{row['base_ms']:.3g} ms at tp={row['base']})" if row["best"] > row["base"] else
                        f"{name}: tp>1 never pays (tp={row['base']}: {row['base_ms']:.3g} ms)")
    print(f"B={batch_rows}, T={seq_len}, C={n_embd} at {flops / 1e9:.1f} GFLOP/s (measured here, "
          f"this run) — " + "; ".join(verdicts))
    compute = [block_times(batch_rows, seq_len, n_embd, t, flops, 0, 1)["compute_s"] * 1e3
               for t in degrees]
    ax.plot(degrees, compute, "k--", label="compute only (÷ tp)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tp degree")
    ax.set_ylabel("ms per block and step")
    ax.set_title(f"When TP pays: B={batch_rows}, T={seq_len}, C={n_embd}, "
                 f"{flops / 1e9:.1f} GFLOP/s measured on this machine this run")
    ax.legend(fontsize="small")
    return fig, flops
