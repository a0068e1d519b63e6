"""Sparse against dense at equal *active* parameters: `ep`, `ep-allgather`, the same MoE with its
experts replicated (`ep` at ep = 1: data parallel only) and the tiny GPT.

Shazeer et al. 2017: an MoE layer adds parameters, not FLOPs per token, so the fair dense
baseline has the parameters each token uses: router C·E plus k experts of width h against the
dense MLP's 2·C·4C, equal when

    C·E + 2·C·k·h = 8·C²   ⇔   h = (8C − E) / (2k)      (C = 32, E = 4: h = 63 at k = 2, 126 at k = 1)

Equal active parameters mean equal FLOPs per token (Kaplan et al. 2020), so the cost model
predicts equal compute plus each run's α-β communication (`parlab.core.link.Link.cost`, bytes
from the ledger); the measurement adds what it leaves out. Virtual time (`clock="A100"`) by
default. When the all-to-all beats all-gather (this chapter's byte ratio, about ep/k) and why
`TIMING_LINK` is the real 10GbE: docs/expert_parallel.md, `parlab.expert_parallel.explore.dense`.
"""

from __future__ import annotations

import parlab
from parlab.core.link import resolve
from parlab.models import build_model, model_config

DENSE_SCHEME = ("ddp-bucketed", {"bucket_mb": 25.0})  # one flat all-reduce of every gradient
TIMING_LINK = "10GbE"  # where the bytes weigh against the tiny GPT's step (module docstring)
TIMING_BATCH = 256  # sequences of 32 tokens: 4,096 tokens per rank at 2 ranks
TIMING_TOP_K = 1  # Switch's k = 1: all-gather moves ~ep/k = 2× the all-to-all's bytes at ep = 2
RUNS = ("ep", "ep-allgather", "replicated", "dense")  # replicated: the MoE at ep = 1 (dp only)


def equal_active_width(top_k: int, n_experts: int, n_embd: int) -> int:
    """h with C·E + 2·C·k·h = 8·C² (the dense MLP); ValueError when no integer h exists."""
    twice = 8 * n_embd - n_experts
    if twice <= 0 or twice % (2 * top_k):
        raise ValueError(f"no integer expert width gives top_k={top_k} experts of n_experts="
                         f"{n_experts} the active parameters of a dense MLP of width 4·n_embd="
                         f"{4 * n_embd}: (8·{n_embd} − {n_experts}) / (2·{top_k}) is not a "
                         "positive int")
    return twice // (2 * top_k)


def moe_overrides(top_k: int, n_experts: int = 4) -> dict:
    """gpt-moe overrides whose active parameters equal the tiny GPT's (no capacity: no drops)."""
    n_embd = model_config("gpt-moe").n_embd
    return {"top_k": top_k, "n_experts": n_experts, "capacity_factor": None,
            "expert_hidden": equal_active_width(top_k, n_experts, n_embd)}


def active_parameters(overrides: dict) -> dict[str, int]:
    """Parameters counted on the built models: the MoE's total and active (all but E − k experts
    per MoE block), and the dense GPT's."""
    m = model_config("gpt-moe", overrides)
    moe = build_model("gpt-moe", m, seed=0)
    total = sum(p.numel() for p in moe.parameters())
    experts = sum(p.numel() for name, p in moe.named_parameters()
                  if name.endswith(("mlp.w_in", "mlp.w_out")))  # (E, C, h), (E, h, C) stacks
    active = total - experts * (m.n_experts - m.top_k) // m.n_experts
    dense = sum(p.numel() for p in build_model("gpt", model_config("gpt"), seed=0).parameters())
    return {"moe_total": total, "moe_active": active, "dense": dense}


def _run(name: str, world_size: int, steps: int, overrides: dict, link, clock, batch_size):
    common = {"clock": clock, **({"batch_size": batch_size} if batch_size else {})}
    if name == "dense":
        scheme, options = DENSE_SCHEME
        return parlab.run(scheme, world_size=world_size, model="gpt", steps=steps, link=link,
                          **options, **common)
    if name == "replicated":  # ep = 1: every rank all experts, their gradients all-reduced
        return parlab.run("ep", world_size=world_size, model="gpt-moe", steps=steps, ep=1,
                          model_config=overrides, link=link, **common)
    return parlab.run(name, world_size=world_size, model="gpt-moe", steps=steps,
                      model_config=overrides, link=link, **common)


def link_seconds(result, link, steps: int, rank: int = 0) -> float:
    """Σ Link.cost(bytes, rounds) over `rank`'s collectives, per step (the α-β prediction)."""
    if link is None:
        return 0.0
    records = [r for r in result.ledger if r["rank"] == rank]
    return sum(link.cost(r["bytes_sent"], r["rounds"]) for r in records) / steps


def compare(world_size: int, link: str = TIMING_LINK, steps: int = 4, top_k: int = 2,
            clock: str = "A100", batch_size: int | None = None) -> dict:
    """Run the three on loopback and on `link` in one go, on `clock` (paced by default):
    {link: {name: {...}}}; each row's `link` is the link the run emulated (paced under a paced
    clock), `clock` its label."""
    overrides = moe_overrides(top_k)
    out = {}
    for name_link in ("loopback", link):
        emulated = resolve(name_link)
        rows = {}
        for name in RUNS:
            result = _run(name, world_size, steps, overrides, emulated, clock, batch_size)
            ran = result.config.link  # the paced link on a paced clock
            rows[name] = {"seconds": result.step_time(),
                          "bytes": result.bytes_per_rank()[0] // steps,
                          "link_s": link_seconds(result, ran, steps), "link": ran,
                          "clock": result.clock.label,
                          "messages": max((r["bytes_sent"] for r in result.ledger
                                           if r["rank"] == 0 and r["phase"] in
                                           ("dispatch", "gather")), default=0)}
        out[name_link] = rows
    compute = out["loopback"]["dense"]["seconds"]  # equal FLOPs: the dense step's compute
    for rows in out.values():
        for row in rows.values():
            row["predicted"] = compute + row["link_s"]
    return out


def diagnose(rows: dict, loopback: dict) -> list[str]:
    """Every pair whose measured order on the link contradicts the predicted one, split into the
    two measured parts of the gap: the loopback difference (compute, routing, gloo — the model
    says 0) and what the link added to each run (the model says its α-β sum)."""
    lines = []
    names = list(rows)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            predicted = rows[first]["predicted"] < rows[second]["predicted"]
            measured = rows[first]["seconds"] < rows[second]["seconds"]
            if predicted == measured:
                continue
            a, b = (second, first) if measured else (first, second)  # a: measured slower
            loop_gap = loopback[a]["seconds"] - loopback[b]["seconds"]
            added = {n: rows[n]["seconds"] - loopback[n]["seconds"] for n in (a, b)}
            link_gap, model_gap = added[a] - added[b], rows[a]["link_s"] - rows[b]["link_s"]
            cause = (f"{a}'s loopback step is slower by {1e3 * loop_gap:.3f} ms (work the FLOP "
                     "model leaves out)" if loop_gap >= link_gap - model_gap else
                     f"the link added {1e3 * added[a]:.3f} ms to {a} against α-β's "
                     f"{1e3 * rows[a]['link_s']:.3f} ms, and {1e3 * added[b]:.3f} ms to {b} against "
                     f"{1e3 * rows[b]['link_s']:.3f} ms: the α-β sum misses "
                     f"{1e3 * (link_gap - model_gap):.3f} ms of the difference")
            lines.append(f"{b} < {a} measured ({1e3 * (rows[a]['seconds'] - rows[b]['seconds']):.3f}"
                         f" ms), predicted the other way ({1e3 * -model_gap:.3f} ms): {cause}")
    return lines


def miss_lines(rows: dict, loopback: dict, unit: str, tolerance: float = 0.15) -> list[str]:
    """Each MoE run's miss on the link (measured − predicted) split into its two measured parts:
    its own loopback excess over the dense step (operators the FLOP count leaves out) and what the
    link added beyond the ledger's α-β sum; then the prediction that starts from the run's own
    loopback step instead of the dense one, with a verdict at `tolerance`."""
    lines = []
    dense = loopback["dense"]["seconds"]
    for name, row in rows.items():
        if name == "dense":
            continue
        miss = row["seconds"] - row["predicted"]
        excess = loopback[name]["seconds"] - dense
        beyond = (row["seconds"] - loopback[name]["seconds"]) - row["link_s"]
        own = loopback[name]["seconds"] + row["link_s"]
        err = row["seconds"] / own - 1
        lines.append(f"{name} measured {1e3 * row['seconds']:.3f} vs predicted "
                     f"{1e3 * row['predicted']:.3f} {unit} ({100 * miss / row['predicted']:+.0f}%) = "
                     f"{1e3 * excess:+.3f} loopback excess over dense (routing and index operators) "
                     f"{1e3 * beyond:+.3f} the link beyond the ledger's α-β sum; from its own "
                     f"loopback step: predicted {1e3 * own:.3f} {unit}, off {100 * err:+.0f}% — "
                     + (f"within {100 * tolerance:.0f}%: holds" if abs(err) <= tolerance else
                        f"beyond {100 * tolerance:.0f}%: the α-β sum itself misses"))
    return lines


def print_comparison(world_size: int, link: str = TIMING_LINK, steps: int = 4, top_k: int = 2,
                     clock: str = "A100", batch_size: int | None = None) -> dict:
    """Parameter counts, then each link's step times beside the prediction, ratios, diagnosis,
    and the verdict on the lesson: all-to-all beats all-gather on `link`."""
    counts = active_parameters(moe_overrides(top_k))
    h = moe_overrides(top_k)["expert_hidden"]
    print(f"gpt-moe (E=4, k={top_k}, expert width {h}): {counts['moe_total']:,} parameters, "
          f"{counts['moe_active']:,} active per token; dense gpt: {counts['dense']:,} — "
          f"{'equal' if counts['moe_active'] == counts['dense'] else 'NOT equal'}")
    out = compare(world_size, link, steps, top_k, clock, batch_size)
    print(f"clock: {out[link]['ep']['clock']}; batch {batch_size or 'default'}")
    for name_link, rows in out.items():
        dense = rows["dense"]["seconds"]
        paced = rows["ep"]["clock"] != "this CPU, raw"
        unit = rows["ep"]["clock"].split()[0] + " ms" if paced else "ms"  # "A100 ms"
        note = (" (no emulated link: communication free in virtual time)"
                if name_link == "loopback" and paced else "")
        print(f"\n{name_link}{note}, {world_size} ranks: {'':<13} {'measured':>9} {'predicted':>10} "
              f"{'vs dense':>9} {'B/step':>9}")
        for name, row in rows.items():
            print(f"{'':<20}{name:<13} {1e3 * row['seconds']:>7.3f} {unit} "
                  f"{1e3 * row['predicted']:>8.3f} {unit} "
                  f"{row['seconds'] / dense:>8.2f}× {row['bytes']:>9,}")
        if name_link == "loopback":
            print("  equal FLOPs predict equal steps; measured excess over dense: " + ", ".join(
                f"{n} {1e3 * (r['seconds'] - dense):+.3f} {unit}" for n, r in rows.items()
                if n != "dense") + " (routing, all-to-all index work: operators the FLOP count "
                "leaves out" + (")" if paced else ", gloo's per-op overhead)"))
        else:
            lines = diagnose(rows, out["loopback"])
            for line in lines:
                print("  diagnosis:", line)
            if not lines:
                print("  measured order = predicted order")
            for line in miss_lines(rows, out["loopback"], unit):
                print("  why the model misses:", line)
    verdict(out, link, world_size, top_k)
    return out


def verdict(out: dict, link: str, world_size: int, top_k: int) -> dict:
    """The lesson, from this run: ep-allgather's step time over ep's on `link` (> 1: the all-to-all
    wins), beside the α-β prediction and the regime (k against ep, the largest dispatch or gather
    message against the link's α·β); where it does not hold, which measured part says why."""
    rows, loop = out[link], out["loopback"]
    ratio = rows["ep-allgather"]["seconds"] / rows["ep"]["seconds"]
    predicted = rows["ep-allgather"]["predicted"] / rows["ep"]["predicted"]
    ran = rows["ep"]["link"]
    ab = ran.latency_s * ran.bandwidth_Bps  # bytes that cost as long as one latency
    message = rows["ep"]["messages"]
    holds = ratio > 1
    print(f"\nep-allgather / ep on {link}: {ratio:.2f}× the step time (α-β model {predicted:.2f}×), "
          f"bytes {rows['ep-allgather']['bytes'] / rows['ep']['bytes']:.2f}×; regime: k={top_k} "
          f"{'<' if top_k < world_size else '≥'} ep={world_size}, largest dispatch "
          f"{message:,} B = {message / ab:.2f}× the link's α·β ({ab:,.0f} B) — all-to-all beats "
          f"all-gather: "
          f"{'HOLDS' if holds else 'DOES NOT HOLD'}")
    if not holds:
        gap = loop["ep-allgather"]["seconds"] - loop["ep"]["seconds"]
        print(f"  diagnosis: without a link ep-allgather is {1e3 * gap:+.3f} ms against ep (work the "
              f"byte count leaves out); the link adds {1e3 * rows['ep-allgather']['link_s']:.3f} "
              f"against {1e3 * rows['ep']['link_s']:.3f} ms (α-β)"
              + (" — messages below α·β: latency, which both pay alike, decides"
                 if message < ab / 4 else ""))
    return {"ratio": ratio, "predicted": predicted, "holds": holds, "message": message, "ab": ab}


def draw_times(out: dict):
    """Step time per method on each link, measured (bars) beside the α-β prediction (ticks), in
    milliseconds of the run's clock: the comparison `print_comparison` tabulates."""
    import matplotlib.pyplot as plt

    links = list(out)
    names = list(out[links[0]])
    fig, axes = plt.subplots(1, len(links), figsize=(4.2 * len(links), 2.9), squeeze=False)
    for ax, name_link in zip(axes[0], links):
        rows = out[name_link]
        measured = [1e3 * rows[n]["seconds"] for n in names]
        predicted = [1e3 * rows[n]["predicted"] for n in names]
        colors = ["tab:blue", "tab:orange", "tab:green", "tab:grey"][:len(names)]
        ax.bar(names, measured, color=colors, label="measured")
        ax.scatter(names, predicted, marker="_", s=900, color="black", zorder=3,
                   label="α-β prediction")
        ax.set_ylabel(f"ms per step ({rows[names[0]]['clock']})", fontsize=8)
        ax.set_title(name_link, fontsize=9)
    axes[0][0].legend(fontsize=7, loc="upper right")
    slower = out[links[-1]]["ep-allgather"]["seconds"] / out[links[-1]]["ep"]["seconds"]
    fig.suptitle(f"on {links[-1]}, all-gather takes {slower:.2f}× the all-to-all's step", fontsize=10)
    fig.tight_layout()
    return fig
