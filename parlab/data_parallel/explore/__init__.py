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
from parlab.core.cost import element_bytes
from parlab.core.link import achieved_flops, faithful
from parlab.data_parallel import cost as dp_cost
from parlab.data_parallel.bench import exposed_fraction
from parlab.data_parallel.explore.measure import (  # noqa: F401 (the notebook calls ex.*)
    COMMON,
    MEASURE,
    MEASURE_LINK,
    OWN,
    VARIANTS,
    diagnosis,
    exposed_table,
    measure_alpha_beta,
    measure_regime,
    messages_per_step,
    model_terms,
    param_numels,
    per_message_overhead,
    plot_timelines,
    predicted_vs_measured,
    run_variants,
    sweep_buckets,
)
from parlab.data_parallel.explore.ratios import (  # noqa: F401 (the notebook calls ex.*)
    bucket_attribution,
    comm_ratios,
    ratio_sweep,
)


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
def bytes_table(world_size: int, model: str = "gpt", precision: str = "fp32") -> None:
    """Messages and bytes per rank per step of every variant (closed forms, parlab.data_parallel.cost);
    `precision`: the gradients' element size (4 bytes in fp32, 2 in bf16-mixed / fp16-mixed)."""
    numels = param_numels(model)
    psi, size = sum(numels), element_bytes(precision)
    print(f"Ψ = {psi:,} parameters; ring all-reduce 2(N-1)/N·Ψ·{size} = "
          f"{2 * (world_size - 1) / world_size * psi * size:,.0f} bytes per rank per step")
    for variant in OWN:
        msgs = dp_cost.messages(variant, numels, world_size, element_size=size)
        sent = dp_cost.bytes_per_step(variant, numels, world_size, 0, size)
        parts = ", ".join(f"{op} {b:,}" for op, b in sent.items())
        print(f"  {variant:<13} {len(msgs):>3} messages  rank 0 sends {parts}")


def paced_profile(world_size: int, clock: str = "A100", model: str = "gpt") -> tuple:
    """(forward, backward, optimizer) seconds of one rank's step in paced time: the operators and
    FLOPs of the model on its rows (`parlab.core.pacer.count_work`), priced by the clock exactly as
    a paced run prices them (section 5 runs them)."""
    from parlab.core import clock as clocks
    from parlab.core import pacer as pacers
    from parlab.engine.loop import build_model, make_optimizer, step_batch
    from parlab.engine.runner import make_config

    cfg = make_config("ddp-naive", world_size=world_size, model=model)
    paced = clocks.resolve(clock, world_size)
    net = build_model(cfg)
    x, y = step_batch(cfg, 0, 0, world_size)
    held = {}
    forward = pacers.count_work(lambda: held.setdefault("loss", net.loss(x, y)))
    backward = pacers.count_work(lambda: held["loss"].backward())
    optimizer = pacers.count_work(make_optimizer(net.parameters(), cfg).step)
    return tuple(paced.price(work) for work in (forward, backward, optimizer)), paced


def predicted_table(world_size: int, clock: str = "A100", model: str = "gpt") -> None:
    """α-β predicted step time of every variant on real links in virtual time (`clock`: the
    accelerator's own seconds, the real links undilated, `parlab.core.clock`), beside the paced
    compute profile of the model (`paced_profile`): what section 5 then measures."""
    from parlab.core.clock import pace_link
    from parlab.core.link import PRESETS

    (t_forward, t_backward, t_optimizer), paced = paced_profile(world_size, clock, model)
    numels = param_numels(model)
    links = {name: pace_link(PRESETS[name], paced) for name in ("NVLink", "100Gb-IB", "10GbE")}
    print(f"predicted {paced.unit} per step, N={world_size}: compute {1e3 * t_forward:.2f} + "
          f"{1e3 * t_backward:.2f} + {1e3 * t_optimizer:.2f} {paced.unit} (forward + backward + "
          "optimizer, priced by the clock); the real links")
    print(f"  {'variant':<13}" + "".join(f"{name:>10}" for name in links))
    rows = []
    for variant in OWN:
        rows.append([dp_cost.predict_step_time(variant, numels, world_size, t_forward, t_backward,
                                               t_optimizer, link.latency_s,
                                               link.bandwidth_Bps)["step_s"]
                     for link in links.values()])
        print(f"  {variant:<13}" + "".join(f"{1e3 * t:>10.3f}" for t in rows[-1]))
    spread = [max(column) / min(column) for column in zip(*rows)]  # what the schedule can change
    print("  slowest ÷ fastest variant: " + ", ".join(
        f"{name} {s:.2f}×" for name, s in zip(links, spread)))


# ----------------------------------------------------------------------------- 4. correctness
def check_all(world_size: int, steps: int = 3, model: str = "gpt", accum_steps: int = 1,
              precision: str = "fp32") -> dict:
    """Run every variant and "single" (in `precision`, where the variant honours it); print
    `match` and the ledger vs the closed form."""
    ref = parlab.run("single", model=model, steps=steps, precision=precision)
    numels = param_numels(model)
    results = {}
    for variant in VARIANTS:
        if precision not in parlab.schemes()[variant].precisions:
            print(f"{variant:<13} does not run in {precision}")
            continue
        result = parlab.run(variant, world_size=world_size, model=model, steps=steps,
                            accum_steps=accum_steps, precision=precision)
        results[variant] = result
        ok = result.compare(ref).match
        line = f"{variant:<13} match: {ok}"
        if variant in OWN:
            expect = sum(dp_cost.bytes_per_step(variant, numels, world_size, 0,
                                                element_bytes(precision),
                                                **result.config.options).values())
            got = sum(r["bytes_sent"] for r in result.ledger if r["rank"] == 0 and r["step"] == 0)
            msgs = sum(1 for r in result.ledger if r["rank"] == 0 and r["step"] == 0)
            line += f"   rank 0, step 0: {msgs:>2} messages, {got:,} bytes (closed form {expect:,})"
        print(line)
    return results


def check_accum(world_size: int, accum_steps: int, steps: int = 2) -> bool:
    """Run ddp-overlap with accumulation; True when it matches single with the same global batch."""
    ref = parlab.run("single", steps=steps)
    result = parlab.run("ddp-overlap", world_size=world_size, steps=steps, accum_steps=accum_steps)
    comparison = result.compare(ref)
    msgs = sum(1 for r in result.ledger if r["rank"] == 0) // steps
    print(f"accum_steps={accum_steps}: {comparison}; {msgs} messages per step")
    return comparison.match


# ----------------------------------------------------------------------------- widget
def panel(world_size: int, link: str, bucket_mb: float, variant: str, steps: int = 3,
          accelerator: str = "A100", clock: str = "A100") -> None:
    """Widget callback: run one variant on `link` as `accelerator` sees it — in virtual time
    (`clock` an accelerator: its own seconds on the real link) or on this CPU raw (`clock="wall"`:
    the link dilated by this machine's rate from the reference run's own compute) — check it
    against single, show bytes and one step."""
    import matplotlib.pyplot as plt

    from parlab.viz import timeline

    options = {"bucket_mb": bucket_mb} if variant != "ddp-naive" else {}
    ref = parlab.run("single", steps=steps)
    if clock == "wall":
        emulated = None if link == "loopback" else faithful(link, achieved_flops(ref), accelerator)
    else:
        emulated = None if link == "loopback" else link
    result = parlab.run(variant, world_size=world_size, steps=steps, link=emulated, clock=clock,
                        **options)
    sent = result.bytes_per_rank()
    print(f"{variant} on {world_size} rank(s), {result.config.link or 'loopback'} "
          f"({result.clock.label}): {result.compare(ref)}")
    print(f"bytes sent per rank per step: {sent[0] // steps:,}; messages per step: "
          f"{messages_per_step(result)}")
    if world_size > 1:
        print(f"median step {result.step_time(warmup=1) * 1e3:.3g} {result.clock.unit}, exposed "
              f"communication {exposed_fraction(result, 1):.0%}")
    _, ax = plt.subplots(figsize=(10, 0.8 + 0.6 * world_size))
    timeline(result.timeline, ax=ax, title=f"{variant}, N={world_size}, {link}")


def headline(runs: dict, loopback: dict | None = None, warmup: int = 1,
             predicted: dict | None = None, tolerance: float = 0.25) -> dict:
    """The chapter's headline from this run: DeAR against WFBP (ddp-overlap) and naive, step time
    and exposed communication, on the accelerator's link (and on loopback when given), each ratio
    with its verdict against the α-β model when `predicted` ({variant: (measured, predicted)},
    `predicted_vs_measured`) is given. When to use which: `explore.summary.when_to_use`."""
    out = {}
    label = next(iter(runs.values())).clock.label if runs else ""
    shown = ("ddp-naive", "ddp-overlap", "dear")  # the headline's three: naive, WFBP, DeAR
    for where, rs in ((f"link, {label}", runs), ("loopback", loopback or {})):
        if not set(shown) <= set(rs):  # a run left out: no headline there
            continue
        step = {v: rs[v].step_time(warmup) for v in shown}
        exposed = {v: exposed_fraction(rs[v], warmup) for v in step}
        out[where] = (step, exposed)
        unit = next(iter(rs.values())).clock.unit
        ms = {v: exposed[v] * step[v] * 1e3 for v in step}
        print(f"{where}: dear {step['dear'] * 1e3:.3g} {unit} vs ddp-overlap (WFBP) "
              f"{step['ddp-overlap'] * 1e3:.3g} {unit} per step = "
              f"{step['ddp-overlap'] / step['dear']:.2f}× (exposed {ms['dear']:.3g} vs "
              f"{ms['ddp-overlap']:.3g} {unit}); ddp-naive {step['ddp-naive'] * 1e3:.3g} {unit} = "
              f"{step['ddp-naive'] / step['dear']:.2f}× dear (exposed {ms['ddp-naive']:.3g} {unit})")
        if predicted and rs is runs:
            for a, b in (("ddp-overlap", "dear"), ("ddp-naive", "dear"), ("ddp-naive", "ddp-overlap")):
                got = predicted[a][0] / predicted[b][0]
                model = predicted[a][1] / predicted[b][1]
                ok = abs(got / model - 1) <= tolerance
                winner_ok = (got >= 1) == (model >= 1) or abs(model - 1) < 0.05
                print(f"  {b} over {a}: {got:.2f}× measured, {model:.2f}× by the α-β model: "
                      + ("agrees" if ok and winner_ok else "does NOT agree")
                      + f" (±{tolerance:.0%})"
                      + ("" if ok and winner_ok else " — " + _why_not(rs, a, b)))
    return out


def _why_not(rs: dict, a: str, b: str) -> str:
    """Why a measured ratio misses the model, from the runs: on this CPU's raw clock its
    per-message overhead and contention; in virtual time (bit-reproducible, so never the
    machine's load) the schedule's own order, which the model does not capture."""
    if not rs[a].clock.paced:
        return "this CPU, raw: per-message overhead and contention for its cores are not in the model"
    return ("the measured steps include what the model idealizes (which message waits behind "
            "which: each layer's update waits for its own all-reduce)")
