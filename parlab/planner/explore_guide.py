"""Notebook 13's pictures and guide: the mesh drawn with every dimension, and "which scheme when",
a decision guide that points back to the chapter that built each dimension.

The mesh order is torchtitan's (pp outermost, then dp, cp, tp innermost: `plan.MESH_ORDER`), so
a rank's coordinates are its digits in that mixed radix; Narayanan et al. (SC 2021, §3.3) give
the rule behind it — the dimension that talks most (tp) on the closest ranks.
"""

from __future__ import annotations

from parlab.planner.plan import MESH_ORDER, Plan


def coordinates(plan: Plan) -> list[dict]:
    """Every rank's coordinate per dimension (mixed radix, pp outermost, tp innermost)."""
    sizes = [getattr(plan, d) for d in MESH_ORDER]
    out = []
    for rank in range(plan.world_size):
        coord, r = {}, rank
        for name, size in zip(reversed(MESH_ORDER), reversed(sizes)):
            coord[name] = r % size
            r //= size
        out.append({"rank": rank, **{d: coord[d] for d in MESH_ORDER}})
    return out


def draw_mesh(plan: Plan, ax=None):
    """Ranks as boxes: one panel column per pipeline stage, a row per dp replica, a column per
    (cp, tp) position; tp groups joined by a thick line, cp rings by a dashed arc."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch
    coords = coordinates(plan)
    cols = plan.cp * plan.tp
    width = plan.pp * (cols + 1)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4, 1.3 * width), 1.2 * plan.dp + 1.2))
    pos = {}
    for c in coords:
        x = c["pp"] * (cols + 1) + c["cp"] * plan.tp + c["tp"]
        y = plan.dp - 1 - c["dp"]
        pos[c["rank"]] = (x, y)
        ax.add_patch(FancyBboxPatch((x - 0.4, y - 0.35), 0.8, 0.7, boxstyle="round,pad=0.02",
                                    fc=plt.cm.tab10(c["pp"] % 10), alpha=0.35, ec="k"))
        ax.text(x, y + 0.08, f"rank {c['rank']}", ha="center", fontsize=8)
        ax.text(x, y - 0.18, " ".join(f"{d}{c[d]}" for d in MESH_ORDER if getattr(plan, d) > 1),
                ha="center", fontsize=6)
    for c in coords:  # tp neighbours, cp ring neighbours
        x, y = pos[c["rank"]]
        if c["tp"] + 1 < plan.tp:
            ax.plot([x + 0.4, x + 0.6], [y, y], "k-", lw=3)
        if plan.cp > 1 and c["tp"] == 0 and c["cp"] + 1 < plan.cp:
            ax.annotate("", (x + plan.tp, y + 0.38), (x, y + 0.38),
                        arrowprops=dict(arrowstyle="->", ls="--", color="C3",
                                        connectionstyle="arc3,rad=-0.3"))
    for s in range(plan.pp - 1):
        xb = (s + 1) * (cols + 1) - 1
        ax.annotate("", (xb + 0.6, plan.dp / 2 - 0.5), (xb - 0.4, plan.dp / 2 - 0.5),
                    arrowprops=dict(arrowstyle="->", color="C2", lw=2))
    ax.set_xlim(-0.7, width - 0.3)
    ax.set_ylim(-0.7, plan.dp - 0.2)
    ax.axis("off")
    ax.set_title(f"{plan.describe()}: columns are pipeline stages (green: activations), rows dp "
                 "replicas; thick line: a tp group; dashed: the cp ring", fontsize=8)
    return ax.figure


GUIDE = [
    ("data parallel (dp)", "the model fits one rank; batch large enough to split",
     "one gradient all-reduce per step: 2(N−1)/N·Ψ bytes", "01_data_parallel"),
    ("ZeRO-1/2/3 (zero)", "dp's replicas do not fit: shard optimizer, then gradients, then "
     "parameters", "ZeRO-1/2 as dp; ZeRO-3 1.5× (a second all-gather)", "02_zero"),
    ("tensor parallel (tp)", "one layer too big or too slow; a fast link (inside a node)",
     "4 all-reduces of the activations per block", "03_tensor_parallel"),
    ("pipeline (pp)", "too many layers for one rank; a slow link between groups",
     "point-to-point activations; bubble (p−1)/(m+p−1) — more micro-batches", "04_pipeline"),
    ("local learning", "pipeline stages that should not wait for backward at all",
     "no backward messages; a changed optimisation problem", "05_local_learning"),
    ("context parallel (cp)", "sequences too long for one rank's attention",
     "K/V round the ring: 2(cp−1) blocks per layer, overlappable", "06_context_parallel"),
    ("expert parallel (ep)", "a mixture of experts: experts too many for one rank",
     "two all-to-alls of the routed tokens per MoE layer", "07_expert_parallel"),
    ("compression", "dp on a slow link, bandwidth-bound", "k/Ψ of the bytes, error feedback",
     "08_compression"),
    ("asynchrony", "stragglers or a parameter server; staleness tolerated",
     "no global barrier; bounded staleness", "09_asynchrony"),
    ("subnetwork dp", "dp where each rank may train part of the model",
     "only the subnetwork's gradients move", "10_subnet"),
    ("heterogeneous shares", "ranks of different speeds", "work ∝ speed (an LP)",
     "11_heterogeneous"),
    ("sharing, serving", "two jobs, or inference split over devices",
     "fill one job's gaps with another's compute", "12_serving"),
    ("the planner (this chapter)", "all of the above at once", "predict every plan, pick one",
     "13_planner"),
]


def decision_guide():
    """The guide as a table; `chapter` names the notebook that built each dimension."""
    import pandas as pd
    return pd.DataFrame(GUIDE, columns=["dimension", "use it when", "what it costs", "chapter"])


def guide_markdown() -> str:
    """The same guide with links to the notebooks (for IPython.display.Markdown)."""
    lines = ["| dimension | use it when | what it costs | chapter |", "|---|---|---|---|"]
    lines += [f"| {d} | {w} | {c} | [{n}]({n}.ipynb) |" for d, w, c, n in GUIDE]
    return "\n".join(lines)
