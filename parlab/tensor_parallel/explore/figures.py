"""Figures of chapter 03: the matmul split by columns and by rows (Megatron-LM, Shoeybi et al.
2019, Fig. 3) and section 10's paced steps inside and past the NVLink domain (Narayanan et al.,
SC 2021, §3).
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


def domain_figure(rows: list[dict]):
    """Section 10's runs: measured step (bars) and the α-β estimate (black ticks) per tp degree,
    the bars past one node in red (`explore.nvlink_domain.domain_rows`)."""
    import matplotlib.pyplot as plt

    from parlab.tensor_parallel.explore.nvlink_domain import PER_NODE, PRESET

    fig, ax = plt.subplots(figsize=(7, 3.6))
    xs = range(len(rows))
    ax.bar(xs, [r["measured_ms"] for r in rows],
           color=["#C44E52" if r["tp"] > PER_NODE else "#4C72B0" for r in rows],
           label="measured (paced); red: the ring crosses InfiniBand")
    ax.plot(xs, [r["estimate_ms"] for r in rows], "k_", markersize=22, mew=2,
            label="α-β estimate")
    ax.set_xticks(list(xs), [f"tp={r['tp']}\n{r['nodes']} node{'s' if r['nodes'] > 1 else ''}"
                             for r in rows])
    ax.set_ylabel(f"ms per step ({rows[0]['clock']})")
    ax.set_title(f"{PRESET}, one block: TP inside and past one node of {PER_NODE}")
    ax.legend(fontsize="small")
    plt.tight_layout()
    return fig
