"""What notebooks/01_data_parallel.ipynb runs: experiments, tables, plots, widget callback, checks.

Chapter 01 follows DeAR (Zhang et al., ICDCS 2023) and its baselines — WFBP, ByteScheduler/P3 —
from the naive all-reduce after backward to DeAR's reduce-scatter/all-gather pipelining, with
MAD-Max's (ISCA 2024) exposed-communication fraction as the measure of what each one hides.
Everything here drives `parlab.run`; nothing is simulated except where it says "predicted".
"""

from __future__ import annotations

import torch

import parlab
from parlab import models
from parlab.core.link import resolve
from parlab.data_parallel import cost as dp_cost
from parlab.data_parallel.bench import compute_profile, exposed_fraction, forward_starts
from parlab.data_parallel.buckets import plan_buckets

VARIANTS = ["ddp-naive", "ddp-bucketed", "ddp-overlap", "ddp-priority", "dear", "torch-ddp"]
OWN = VARIANTS[:5]


def param_numels(model: str = "gpt") -> list[int]:
    net = models.build_model(model, models.model_config(model), 0)
    return [p.numel() for p in net.parameters()]


# ----------------------------------------------------------------------------- 1. intuition
def gradient_average_demo(world_size: int, model: str = "gpt", batch_size: int = 12) -> dict:
    """In one process: the mean of the shards' gradients is the whole batch's gradient; the sum
    is N times too large. Returns the max differences."""
    from parlab.models.data import global_batch, shard

    net = models.build_model(model, models.model_config(model), 0)
    x, y = global_batch(model, 0, batch_size, 0)

    def grads(xs, ys):
        net.zero_grad()
        net.loss(xs, ys).backward()
        return torch.cat([p.grad.reshape(-1) for p in net.parameters()])  # (Ψ,)

    full = grads(x, y)
    shards = [grads(*shard((x, y), r, world_size)) for r in range(world_size)]
    mean, total = torch.stack(shards).mean(0), torch.stack(shards).sum(0)  # (Ψ,) each
    out = {"mean_vs_full": (mean - full).abs().max().item(),
           "sum_vs_full": (total - full).abs().max().item(),
           "one_shard_vs_full": (shards[0] - full).abs().max().item()}
    print(f"world_size={world_size}: max |mean of shard grads - full grad| = "
          f"{out['mean_vs_full']:.1e}; sum instead of mean: {out['sum_vs_full']:.1e}; "
          f"one shard alone: {out['one_shard_vs_full']:.1e}")
    return out


# ----------------------------------------------------------------------------- 2. math
def bytes_table(world_size: int, model: str = "gpt") -> None:
    """Messages and bytes per rank per step of every variant (closed forms, parlab.data_parallel.cost)."""
    numels = param_numels(model)
    psi = sum(numels)
    print(f"Ψ = {psi:,} parameters; ring all-reduce 2(N-1)/N·Ψ·4 = "
          f"{2 * (world_size - 1) / world_size * psi * 4:,.0f} bytes per rank per step")
    for variant in OWN:
        msgs = dp_cost.messages(variant, numels, world_size)
        sent = dp_cost.bytes_per_step(variant, numels, world_size, 0)
        parts = ", ".join(f"{op} {b:,}" for op, b in sent.items())
        print(f"  {variant:<13} {len(msgs):>3} messages  rank 0 sends {parts}")


def predicted_table(world_size: int, t_forward=0.01, t_backward=0.02, t_optimizer=0.005) -> None:
    """α-β predicted step time of every variant on every link preset, for a given compute."""
    numels = param_numels()
    links = ["loopback", "100Gb-IB", "10GbE", "1GbE"]
    print(f"predicted ms per step, N={world_size}, compute {1e3 * (t_forward + t_backward + t_optimizer):.0f}"
          " ms (forward + backward + optimizer)")
    print(f"  {'variant':<13}" + "".join(f"{name:>10}" for name in links))
    for variant in OWN:
        row = []
        for name in links:
            link = resolve(name)
            alpha, beta = (link.latency_s, link.bandwidth_Bps) if link else (0.0, float("inf"))
            row.append(dp_cost.predict_step_time(variant, numels, world_size, t_forward,
                                                 t_backward, t_optimizer, alpha, beta)["step_s"])
        print(f"  {variant:<13}" + "".join(f"{1e3 * t:>10.1f}" for t in row))


# ----------------------------------------------------------------------------- 4. correctness
def check_all(world_size: int, steps: int = 3, model: str = "gpt", accum_steps: int = 1) -> dict:
    """Run every variant and "single"; print `match` and the ledger vs the closed form."""
    ref = parlab.run("single", model=model, steps=steps)
    numels = param_numels(model)
    results = {}
    for variant in VARIANTS:
        result = parlab.run(variant, world_size=world_size, model=model, steps=steps,
                            accum_steps=accum_steps)
        results[variant] = result
        ok = result.compare(ref).match
        line = f"{variant:<13} match: {ok}"
        if variant in OWN:
            expect = sum(dp_cost.bytes_per_step(variant, numels, world_size, 0,
                                                **result.config.options).values())
            got = sum(r["bytes_sent"] for r in result.ledger if r["rank"] == 0 and r["step"] == 0)
            msgs = sum(1 for r in result.ledger if r["rank"] == 0 and r["step"] == 0)
            line += f"   rank 0, step 0: {msgs:>2} messages, {got:,} bytes (closed form {expect:,})"
        print(line)
    return results


# ----------------------------------------------------------------------------- 5. measurement
def run_variants(world_size: int, link, steps: int = 4, variants=VARIANTS, **options) -> dict:
    out = {}
    for variant in variants:
        extra = dict(options)
        if variant == "torch-ddp":
            extra = {k: v for k, v in extra.items() if k in ("bucket_mb", "accum_steps")}
        elif variant in ("dear", "ddp-priority"):
            extra.pop("algo", None)
        out[variant] = parlab.run(variant, world_size=world_size, steps=steps, link=link, **extra)
    return out


def last_step(events: list[dict], steps: int) -> list[dict]:
    """Events of the last two steps (from the last-but-one forward start), shifted to start at 0."""
    starts = forward_starts(events, 0)
    t0 = starts[max(len(starts) - 2, 0)]
    chosen = [e for e in events if e["t1"] > t0]
    return [{**e, "t0": max(e["t0"], t0) - t0, "t1": e["t1"] - t0} for e in chosen]


def plot_timelines(results: dict, steps: int, title: str = ""):
    """Gantt charts of the last two steps, one panel per variant, on a shared time axis."""
    import matplotlib.pyplot as plt

    from parlab.viz import timeline

    cut = {v: last_step(r.timeline, steps) for v, r in results.items()}
    t_max = max(e["t1"] for events in cut.values() for e in events)
    fig, axes = plt.subplots(len(cut), 1, figsize=(10, 1.3 * len(cut) * 1.2), sharex=True)
    for ax, (variant, events) in zip(axes, cut.items()):
        timeline(events, ax=ax, title=f"{variant} — {title}", t_max=t_max)
    fig.tight_layout()
    return fig


def exposed_table(results: dict, warmup: int = 1) -> dict:
    """Median step time and exposed-communication fraction per variant (measured)."""
    rows = {}
    for variant, result in results.items():
        rows[variant] = (result.step_time(warmup=warmup) * 1e3,
                         exposed_fraction(result, warmup))
        step_ms, share = rows[variant]
        print(f"  {variant:<13} step {step_ms:7.1f} ms   blocked on communication "
              f"{share * step_ms:7.1f} ms = {share:4.0%} of the step")
    return rows


def predicted_vs_measured(results: dict, world_size: int, link, warmup: int = 1) -> None:
    """Each variant's measured step time beside the α-β prediction from measured compute."""
    naive = results["ddp-naive"]
    t_f, t_b, t_o = compute_profile(naive, warmup)
    numels = [v.numel() for v in naive.state.values()]
    gloo = dp_cost.measure_alpha_beta(world_size)
    resolved = resolve(link)
    alpha, beta = (resolved.latency_s, resolved.bandwidth_Bps) if resolved else (gloo.alpha, gloo.beta)
    print(f"link {resolved or 'loopback'}; gloo floor α={gloo.alpha * 1e3:.2f} ms, "
          f"β={gloo.beta / 1e6:.0f} MB/s; compute {1e3 * (t_f + t_b + t_o):.1f} ms/step")
    for variant, result in results.items():
        kind = "ddp-overlap" if variant == "torch-ddp" else variant
        predicted = dp_cost.predict_step_time(kind, numels, world_size, t_f, t_b, t_o, alpha, beta,
                                              (gloo.alpha, gloo.beta), **result.config.options)
        measured = result.step_time(warmup=warmup)
        print(f"  {variant:<13} measured {measured * 1e3:7.1f} ms   predicted "
              f"{predicted['step_s'] * 1e3:7.1f} ms")


def sweep_links(world_size: int, steps: int = 4, links=("loopback", "10GbE", "1GbE"),
                variants=("ddp-naive", "ddp-overlap", "dear")):
    """Measured step time vs link preset for a few variants, with the α-β prediction."""
    import matplotlib.pyplot as plt

    numels = param_numels()
    gloo = dp_cost.measure_alpha_beta(world_size)
    fig, ax = plt.subplots(figsize=(7, 4))
    for variant in variants:
        measured, predicted = [], []
        for name in links:
            result = parlab.run(variant, world_size=world_size, steps=steps,
                                link=None if name == "loopback" else name)
            measured.append(result.step_time(warmup=1) * 1e3)
            link = resolve(name)
            alpha, beta = (link.latency_s, link.bandwidth_Bps) if link else (gloo.alpha, gloo.beta)
            t_f, t_b, t_o = compute_profile(result, 1)
            predicted.append(1e3 * dp_cost.predict_step_time(
                variant, numels, world_size, t_f, t_b, t_o, alpha, beta,
                (gloo.alpha, gloo.beta))["step_s"])
        line = ax.plot(links, predicted, "--")[0]
        ax.plot(links, measured, "o-", color=line.get_color(), label=variant)
        print(f"  {variant:<12}" + "  ".join(f"{n}: {m:6.1f} ms (pred {p:6.1f})"
                                             for n, m, p in zip(links, measured, predicted)))
    ax.set_ylabel("step time (ms)")
    ax.set_title(f"step time vs link, N={world_size} (dashed: α-β prediction)")
    ax.legend(fontsize="small")
    return fig


def sweep_buckets(world_size: int, link="1GbE", steps: int = 4, sizes=(0.0, 0.01, 0.05, 1.0)):
    """ddp-overlap's step time and message count vs bucket_mb (latency vs overlap granularity)."""
    numels = param_numels()
    for bucket_mb in sizes:
        result = parlab.run("ddp-overlap", world_size=world_size, steps=steps, link=link,
                            bucket_mb=bucket_mb)
        step = result.step_time(warmup=1) * 1e3
        print(f"  bucket_mb={bucket_mb:<5} {len(plan_buckets(numels, bucket_mb)):>3} buckets  "
              f"step {step:7.1f} ms   exposed {exposed_fraction(result, 1):4.0%}")


# ----------------------------------------------------------------------------- widget
def panel(world_size: int, link: str, bucket_mb: float, variant: str, steps: int = 3) -> None:
    """Widget callback: run one variant, check it against single, show bytes and a timeline."""
    import matplotlib.pyplot as plt

    from parlab.viz import timeline

    options = {"bucket_mb": bucket_mb} if variant != "ddp-naive" else {}
    result = parlab.run(variant, world_size=world_size, steps=steps,
                        link=None if link == "loopback" else link, **options)
    ref = parlab.run("single", steps=steps)
    sent = result.bytes_per_rank()
    print(f"{variant} on {world_size} rank(s): {result.compare(ref)}")
    print(f"bytes sent per rank per step: {sent[0] // steps:,}; messages per step: "
          f"{sum(1 for r in result.ledger if r['rank'] == 0) // steps}")
    if world_size > 1:
        print(f"median step {result.step_time(warmup=1) * 1e3:.1f} ms, exposed "
              f"communication {exposed_fraction(result, 1):.0%}")
    _, ax = plt.subplots(figsize=(10, 0.8 + 0.6 * world_size))
    timeline(result.timeline, ax=ax, title=f"{variant}, N={world_size}, {link}")


# ----------------------------------------------------------------------------- exercises
def check_bucket_count(answer: int, bucket_mb: float, model: str = "gpt") -> bool:
    expect = len(plan_buckets(param_numels(model), bucket_mb))
    print("correct" if answer == expect else f"not quite: {answer} (hint: pack from the last "
          "parameter, close a bucket before it would exceed the cap)")
    return answer == expect


def check_dear_bytes(answer: int, world_size: int, bucket_mb: float = 0.05) -> bool:
    """Bytes rank 0 sends per step in DeAR (reduce-scatter + all-gather), closed form."""
    expect = sum(dp_cost.bytes_per_step("dear", param_numels(), world_size, 0,
                                        bucket_mb=bucket_mb).values())
    print("correct" if answer == expect else f"not quite: {answer:,} (hint: buckets are padded "
          "to a multiple of N, and each half moves (N-1)/N of it)")
    return answer == expect


def check_accum(world_size: int, accum_steps: int, steps: int = 2) -> bool:
    """Run ddp-overlap with accumulation; True when it matches single with the same global batch."""
    ref = parlab.run("single", steps=steps)
    result = parlab.run("ddp-overlap", world_size=world_size, steps=steps, accum_steps=accum_steps)
    comparison = result.compare(ref)
    msgs = sum(1 for r in result.ledger if r["rank"] == 0) // steps
    print(f"accum_steps={accum_steps}: {comparison}; {msgs} messages per step")
    return comparison.match
