"""What notebooks/12_serving.ipynb runs, part 2: the grouped network split over edge devices (the
setting of Lin & Wang, "Communication-Efficient Separable Neural Network for Distributed Inference
on Edge Devices", 2021; groups as in ResNeXt, Xie et al., CVPR 2017) with one camera read by all
and our saliency ranking of transfers (`masks.search`, not the paper's search: that is part 3,
`explore.search`) — the split drawn, exactness, bytes against the closed forms, accuracy against
bytes, latency against bandwidth with the break-even, in paced time on a real edge device
(the Jetson Nano, `parlab.core.link.EDGE_DEVICES`) over real links.
"""

from __future__ import annotations

import functools
import math

import torch

from parlab.serving import cost, edge, grouped, images, masks

CONFIG = grouped.GroupedConfig()
DENSITIES = (1.0, 0.2, 0.1, 0.05, 0.0)  # fraction of cross-group transfers kept
LEARN_STEPS, TUNE_STEPS, LASSO = 300, 100, 0.01
GOAL_POINTS = 2.0  # ours, after Lin & Wang's "little accuracy lost": at most 2 points below every feature


@functools.cache
def data():
    return images.load("train"), images.load("test")


@functools.cache
def learned(steps: int = LEARN_STEPS, lasso: float = LASSO) -> grouped.GroupedNet:
    """The network trained with the group lasso on its transfers (cached: the notebook reuses it)."""
    (x, y), _ = data()
    return masks.learn(x, y, CONFIG, steps=steps, lasso=lasso)


@functools.cache
def tuned(density: float, steps: int = LEARN_STEPS, tune: int = TUNE_STEPS,
          lasso: float = LASSO) -> grouped.GroupedNet:
    """`learned` with the searched mask at `density` (1.0: every feature) and `tune` more steps."""
    (x, y), _ = data()
    net = learned(steps, lasso)
    found = grouped.full_masks(CONFIG) if density == 1.0 else masks.search(net, x[:256], density)
    return masks.finetune(net, x, y, found, steps=tune, lr=3e-3)


# ----------------------------------------------------------------------------- 1. intuition
def draw_split(density: float = 0.1, world_size: int = 2):
    """Each block's transfers: which channel (row) of which group reaches which group (column);
    the red lines separate devices, so what crosses them is what the network sends."""
    import matplotlib.pyplot as plt

    net = tuned(density)
    fig, axes = plt.subplots(1, CONFIG.n_blocks, figsize=(3.2 * CONFIG.n_blocks, 4))
    per = CONFIG.groups // world_size
    cross = ~torch.eye(CONFIG.groups, dtype=torch.bool)[:, :, None]  # (s, d, 1) s ≠ d
    for b, (ax, mask) in enumerate(zip(axes, net.masks)):
        picture = mask.permute(0, 2, 1).reshape(CONFIG.channels, CONFIG.groups).float()  # (s·c+j, d)
        ax.imshow(picture, aspect="auto", cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
        for k in range(1, world_size):
            ax.axvline(k * per - 0.5, color="red")
            ax.axhline(k * per * CONFIG.width - 0.5, color="red")
        ax.set(xlabel="to group", ylabel="channel of group (s·c + j)" if b == 0 else "",
               title=f"block {b}: {int((mask & cross).sum())} of "
                     f"{int(cross.expand_as(mask).sum())} cross-group kept")
        ax.set_xticks(range(CONFIG.groups))
    fig.suptitle(f"density {density} (the fraction of cross-group transfers kept; a group always "
                 f"reads itself): black = transferred; {world_size} devices", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- 2. math
def dense_bytes_table(batch: int = 1) -> None:
    """Bytes each device sends per request with every feature exchanged (closed form)."""
    print(f"G={CONFIG.groups} groups × c={CONFIG.width} channels, blocks see "
          f"{' and '.join(f'{s}×{s}' for s in cost.block_sides(CONFIG))} maps, {batch} image(s)")
    for n in (1, 2, 4):
        sent = [cost.dense_edge_bytes(CONFIG, n, batch, r) for r in range(n)]
        print(f"N={n}: bytes sent per device {sent}  rounds {cost.edge_rounds(CONFIG, n)}")


# ----------------------------------------------------------------------------- 4. correctness
def check_split(world_size: int, densities=(1.0, 0.1), count: int = 64) -> None:
    """Split inference against one process: the same logits (1e-5) and the same predictions."""
    _, (xt, _) = data()
    x = xt[:count]
    for density in densities:
        net = tuned(density)
        result = edge.run_edge(net, x, world_size)
        reference = net(x).detach()
        close = torch.allclose(result.logits, reference, rtol=1e-4, atol=1e-5)
        same = torch.equal(result.logits.argmax(1), reference.argmax(1))
        print(f"density {density:<4} on {world_size} device(s): logits equal (1e-5): {close}  "
              f"same predictions: {same}")


# ----------------------------------------------------------------------------- 5. measurement
def bytes_table(world_size: int, densities=DENSITIES, batch: int = 32) -> dict:
    """Ledger bytes of one request of `batch` images per device against the closed form."""
    _, (xt, _) = data()
    out = {}
    for density in densities:
        net = tuned(density)
        result = edge.run_edge(net, xt[:batch], world_size)
        measured = result.bytes_per_rank(0)
        formula = [sum(p.values()) for p in cost.edge_bytes(CONFIG, net.masks, world_size, batch)]
        out[density] = measured
        print(f"density {density:<4}: ledger {measured}  closed form {formula}  "
              f"equal: {measured == formula}")
    return out


def accuracy_vs_bytes(world_size: int, densities=DENSITIES):
    """Test accuracy and bytes per image (all devices, closed form = ledger above) per density."""
    import matplotlib.pyplot as plt

    _, (xt, yt) = data()
    rows = []
    for density in densities:
        net = tuned(density)
        sent = sum(sum(p.values()) for p in cost.edge_bytes(CONFIG, net.masks, world_size, 1))
        rows.append((density, sent, grouped.accuracy(net, xt, yt)))
    dense_bytes, dense_acc = rows[0][1], rows[0][2]
    print(f"test accuracy on {len(yt):,} test images; bytes per image summed over {world_size} devices")
    print(f"{'density':>7} {'bytes/image':>11} {'fewer':>6} {'accuracy':>8} {'loss (points)':>13}")
    for density, sent, acc in rows:
        fewer = 1 - sent / dense_bytes if dense_bytes else 0.0
        print(f"{density:>7} {sent:>11,} {fewer:>6.0%} {acc:>8.1%} {100 * (dense_acc - acc):>13.1f}")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r[1] for r in rows], [100 * r[2] for r in rows], "o-")
    for density, sent, acc in rows:
        ax.annotate(f"{density}", (sent, 100 * acc), fontsize=8, xytext=(3, 3),
                    textcoords="offset points")
    within = [r for r in rows if 100 * (dense_acc - r[2]) <= GOAL_POINTS]  # the chapter's goal (ours)
    best = min(within, key=lambda r: r[1])
    ax.set(xlabel=f"bytes per image, all {world_size} devices", ylabel="test accuracy (%)",
           title=f"fewest bytes within {GOAL_POINTS:g} points of every feature: density {best[0]} "
                 f"({1 - best[1] / dense_bytes:.1%} fewer)" if dense_bytes else "accuracy vs bytes")
    ax.title.set_fontsize(9)
    ax.annotate("point labels: density of transfers kept", (0.45, 0.04), xycoords="axes fraction", fontsize=7)
    fig.tight_layout()
    return rows, fig


def latency_curve(world_size: int, densities=(1.0, 0.05), batch: int = 128,
                  links=("loopback", "1GbE", "Wi-Fi", "Bluetooth"), clock: str = edge.EDGE_DEVICE,
                  curve: str = "1GbE"):
    """Request latency in paced time on a real edge device (`clock`, the Jetson Nano): one device
    vs `world_size`, measured on real `links`, beside the model P_N + k·α + bytes/β (P_N: the
    split's compute per device, measured on free links; bytes: on the critical path,
    `cost.edge_critical_bytes`) over bandwidths at `curve`'s α, and the
    break-even bandwidth β* = bytes / (P − P_N − k·α) of each density (`cost.break_even_bandwidth`).
    Returns the figure and the numbers: {"alone": s, "split": {density: s}, "break_even":
    {density: B/s at curve's α}, "measured" / "model": {(density, link): s}, "agree": bool}."""
    import matplotlib.pyplot as plt

    _, (xt, _) = data()
    x = xt[:batch]
    paced = edge.edge_clock(clock)
    acc = paced.accelerator
    alone = edge.run_edge(tuned(1.0), x, 1, clock=clock).latency
    alpha = edge.EDGE_LINKS[curve].latency_s
    betas = [10 ** (4 + k / 8) for k in range(0, 49)]  # 10 KB/s .. 10 GB/s
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.axhline(alone * 1e3, color="k", ls=":", label=f"one device ({alone * 1e3:.2f} ms)")
    info = {"alone": alone, "split": {}, "break_even": {}, "measured": {}, "model": {},
            "curve": curve, "clock": paced.label}
    print(f"latencies: paced {acc.name} time ({acc.flops / 1e9:.0f} GFLOP/s sustained of its "
          f"{acc.peak_flops / 2e9:.0f} GFLOP/s fp32 peak ({acc.peak_flops / 1e9:.0f} fp16), "
          f"LPDDR4 {acc.hbm_Bps / 1e9:.1f} GB/s, {acc.launch_s * 1e6:g} µs a kernel launch; "
          "parlab.core.link.EDGE_DEVICES), not this CPU; real links "
          + ", ".join(str(edge.EDGE_LINKS[n]) for n in links if edge.EDGE_LINKS[n] is not None)
          + f"\none device: P = {alone * 1e3:.3f} {paced.unit} per request of {batch} images")
    agree = True
    for density in densities:
        net = tuned(density)
        busiest = max(sum(p.values()) for p in cost.edge_bytes(CONFIG, net.masks, world_size, batch))
        nbytes = cost.edge_critical_bytes(CONFIG, net.masks, world_size, batch)
        rounds = cost.edge_rounds(CONFIG, world_size, net.masks)
        split = edge.run_edge(net, x, world_size, clock=clock).latency  # P_N: free links
        info["split"][density] = split
        print(f"density {density}: {nbytes:,} B on the critical path (each exchange's busiest sender; "
              f"the busiest device sends {busiest:,} B in all) in k = {rounds} rounds; the split "
              f"computes P_N = {split * 1e3:.3f} ms per device on free links (P/N = "
              f"{alone / world_size * 1e3:.3f} ms: launches do not shrink, every device's mix reads "
              f"every group, the exchange copies), saving P − P_N = {(alone - split) * 1e3:.3f} ms")
        model = [cost.edge_latency(alone, nbytes, rounds, world_size, _link_of(alpha, b), split) * 1e3
                 for b in betas]
        line = ax.plot(betas, model, "--", label=f"density {density}: model at {curve}'s α")[0]
        star = cost.break_even_bandwidth(alone, nbytes, rounds, world_size, alpha, split)
        info["break_even"][density] = star
        for name in links:
            link = edge.EDGE_LINKS[name]
            if link is None:
                continue
            at = cost.break_even_bandwidth(alone, nbytes, rounds, world_size, link.latency_s, split)
            print(f"   β* at {name}'s α = {link.latency_s * 1e3:g} ms: "
                  + (f"{at / 1e6:,.2f} MB/s against its β = {link.bandwidth_Bps / 1e6:,.2f} MB/s"
                     if math.isfinite(at) else
                     _why_never(alone, rounds, world_size, link.latency_s, alone - split)))
        wire = edge.EDGE_LINKS[curve]
        need = rounds * wire.latency_s + nbytes / wire.bandwidth_Bps  # what the split must save
        print(f"   to pay on {curve} the split must save ≥ k·α + bytes/β = {need * 1e3:.3f} ms of compute, "
              f"{need / (alone - split):.2f}× the {(alone - split) * 1e3:.3f} ms it saves here: "
              + ("it does" if need < alone - split else "it does not (more compute per byte sent, or "
                 "a slower device, would move β* below the link's β)"))
        print(f"   {'link':<9} {'measured':>10} {'model':>10}  {'error':>6}  vs one device "
              "(measured / model)")
        for name in links:
            link = edge.EDGE_LINKS[name]
            measured = edge.run_edge(net, x, world_size, link=link, clock=clock).latency
            predicted = cost.edge_latency(alone, nbytes, rounds, world_size, link, split)
            info["measured"][density, name] = measured
            info["model"][density, name] = predicted
            same = (measured < alone) == (predicted < alone)
            agree = agree and same
            beta = 1e10 if link is None else link.bandwidth_Bps
            ax.plot(beta, measured * 1e3, "o", color=line.get_color())
            ax.plot(beta, predicted * 1e3, "x", color=line.get_color(), ms=9)
            print(f"   {name:<9} {measured * 1e3:8.3f} ms {predicted * 1e3:7.3f} ms "
                  f"{predicted / measured - 1:+7.1%}  {'faster' if measured < alone else 'slower'} / "
                  f"{'faster' if predicted < alone else 'slower'}: {'agree' if same else 'DISAGREE'}")
        if math.isfinite(star):
            ax.axvline(star, color=line.get_color(), lw=0.8,
                       label=f"density {density}: β* at {curve}'s α {star / 1e6:,.0f} MB/s")
    info["agree"] = agree
    print(f"the model agrees in direction with the paced run on every link and density: "
          f"{'holds' if agree else 'does NOT hold'}")
    ax.set(xscale="log", yscale="log", xlabel="bandwidth β (bytes/s; loopback drawn at 10 GB/s)",
           ylabel=f"latency per request ({paced.unit})", ylim=(alone * 1e3 / 4, None))
    ax.set_title(f"{world_size} {acc.name}s vs one: o measured, x model\nthe split beats one device "
                 f"above β* (α of {curve}): " + ", ".join(
                     f"density {d}: " + (f"{b / 1e6:,.0f} MB/s" if math.isfinite(b) else "never")
                     for d, b in info["break_even"].items()), fontsize=8)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig, info


def _why_never(alone: float, rounds: int, world_size: int, alpha: float,
               saved: float | None = None) -> str:
    """Why no bandwidth makes the split pay: its rounds' latency k·α alone is at least the
    compute it saves, P(1 − 1/N), or P − P_N when `saved` is given (`cost.break_even_bandwidth`)."""
    label = "P(1 − 1/N)" if saved is None else "P − P_N"
    saved = alone * (1 - 1 / world_size) if saved is None else saved
    return (f"none — its {rounds} rounds' latency k·α = {rounds * alpha * 1e3:.1f} ms alone is "
            f"≥ the compute the split saves, {label} = {saved * 1e3:.1f} ms; a β* exists only "
            f"for α < {saved / rounds * 1e3:.2f} ms")


def _link_of(alpha: float, beta: float):
    from parlab.core.link import Link

    return Link(alpha, beta)


def panel_edge(world_size: int, density: float) -> None:
    """Widget part: the edge split at one density: bytes (ledger = closed form) and accuracy."""
    _, (xt, yt) = data()
    net = tuned(density)
    result = edge.run_edge(net, xt[:32], world_size)
    formula = [sum(p.values()) for p in cost.edge_bytes(CONFIG, net.masks, world_size, 32)]
    print(f"edge, density {density}: bytes per 32 images {result.bytes_per_rank(0)} "
          f"(closed form equal: {result.bytes_per_rank(0) == formula}); test accuracy "
          f"{grouped.accuracy(net, xt, yt):.1%}")
