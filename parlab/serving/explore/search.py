"""What notebooks/12_serving.ipynb runs, part 3: the transfer search against the link on the
four-sensor task (`sensors`), beside our saliency ranking (`masks.search`) — Lin & Wang,
"Communication-Efficient Separable Neural Network for Distributed Inference on Edge Devices"
(2021) search the transmission policy with neural architecture search and communication latency
in the objective; ours is the relaxed-gate version of that search (`edge_search`).
"""

from __future__ import annotations

import functools

import torch

from parlab.serving import cost, edge, edge_search, grouped, masks, sensors

CONFIG = grouped.GroupedConfig(sensors=4)
PRETRAIN_STEPS, SEARCH_STEPS, TUNE_STEPS, BATCH = 800, 100, 60, 32
PRICE = 0.15  # λ: nats of cross-entropy per millisecond of link time
SEARCHES = (("Wi-Fi", PRICE), ("Bluetooth", PRICE), ("Bluetooth", 2 * PRICE))  # (link, λ) per point
DENSITIES = (1.0, 0.1, 0.03, 0.0)  # our saliency baseline: fraction of cross-group transfers kept
PAPER_FEWER = 0.866  # Lin & Wang 2021, abstract: 86.6% less data transmitted than the baseline
LITTLE = 0.02  # "little accuracy lost", ours: within 2 points of every transfer


@functools.cache
def pretrained() -> grouped.GroupedNet:
    """The four-sensor network trained with every transfer (the start of the search and baseline)."""
    x, y = sensors.load("train")
    net = grouped.GroupedNet(CONFIG, seed=0)
    grouped.train_grouped(net, x, y, steps=PRETRAIN_STEPS, batch=BATCH, lr=5e-3)
    return net


@functools.cache
def searched(world_size: int, link: str, price: float) -> grouped.GroupedNet:
    """The search's masks on `link` at λ = `price`, fine-tuned (`edge_search.searched`)."""
    x, y = sensors.load("train")
    return edge_search.searched(pretrained(), x, y, world_size, edge.resolve_link(link), price,
                                steps=SEARCH_STEPS, tune=TUNE_STEPS, batch=BATCH)


@functools.cache
def baseline(density: float) -> grouped.GroupedNet:
    """Our saliency ranking at `density` (every transfer at 1.0), fine-tuned as long."""
    x, y = sensors.load("train")
    net = pretrained()
    found = grouped.full_masks(CONFIG) if density == 1.0 else masks.search(net, x[:256], density)
    return masks.finetune(net, x, y, found, steps=TUNE_STEPS, lr=3e-3, batch=BATCH)


def devices(world_size: int) -> int:
    """The devices the search splits over: `world_size`, or 2 when one device has nothing to send."""
    if world_size == 1:
        print("one device sends nothing: the search runs on 2 devices")
    return max(world_size, 2)


def crossing(net: grouped.GroupedNet, world_size: int) -> int:
    """Transfers that cross a device (channel of a group → another device), all blocks."""
    return sum(len(c) for m in net.masks for row in masks.send_channels(m, world_size) for c in row)


def describe() -> None:
    """The task and the search's configuration."""
    x, y = sensors.load("train")
    xt, _ = sensors.load("test")
    print(f"four sensors, one per group ({', '.join(sensors.SENSORS)}); label = the shape at the "
          f"open door; {len(y)} training and {len(xt)} test scenes")
    print(f"pretrained {PRETRAIN_STEPS} steps with every transfer; search {SEARCH_STEPS} steps "
          f"(gates and weights), then {TUNE_STEPS} steps fine-tuning with the masks found, as the "
          f"saliency baseline; λ in nats per ms of link time; links: "
          + "; ".join(f"{n} {edge.EDGE_LINKS[n]}" for n in ("Wi-Fi", "Bluetooth")))


def _row(method, setting, net, world_size, dense_bytes):
    xt, yt = sensors.load("test")
    sent = sum(sum(p.values()) for p in cost.edge_bytes(CONFIG, net.masks, world_size, 1))
    ms = {n: 1e3 * cost.edge_comm_seconds(CONFIG, net.masks, world_size, 1, edge.EDGE_LINKS[n])
          for n in ("Wi-Fi", "Bluetooth")}
    return {"method": method, "setting": setting, "kept": crossing(net, world_size), "bytes": sent,
            "fewer": 1 - sent / dense_bytes, "accuracy": grouped.accuracy(net, xt, yt), "ms": ms}


def front(world_size: int):
    """Accuracy, bytes per image (all devices; closed form = ledger) and modelled link time per
    one-image request, for the search at each (link, λ) of SEARCHES and the baseline at each
    density; the table and the figure."""
    import matplotlib.pyplot as plt

    world_size = devices(world_size)
    dense_bytes = sum(sum(p.values()) for p in cost.edge_bytes(
        CONFIG, grouped.full_masks(CONFIG), world_size, 1))
    rows = [_row("saliency (ours)", f"density {d}", baseline(d), world_size, dense_bytes)
            for d in DENSITIES]
    rows += [_row("search", f"{link}, λ={price}", searched(world_size, link, price), world_size,
                  dense_bytes) for link, price in SEARCHES]
    print(f"{world_size} devices, one image per request; every transfer: {dense_bytes:,} B")
    print(f"{'method':<16} {'setting':<18} {'kept':>4} {'bytes':>7} {'fewer':>6} {'accuracy':>8} "
          f"{'Wi-Fi ms':>8} {'Bluetooth ms':>12}")
    for r in rows:
        print(f"{r['method']:<16} {r['setting']:<18} {r['kept']:>4} {r['bytes']:>7,} "
              f"{r['fewer']:>6.1%} {r['accuracy']:>8.1%} {r['ms']['Wi-Fi']:>8.2f} "
              f"{r['ms']['Bluetooth']:>12.2f}")
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
    ours = [r for r in rows if r["method"] != "search"]
    for ax, key in zip(axes, ("bytes", "Bluetooth")):
        def x_of(r, key=key):
            return r["bytes"] if key == "bytes" else r["ms"][key]
        ax.plot([x_of(r) for r in ours], [100 * r["accuracy"] for r in ours], "o--",
                label="saliency (ours), labelled by density")
        for r in ours:
            ax.annotate(r["setting"].replace("density ", ""), (x_of(r), 100 * r["accuracy"]),
                        fontsize=7, xytext=(3, -10), textcoords="offset points")
        for r, marker in zip((r for r in rows if r["method"] == "search"), "s^Dv"):
            ax.plot(x_of(r), 100 * r["accuracy"], marker, label=f"search, {r['setting']}")
    axes[0].set(xscale="symlog", xlabel="bytes per image, all devices", ylabel="test accuracy (%)")
    axes[1].set(xlabel="modelled link time per request on Bluetooth (ms)")
    axes[1].legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    _, best, rival = best_and_rival(rows)
    fig.suptitle(f"four-sensor task on {world_size} devices: the search ({best['setting']}) "
                 f"{100 * best['accuracy']:.1f}% at {best['bytes']:,} B, our saliency ranking "
                 f"{100 * rival['accuracy']:.1f}% at {rival['bytes']:,} B", fontsize=10)
    fig.tight_layout()
    return rows, fig


def by_link(rows: list) -> bool:
    """Verdict: at one price, the slower link keeps fewer transfers."""
    at = {r["setting"].split(",")[0]: r for r in rows
          if r["method"] == "search" and r["setting"].endswith(f"λ={PRICE}")}
    holds = at["Bluetooth"]["kept"] < at["Wi-Fi"]["kept"]
    print(f"λ = {PRICE}: the search keeps {at['Wi-Fi']['kept']} transfers on Wi-Fi, "
          f"{at['Bluetooth']['kept']} on Bluetooth — a slower link keeps fewer: "
          f"{'holds' if holds else 'does NOT hold'}")
    return holds


def check_ledger(world_size: int, count: int = 32) -> None:
    """The searched network split for real: its logits equal one process, the ledger equals the
    closed form, and a one-image request over Bluetooth 5 LE in paced time on the Jetson Nano
    (`edge.EDGE_DEVICE`: compute priced by its roofline, the link's α + bytes/β) beside the
    model's link time, for every transfer and for the search's masks."""
    xt, _ = sensors.load("test")
    link = edge.EDGE_LINKS["Bluetooth"]
    world_size = devices(world_size)
    for name, net in (("every transfer", baseline(1.0)),
                      ("search, Bluetooth", searched(world_size, "Bluetooth", PRICE))):
        result = edge.run_edge(net, xt[:count], world_size)
        formula = [sum(p.values()) for p in cost.edge_bytes(CONFIG, net.masks, world_size, count)]
        close = torch.allclose(result.logits, net(xt[:count]), rtol=1e-4, atol=1e-5)
        timed = edge.run_edge(net, xt[:1], world_size, link=link, clock=edge.EDGE_DEVICE)
        model = cost.edge_comm_seconds(CONFIG, net.masks, world_size, 1, link)
        print(f"{name:<18} ledger {result.bytes_per_rank(0)} closed form {formula} equal: "
              f"{result.bytes_per_rank(0) == formula}; logits equal: {close}; Bluetooth request "
              f"{timed.latency * 1e3:.2f} {timed.clock.unit} (paced, compute included), link model "
              f"{model * 1e3:.2f} ms")


def best_and_rival(rows: list) -> tuple[dict, dict, dict]:
    """(every transfer, the search's best point, our saliency point at no more bytes): the best is
    the fewest bytes within LITTLE of every transfer's accuracy, else the most accurate."""
    dense = next(r for r in rows if r["setting"] == "density 1.0")
    search = [r for r in rows if r["method"] == "search"]
    close = [r for r in search if dense["accuracy"] - r["accuracy"] <= LITTLE]
    best = (min(close, key=lambda r: r["bytes"]) if close  # fewest bytes within LITTLE of dense
            else max(search, key=lambda r: r["accuracy"]))
    rival = max((r for r in rows if r["method"] != "search" and r["bytes"] <= best["bytes"]),
                key=lambda r: r["bytes"])  # the baseline's point at the most bytes ≤ the search's
    return dense, best, rival


def saliency_at(rows: list, nbytes: int) -> dict:
    """Our saliency ranking at `nbytes`: its points just below and just above in bytes, and its
    accuracy there linearly interpolated in bytes between them (a simplification: the ranking's
    accuracy between two measured densities is not measured)."""
    ours = sorted((r for r in rows if r["method"] != "search"), key=lambda r: r["bytes"])
    below = max((r for r in ours if r["bytes"] <= nbytes), key=lambda r: r["bytes"])
    above = min((r for r in ours if r["bytes"] >= nbytes), key=lambda r: r["bytes"], default=below)
    span = above["bytes"] - below["bytes"]
    share = (nbytes - below["bytes"]) / span if span else 0.0
    accuracy = below["accuracy"] + share * (above["accuracy"] - below["accuracy"])
    return {"below": below, "above": above, "accuracy": accuracy}


def equal_bytes_line(rows: list) -> str:
    """The search's best point against our saliency ranking at the same bytes, with a verdict."""
    _, best, _ = best_and_rival(rows)
    at = saliency_at(rows, best["bytes"])
    below, above = at["below"], at["above"]
    points = 100 * (best["accuracy"] - at["accuracy"])
    return (f"the search's {best['bytes']:,} B per image against our saliency ranking's nearest "
            f"points, {below['setting']} at {below['bytes']:,} B ({below['accuracy']:.1%}) and "
            f"{above['setting']} at {above['bytes']:,} B ({above['accuracy']:.1%}): at "
            f"{best['bytes']:,} B (interpolated linearly in bytes) ours would reach "
            f"{at['accuracy']:.1%} against the search's {best['accuracy']:.1%} ({points:+.1f} "
            "points) — the search keeps more accuracy at equal bytes: "
            + ("holds even against ours at the point above" if best["accuracy"] >= above["accuracy"]
               else "holds (by the interpolation)" if points > 0 else "does NOT hold"))


def headline(rows: list) -> None:
    """The paper's headline beside ours, printed from this run, with verdicts."""
    dense, best, _ = best_and_rival(rows)
    lost = 100 * (dense["accuracy"] - best["accuracy"])
    print(f"Lin & Wang (2021): {PAPER_FEWER:.1%} less data than sending everything, accuracy "
          "little changed (their abstract; their network, data and search)")
    print(f"ours, search ({best['setting']}): {best['fewer']:.1%} fewer bytes, accuracy "
          f"{best['accuracy']:.1%} vs {dense['accuracy']:.1%} with every transfer ({lost:+.1f} "
          f"points lost; within {100 * LITTLE:g}: {'yes' if lost <= 100 * LITTLE else 'NO'}); "
          f"as many bytes saved as the paper: {'yes' if best['fewer'] >= PAPER_FEWER else 'no'}")
    print(equal_bytes_line(rows))
