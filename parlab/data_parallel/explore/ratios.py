"""Chapter 01's communication ÷ compute, named three ways, the sweep over it, and what bucketing's
gain is made of (fewer messages or overlap), all from the chapter's runs.

Bandwidth only: a ring all-reduce sends 2(N−1)/N·4Ψ bytes per rank (Patarasuk & Yuan, JPDC 2009)
and a step computes 6Ψτ FLOPs on τ tokens per rank (Kaplan et al., 2020), so the ratio is
8(N−1)F/(6Nτβ): Ψ cancels. The sweep's x adds the link's α per round for one step's buckets; the
summary's ratio is what ddp-naive actually sat blocked. WFBP: Zhang et al., Poseidon, ATC 2017;
tensor fusion: Sergeev & Del Balso, Horovod, 2018.
"""

from __future__ import annotations

import parlab
from parlab.core.link import achieved_flops
from parlab.data_parallel import cost as dp_cost
from parlab.data_parallel.bench import compute_profile, exposed_fraction, measure_alpha_beta
from parlab.data_parallel.bucket_packing import plan_buckets
from parlab.data_parallel.explore.measure import COMMON, diagnosis, messages_per_step

TOLERANCE = 0.05  # a point "on" a model line: within 5% (virtual time is exact; the model idealizes waits)


def comm_ratios(regime: dict, world_size: int, warmup: int = 1) -> dict:
    """Print and return the three communication ÷ compute numbers of the link's runs, each named:
    bandwidth only (the closed form 8(N−1)F/(6Nτβ), checked against the bytes ÷ β of this run), the
    sweep's x (one step's buckets on the link: α per round and bytes, ÷ the whole step's compute)
    and the summary's (ddp-naive's blocked time ÷ the rest of its step: every message, α, bytes)."""
    naive = regime["faithful"]["ddp-naive"]
    cfg, link = naive.config, regime["link"]
    numels = [t.numel() for t in naive.state.values()]
    psi, n = sum(numels), world_size
    t_f, t_b, t_o = compute_profile(naive, warmup)
    tau = cfg.batch_size // n * cfg.model_config.block_size  # tokens per rank per step
    flops = achieved_flops(naive, warmup)  # 6Ψτ over measured forward + backward
    closed = 8 * (n - 1) * flops / (6 * n * tau * link.bandwidth_Bps)
    direct = 2 * (n - 1) / n * 4 * psi / link.bandwidth_Bps / (t_f + t_b)
    sweep = dp_cost.predict_step_time("ddp-bucketed", numels, n, t_f, t_b, t_o, link.latency_s,
                                      link.bandwidth_Bps, **regime["options"])["comm_s"]
    share = exposed_fraction(naive, warmup)
    unit = naive.clock.unit
    same = abs(closed / direct - 1) < 1e-6
    print(f"communication ÷ compute, three ways (N={n}, {link.name.split(',')[0]}, {unit}; "
          f"Ψ = {psi:,} parameters, {len(numels)} gradient tensors):")
    print(f"  bandwidth only, 8(N−1)F/(6Nτβ) with F = {flops / 1e12:.3g} TFLOP/s achieved, "
          f"τ = {tau} tokens/rank: {closed:.2f}  (2(N−1)/N·4Ψ/β ÷ forward+backward = "
          f"{direct:.2f}: {'the same' if same else 'DIFFERENT'})")
    print(f"  the sweep's x, one step's {len(plan_buckets(numels, regime['options']['bucket_mb']))} "
          f"buckets with α per round ÷ forward+backward+optimizer: {sweep / (t_f + t_b + t_o):.2f}")
    print(f"  the summary's, ddp-naive's blocked time ÷ the rest of its step "
          f"({messages_per_step(naive)} messages: α, bytes and waits): {share / (1 - share):.2f}")
    return {"bandwidth_only": closed, "sweep_x": sweep / (t_f + t_b + t_o),
            "naive_exposed": share / (1 - share)}


def bucket_attribution(runs: dict, world_size: int, link, steps: int = 3, clock: str = "A100",
                       single_mb: float = 4.0, warmup: int = 1, **options) -> dict:
    """What bucketing's gain over ddp-naive is made of: fewer messages (ddp-bucketed, nothing
    overlapped, at one bucket and at the chapter's buckets) or overlap (ddp-overlap at the same
    buckets). Runs the two one-bucket variants; prints each step and the split, with its verdict."""
    common = {k: v for k, v in options.items() if k in COMMON}
    mb = options.get("bucket_mb", 0.5)
    step = {"ddp-naive": runs["ddp-naive"].step_time(warmup),
            f"ddp-bucketed {mb:g} MiB": runs["ddp-bucketed"].step_time(warmup),
            f"ddp-overlap {mb:g} MiB": runs["ddp-overlap"].step_time(warmup)}
    msgs = {"ddp-naive": messages_per_step(runs["ddp-naive"]),
            f"ddp-bucketed {mb:g} MiB": messages_per_step(runs["ddp-bucketed"]),
            f"ddp-overlap {mb:g} MiB": messages_per_step(runs["ddp-overlap"])}
    for variant in ("ddp-bucketed", "ddp-overlap"):
        r = parlab.run(variant, world_size=world_size, steps=steps, link=link, clock=clock,
                       **common, bucket_mb=single_mb)
        step[f"{variant} {single_mb:g} MiB"], msgs[f"{variant} {single_mb:g} MiB"] = (
            r.step_time(warmup), messages_per_step(r))
    unit = runs["ddp-naive"].clock.unit
    for name, s in sorted(step.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<22} {msgs[name]:>3} message{'' if msgs[name] == 1 else 's'} per step   "
              f"step {s * 1e3:6.3g} {unit}")
    naive, fused, both = (step["ddp-naive"], step[f"ddp-bucketed {mb:g} MiB"],
                          step[f"ddp-overlap {mb:g} MiB"])
    total, fewer, overlap = naive - both, naive - fused, fused - both
    print(f"  ddp-naive → ddp-overlap ({mb:g} MiB) saves {total * 1e3:.3g} {unit}: fewer messages "
          f"(ddp-naive → ddp-bucketed, same buckets, nothing overlapped) {fewer * 1e3:.3g} {unit} = "
          f"{fewer / total:.0%}, overlap (same buckets) {overlap * 1e3:.3g} {unit} = {overlap / total:.0%}")
    single = step[f"ddp-bucketed {single_mb:g} MiB"]
    print(f"  one bucket without overlap: {single * 1e3:.3g} {unit}, "
          + (f"{(single - both) / both:.0%} slower than overlap's best"
             if single > both else "as fast as overlap or faster")
          + " — " + ("most of bucketing's gain is fewer messages, not overlap" if fewer > overlap
                     else "most of the gain is overlap"))
    alone = step[f"ddp-overlap {single_mb:g} MiB"] - single  # one bucket: ready only as backward ends
    print(f"  overlap at one bucket ({single_mb:g} MiB): {alone * 1e3:+.3g} {unit} against no overlap — "
          + ("slower: its only bucket is complete when backward ends, so nothing overlaps, and its "
             "hooks still copy each gradient into the bucket inside backward (priced)" if alone > 0
             else "no slower: the copies into the bucket cost nothing here"))
    return {"step_s": step, "messages": msgs, "fewer_s": fewer, "overlap_s": overlap,
            "one_bucket_overlap_s": alone}


def ratio_sweep(regime: dict, world_size: int, warmup: int = 1,
                variants=("ddp-naive", "ddp-bucketed", "ddp-overlap", "ddp-priority", "dear"),
                floor=None, overhead_s: float = 0.0):
    """Step time ÷ compute time against the sweep's x (one step's ddp-bucketed buckets on the link,
    ÷ compute). Lines: the α-β model with the link's time scaled ×0.01 to ×20; points: the runs on
    the link (□) and, on this CPU's raw clock only, on loopback (○). Dotted 1 + x is ddp-bucketed's
    own line (nothing hidden); each point is judged against 1 + its own variant's communication ÷
    compute, printed."""
    import matplotlib.pyplot as plt
    import numpy as np

    naive = regime["faithful"]["ddp-naive"]
    profile = compute_profile(naive, warmup)  # the lines: the link's runs' own compute
    compute = sum(profile)
    numels = [v.numel() for v in naive.state.values()]
    link, options = regime["link"], regime["options"]
    paced = regime["clock"].paced
    if floor is None:  # paced: the link alone; raw: gloo's own α-β, fitted now
        gloo = None if paced else measure_alpha_beta(world_size)
        floor = (gloo.alpha, gloo.beta) if gloo else (0.0, float("inf"))

    def predict(variant, alpha, beta, prof=profile, low=None, extra=0.0):
        return dp_cost.predict_step_time(variant, numels, world_size, *prof, alpha, beta, low,
                                         overhead_s=extra, **options)

    def ratio(alpha, beta, prof=profile, variant="ddp-bucketed"):  # its messages on the link ÷ compute
        return predict(variant, alpha, beta, prof)["comm_s"] / sum(prof)

    fig, ax = plt.subplots(figsize=(8, 4.2))
    scales = np.logspace(-2, 1.3, 40)
    xs = [ratio(link.latency_s * f, link.bandwidth_Bps / f) for f in scales]
    ax.plot(xs, [1 + x for x in xs], ":", color="gray", label="ddp-bucketed, nothing hidden (1 + x)")
    ax.plot(xs, [max(1.0, x) for x in xs], "--", color="lightgray", label="all hidden, max(1, x)")
    points = {"real link" if paced else "faithful": (
        regime["faithful"], (link.latency_s, link.bandwidth_Bps), profile,
        (0.0, float("inf")) if paced else floor, 0.0 if paced else overhead_s)}
    if regime.get("loopback"):  # only on this CPU's raw clock: loopback against its own compute
        raw_profile = compute_profile(regime["loopback"]["ddp-naive"], warmup)
        points["loopback"] = (regime["loopback"], floor, raw_profile, floor, overhead_s)
    rows = []
    for variant in variants:
        ys = [predict(variant, link.latency_s * f, link.bandwidth_Bps / f)["step_s"] / compute
              for f in scales]
        line = ax.plot(xs, ys, "-", label=variant)[0]
        for where, (runs, (alpha, beta), prof, low, extra) in points.items():
            if variant in runs:
                x, y = ratio(alpha, beta, prof), runs[variant].step_time(warmup) / sum(prof)
                ax.plot([x], [y], "o" if where == "loopback" else "s", color=line.get_color())
                priced = predict(variant, alpha, beta, prof, low, extra)  # with floor and overhead
                own, model = priced["comm_s"] / sum(prof), priced["step_s"]
                why = diagnosis(runs[variant], runs[variant].step_time(warmup), model)
                rows.append((f"{where} ({runs[variant].clock.label})", variant, x, own, y,
                             model / sum(prof), why))
    ax.set(xscale="log", yscale="log",
           xlabel="communication ÷ compute (one step's ddp-bucketed buckets on the link, α and bytes)",
           ylabel="step time ÷ compute time",
           title=f"where hiding communication pays, N={world_size} (lines: α-β model; "
                 + ("○ loopback, " if "loopback" in points else "")
                 + f"□ {link.name.split(',')[0]}, {regime['clock'].label})")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    for where, variant, x, own, y, model, why in sorted(rows):
        bound = 1 + own  # nothing hidden: its own messages after its compute
        verdict = ("at its nothing-hidden bound" if abs(y / bound - 1) <= TOLERANCE else
                   f"hid {(bound - y) / own:.0%} of its communication" if y < bound else
                   f"above its bound by {y / bound - 1:.0%}: waits the model does not count")
        print(f"  {variant:<13} {where:<28} x {x:5.2f} (its own messages {own:5.2f})   "
              f"step/compute: measured {y:5.2f}, model {model:5.2f}, 1 + own {bound:5.2f}: "
              f"{verdict}  {why}")
    return fig
