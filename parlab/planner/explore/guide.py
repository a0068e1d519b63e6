"""Notebook 13's pictures and guide: the mesh drawn with every dimension, the predicted-vs-measured
scatter (held-out plans scored, calibration plans hollow), "which scheme when", a decision guide
that points back to the chapter that built each dimension, and the chapter's closing thresholds.

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


def hardware_ratios(table_a100: list[dict], table_h100: list[dict]) -> None:
    """H100 against A100 from `extrapolate.HARDWARE` (sustained FLOP/s, NVLink and InfiniBand β per
    GPU), and what the two Megatron tables say happens to the exposed-communication fraction."""
    from parlab.planner.scaling.extrapolate import HARDWARE
    a, h = HARDWARE["A100"], HARDWARE["H100"]
    flops, nvlink, ib = h.flops / a.flops, h.intra[1] / a.intra[1], h.inter[1] / a.inter[1]
    print(f"H100 vs A100: compute ×{flops:.2f} (sustained FLOP/s), NVLink ×{nvlink:.2f}, "
          f"InfiniBand per GPU ×{ib:.2f} (bandwidth β)")
    rises = [x["model"] for x, y in zip(table_a100, table_h100) if y["exposed"] > x["exposed"]]
    print(f"exposed-communication fraction higher on H100 in {len(rises)} of {len(table_a100)} "
          f"models ({', '.join(rises) or 'none'}): "
          + ("compute grew faster than the links, so communication grows in share"
             if flops > max(nvlink, ib) and len(rises) == len(table_a100) else
             "not every model: the pick changes degrees where the share would grow"
             if flops > max(nvlink, ib) else "the links grew as fast as compute"))


def when_to_use(s, scale_rows: list[dict], replay_rows: list[dict], megatron: list[dict]) -> None:
    """The chapter's closing lines, every threshold from this run: what a plan search gains, when
    the model's ranking is to be trusted, what the memory cap costs, which dimension costs most
    here, where dp and pp stop paying, which investment pays, and how far the model follows
    Megatron-LM's published choices."""
    from parlab.planner.explore.replay import WHAT_IFS
    from parlab.planner.scaling import points
    rows = sorted(s.rows, key=lambda r: r["measured_ms"])
    fast, slow, j = rows[0], rows[-1], s.judgement
    print("When to use it (from this run):")
    print(f"- search the plans: at {s.world_size} ranks the fastest ({fast['plan']}, "
          f"{fast['measured_ms']:.3g} {s.unit}) ran {slow['measured_ms'] / fast['measured_ms']:.1f}× "
          f"faster than the slowest ({slow['plan']}); the same ranks, only the plan differs")
    close = [(a, b) for a, b in zip(rows, rows[1:])
             if b["measured_ms"] / a["measured_ms"] - 1 < 2 * j.median_error]
    print(f"- trust the model's ranking where two plans differ by more than twice its held-out "
          f"median error ({2 * j.median_error:.1%}); {len(close)} of {len(rows) - 1} neighbouring "
          f"plans here are closer than that: measure those before choosing (Spearman "
          f"{j.spearman:.3f} over {j.scored} held-out plans)")
    cap = None
    if fast["measured_peak"] > min(r["measured_peak"] for r in rows):
        fits = [r for r in rows if r["measured_peak"] < fast["measured_peak"]]
        cap = fits[0]
        print(f"- under a memory cap below {fast['measured_peak'] / 1e6:.2f} MB per rank (the fastest "
              f"plan's peak) the best plan is {cap['plan']} ({cap['measured_peak'] / 1e6:.2f} MB), "
              f"{cap['measured_ms'] / fast['measured_ms'] - 1:.0%} slower: memory, not speed, "
              "then decides the plan")
    best = {}
    for r, p in zip(s.rows, s.predictions):
        for d in ("dp", "tp", "pp", "cp"):
            if getattr(p.plan, d) > 1:
                best.setdefault(d, []).append(r)
    exposed = {d: min(r["exposed_fraction"] for r in v) for d, v in best.items()}
    worst = max(exposed, key=exposed.get)
    each = ", ".join(f"{d} {v:.0%}" for d, v in exposed.items())
    if exposed[worst] < 0.005:  # nothing to rank: every dimension's best plan hides its messages
        print(f"- on {s.link or 'loopback'} at this model size no dimension's communication shows: "
              f"the least exposed plan of each dimension exposes under 1% of its step ({each}); the "
              "plans' messages are short beside their operator launches, so what separates them is "
              "each rank's compute (how many operators it launches), not its bytes")
    else:
        print(f"- on {s.link or 'loopback'} at this model size, {worst} costs most: its best plan "
              f"exposes {exposed[worst]:.0%} of the step as communication (least exposed of the "
              f"plans using each dimension: {each})")
    for line in points.stops_paying(scale_rows):
        print(f"- scaling, {line.strip()}")
    for name in WHAT_IFS:
        gains = [r["plan"] for r in replay_rows if min(WHAT_IFS, key=lambda n: r[n]) == name]
        if gains:
            print(f"- {name} pays most for {', '.join(gains)} (the replayed traces)")
    agree = [r["model"] for r in megatron if r["verdict"].startswith("agrees")]
    print(f"- at GPU scale the model picks Megatron-LM's tp and pp for {len(agree)} of "
          f"{len(megatron)} models ({', '.join(agree) or 'none'}); where it differs, the A100 "
          "table's verdict column says how")


def scatter(s, ax=None):
    """Predicted vs measured step of an `explore.Sweep`, one point per plan on log axes: the
    held-out plans filled (the ones scored), the calibration plans hollow and labelled as not
    scored; a plan's name only where it does not overlap another's (every plan is in the table
    below the figure)."""
    import math

    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 5.5))
    j = s.judgement
    groups = ((False, f"held-out plans ({s.method}): scored", dict(c="C0")),
              (True, "calibration plans (fitted on): not scored",
               dict(facecolors="none", edgecolors="C1")))
    for calib, label, style in groups:
        pts = [r for r in s.rows if r["calibration"] == calib]
        if pts:
            ax.scatter([r["measured_ms"] for r in pts], [r["predicted_ms"] for r in pts],
                       label=f"{label} ({len(pts)})", **style)
    values = [v for r in s.rows for v in (r["measured_ms"], r["predicted_ms"])]
    lo, hi = min(values) / 1.3, max(values) * 1.3
    placed = []  # label positions in log10 units: skip a label that would overlap one placed
    for r in sorted(s.rows, key=lambda r: -abs(r["error"])):  # the largest errors named first
        x, y = math.log10(r["measured_ms"]), math.log10(r["predicted_ms"])
        if all(abs(x - a) > 0.22 * math.log10(hi / lo) / 2 or abs(y - b) > 0.035 * math.log10(hi / lo)
               for a, b in placed):
            ax.annotate(r["plan"], (r["measured_ms"], r["predicted_ms"]), fontsize=7,
                        xytext=(4, -2), textcoords="offset points")
            placed.append((x, y))
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="predicted = measured")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
           xlabel=f"measured step ({s.unit})", ylabel=f"predicted step ({s.unit})",
           title=f"{s.world_size} ranks, {s.link or 'loopback'}: held-out median |error| "
                 f"{j.median_error:.1%},\nSpearman {j.spearman:.2f} over {j.scored} plans")
    from matplotlib.ticker import NullFormatter
    for subs in ((1, 2, 5), (1, 2, 3, 4, 5, 6, 8)):  # plain numbers, at least four of them
        ticks = [m * 10 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)))
                 for m in subs if lo <= m * 10 ** k <= hi]
        if len(ticks) >= 4:
            break
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_ticks(ticks, [f"{t:g}" for t in ticks])
        axis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=8, loc="upper left")
    ax.figure.tight_layout()
    return ax.figure
