"""Chapter 01's measurement: every variant in virtual time on an accelerator's clock and the real
link (`clock="A100"`, `parlab.core.clock`: compute spans priced on the accelerator, the real link
undilated, times in its own seconds; or, with `clock="wall"`, on this CPU raw with the link dilated
by this CPU's measured rate,
`parlab.core.link.faithful`), exposed communication, the alpha-beta prediction beside each
measured step with the diagnosis when they disagree and the bucket sweep (the ratio sweep: `ratios`)
(DeAR, Zhang et al., ICDCS 2023; MAD-Max, Hsia et al., ISCA 2024, for the exposed fraction).
"""

from __future__ import annotations

import parlab
from parlab import models
from parlab.core.link import ACCELERATORS, achieved_flops, faithful, resolve
from parlab.core.progress import progress
from parlab.data_parallel import cost as dp_cost
from parlab.data_parallel.bench import compute_profile, exposed_fraction, measure_alpha_beta
from parlab.data_parallel.bucket_packing import plan_buckets
from parlab.engine.registry import get_scheme

VARIANTS = ["ddp-naive", "ddp-bucketed", "ddp-overlap", "ddp-priority", "dear", "torch-ddp"]
OWN = VARIANTS[:5]


def param_numels(model: str = "gpt", config: dict | None = None) -> list[int]:
    """Elements of each parameter of the chapter's model, in registration order."""
    net = models.build_model(model, models.model_config(model, config), 0)
    return [p.numel() for p in net.parameters()]


# ----------------------------------------------------------------------------- 5. measurement
# The measured regime: a GPT wide enough that this CPU computes efficiently (≈40 GFLOP/s, one
# thread; what the wall clock's faithful link is dilated by) and few enough messages that the
# link's latency does not swamp the step.
MEASURE = {"model_config": {"n_embd": 128, "n_layer": 2, "block_size": 64},
           "batch_size": 24, "bucket_mb": 0.5, "partition_kb": 256.0}
COMMON = ("model_config", "batch_size", "lr", "optimizer")


def run_variants(world_size: int, link, steps: int = 4, variants=VARIANTS, clock="wall",
                 **options) -> dict:
    """Run each variant with the options it takes (common ones such as model_config go to all)."""
    out = {}
    for variant in progress(variants, desc=f"DP variants ×{world_size}"):
        known = parlab.schemes()[variant].options
        extra = {k: v for k, v in options.items() if k in known or k in COMMON}
        out[variant] = parlab.run(variant, world_size=world_size, steps=steps, link=link,
                                  clock=clock, **extra)
    return out


# The link the chapter measures on: the real 10GbE. In virtual time the MEASURE GPT's step is ~2
# A100 ms, mostly kernel launches; on the A100's NVLink its gradients move in µs, so there is
# nothing to hide and overlap's and DeAR's extra operators make them slower than ddp-naive
# (measured at N=4: naive 2.30, overlap 2.41, DeAR 2.73 A100 ms). On 10GbE communication is
# comparable to compute and every lesson shows: naive 6.56 > bucketed 4.76 > overlap 4.05 >
# priority 3.62 > DeAR 3.27 A100 ms.
MEASURE_LINK = "10GbE"


def measure_regime(world_size: int, link: str = MEASURE_LINK, accelerator: str = "A100",
                   steps: int = 4, options=None, clock: str | None = None) -> dict:
    """The chapter's measurement: every variant on the real `link` as `accelerator` sees it.
    `clock` (default: `accelerator`) paced: `parlab.run(..., clock=accelerator)` keeps virtual
    time on the accelerator over the real link (`parlab.core.clock`), and nothing else runs;
    "wall": this CPU's raw clock, first on loopback (this CPU's compute rate, from ddp-naive),
    then on the real link dilated by that rate (`parlab.core.link.faithful`). `regime["link"]`
    is the link the runs emulated; `regime["loopback"]` is empty on a paced clock."""
    options = dict(MEASURE if options is None else options)
    clock = accelerator if clock is None else clock
    loop, flops = {}, None
    if clock == "wall":
        loop = run_variants(world_size, None, steps, variants=OWN[:1] + OWN[2:], **options)
        flops = achieved_flops(loop["ddp-naive"])
        emulated = faithful(link, flops, accelerator)
        runs = run_variants(world_size, emulated, steps, **options)
        print(f"clock: this CPU, raw (wall), every run of this section; this machine: "
              f"{flops / 1e9:.1f} GFLOP/s on the model (6·Ψ·tokens over measured forward + "
              f"backward on loopback); {accelerator}: {ACCELERATORS[accelerator].flops / 1e12:.0f} "
              "TFLOP/s, so the link is dilated by their ratio")
    else:
        runs = run_variants(world_size, link, steps, clock=clock, **options)
        emulated = runs["ddp-naive"].config.link
        print(f"clock: {runs['ddp-naive'].clock.label}, virtual (compute priced from its operators "
              f"and FLOPs, in {runs['ddp-naive'].clock.unit}), every run of this section")
    print(f"link: {emulated}")
    return {"loopback": loop, "faithful": runs, "link": emulated, "flops": flops,
            "options": options, "clock": runs["ddp-naive"].clock}


def model_terms(regime: dict, world_size: int) -> dict:
    """The α-β model's extra terms for the regime's runs, printed. In virtual time none: the real
    link is the only communication cost and compute is priced exactly. On this CPU's raw clock
    (`clock="wall"`) gloo's own α-β, fitted now (an emulated link can only slow a message down),
    and the per-message overhead measured from ddp-naive on loopback."""
    clock = regime["clock"]
    if clock.paced:
        print(f"{clock.label}: the α-β model takes the real link alone (compute is priced exactly "
              "and nothing else costs time: no gloo floor, no per-message overhead)")
        return {"floor": (0.0, float("inf")), "overhead_s": 0.0}
    gloo = measure_alpha_beta(world_size)
    floor = (gloo.alpha, gloo.beta)
    overhead_s = per_message_overhead(regime["loopback"]["ddp-naive"], world_size, floor)
    print(f"this CPU, raw: gloo floor α={floor[0] * 1e3:.2f} ms, β={floor[1] / 1e6:.0f} MB/s, "
          f"per-message overhead {overhead_s * 1e3:.2f} ms (measured on loopback)")
    return {"floor": floor, "overhead_s": overhead_s}


def plot_timelines(results: dict, steps: int, title: str = ""):
    """One steady-state step of each variant (parlab.viz.timeline), one panel each, shared axis."""
    import matplotlib.pyplot as plt

    from parlab.viz import step_window, timeline

    spans = [step_window(r.timeline) for r in results.values()]
    t_max = max(hi - lo for lo, hi, _ in spans)
    fig, axes = plt.subplots(len(results), 1, figsize=(10, 1.45 * len(results)), sharex=True)
    for i, (ax, (variant, result)) in enumerate(zip(axes, results.items())):
        timeline(result.timeline, ax=ax, title=f"{variant} — {title}", t_max=t_max, legend=i == 0)
    fig.tight_layout()
    return fig


def exposed_table(results: dict, warmup: int = 1) -> dict:
    """Median step time and exposed-communication fraction per variant (measured)."""
    rows = {}
    for variant, result in results.items():
        rows[variant] = (result.step_time(warmup=warmup) * 1e3,
                         exposed_fraction(result, warmup))
        step_ms, share = rows[variant]
        unit = result.clock.unit
        print(f"  {variant:<13} step {step_ms:7.3g} {unit}   blocked on communication "
              f"{share * step_ms:7.3g} {unit} = {share:4.0%} of the step")
    return rows


def _alpha_beta(link, floor) -> tuple[float, float]:
    resolved = resolve(link)
    return (resolved.latency_s, resolved.bandwidth_Bps) if resolved else floor


def messages_per_step(result) -> int:
    """Collectives rank 0 issued per step (over the whole run, so work deferred past a step counts)."""
    return round(sum(1 for r in result.ledger if r["rank"] == 0) / result.config.steps)


def per_message_overhead(result, world_size: int, floor, warmup: int = 1) -> float:
    """Seconds per message that the α-β model misses, measured: (measured − predicted step) of a
    run whose messages cannot overlap compute (ddp-naive on loopback), per message. On this
    machine it is the wake-ups of two processes per round on 2 cores shared with other work."""
    t_f, t_b, t_o = compute_profile(result, warmup)
    numels = [v.numel() for v in result.state.values()]
    predicted = dp_cost.predict_step_time("ddp-naive", numels, world_size, t_f, t_b, t_o,
                                          *floor)["step_s"]
    return max(result.step_time(warmup) - predicted, 0.0) / max(messages_per_step(result), 1)


def diagnosis(result, measured: float, predicted: float) -> str:
    """Why a measured step misses the α-β prediction by more than 25%, from the measurement: the
    gap per message, and on this CPU's raw clock whether the cores were oversubscribed (load
    average per core) or the ranks outnumber the cores (virtual time never sees the machine's
    load: there the gap is the schedule's waits, which the model idealizes). Empty when the
    prediction holds."""
    import os

    gap = measured - predicted
    if abs(gap) <= 0.25 * predicted:
        return ""
    msgs = messages_per_step(result)
    unit = result.clock.unit
    text = (f"off by {gap * 1e3:+.3g} {unit} = {gap / max(msgs, 1) * 1e3:+.3g} {unit} per message "
            f"({msgs} messages)")
    if result.clock.paced:
        return text + ("; faster than the model: compute overlapped more than it assumes" if gap < 0
                       else "; the schedule's waits, which the model idealizes")
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] / cores
    if result.config.world_size > cores:
        text += f"; {result.config.world_size} ranks on {cores} cores: oversubscribed"
    elif gap > 0 and load > 1:
        text += f"; the cores run {load:.1f} processes each (load average): oversubscribed"
    elif gap < 0:
        text += "; faster than the model: compute overlapped more than its measured median"
    return text


def predicted_vs_measured(results: dict, world_size: int, link, warmup: int = 1,
                          overhead_s: float = 0.0, floor=None) -> dict:
    """Each variant's measured step beside the α-β prediction from ddp-naive's measured compute;
    a gap over 25% is printed with its diagnosis, computed from the same measurement."""
    naive = results["ddp-naive"]
    t_f, t_b, t_o = compute_profile(naive, warmup)
    numels = [v.numel() for v in naive.state.values()]
    if floor is None:  # paced: the link alone; raw: gloo's own α-β, fitted now
        gloo = None if naive.clock.paced else measure_alpha_beta(world_size)
        floor = (gloo.alpha, gloo.beta) if gloo else (0.0, float("inf"))
    alpha, beta = _alpha_beta(link, floor)
    unit = naive.clock.unit
    raw = "" if naive.clock.paced else (
        f"; gloo floor α={floor[0] * 1e3:.2f} ms, β={floor[1] / 1e6:.0f} MB/s, per-message "
        f"overhead {overhead_s * 1e3:.2f} ms (this CPU, raw)")
    print(f"link {resolve(link) or 'loopback'}; compute {1e3 * (t_f + t_b + t_o):.3g} {unit}/step "
          f"(ddp-naive's forward + backward + optimizer){raw}")
    out = {}
    for variant, result in results.items():
        kind = get_scheme(variant).modelled_as or variant
        predicted = dp_cost.predict_step_time(kind, numels, world_size, t_f, t_b, t_o, alpha, beta,
                                              floor, overhead_s=overhead_s,
                                              **result.config.options)["step_s"]
        measured = result.step_time(warmup=warmup)
        out[variant] = (measured, predicted)
        line = (f"  {variant:<13} measured {measured * 1e3:7.3g} {unit}   predicted "
                f"{predicted * 1e3:7.3g} {unit}   " + diagnosis(result, measured, predicted))
        print(line)
    return out


def sweep_buckets(world_size: int, link="1GbE", steps: int = 4, sizes=(0.0, 0.01, 0.05, 1.0),
                  overhead_s: float = 0.0, floor=None, clock: str = "wall", **options):
    """ddp-overlap's step time and message count vs bucket_mb (latency vs overlap granularity),
    beside the α-β prediction from each run's own compute profile, on `clock` (paced: pass the
    real link's name; virtual time prices it undilated). Returns the rows, one per size: bucket_mb, buckets,
    step_s (measured), predicted_s and the link the run emulated."""
    numels = param_numels(config=options.get("model_config"))
    common = {k: v for k, v in options.items() if k in COMMON}
    rows = []
    for bucket_mb in sizes:
        result = parlab.run("ddp-overlap", world_size=world_size, steps=steps, link=link,
                            bucket_mb=bucket_mb, clock=clock, **common)
        alpha, beta = _alpha_beta(result.config.link, floor or (0.0, float("inf")))
        step = result.step_time(warmup=1)
        predicted = dp_cost.predict_step_time("ddp-overlap", numels, world_size,
                                              *compute_profile(result, 1), alpha, beta, floor,
                                              overhead_s=overhead_s, bucket_mb=bucket_mb)["step_s"]
        print(f"  bucket_mb={bucket_mb:<5} {len(plan_buckets(numels, bucket_mb)):>3} bucket(s)  "
              f"step {step * 1e3:7.3g} {result.clock.unit} (predicted {predicted * 1e3:7.3g})   exposed "
              f"{exposed_fraction(result, 1):4.0%}   {diagnosis(result, step, predicted)}")
        rows.append((bucket_mb, len(plan_buckets(numels, bucket_mb)), step, predicted,
                     result.config.link))
    _bucket_verdict(rows, world_size, result.clock.unit)
    return [dict(zip(("bucket_mb", "buckets", "step_s", "predicted_s", "link"), row)) for row in rows]


def _bucket_verdict(rows: list[tuple], world_size: int, unit: str = "ms") -> None:
    """Which bucket size won, measured and by the model, and the latency every bucket pays:
    2(N−1)α per all-reduce against the overlap a finer bucket buys."""
    best = min(rows, key=lambda r: r[2])
    model = min(rows, key=lambda r: r[3])
    link = rows[0][4]
    per_bucket = 2 * (world_size - 1) * link.latency_s if link is not None else 0.0
    print(f"  best measured: bucket_mb={best[0]} ({best[1]} buckets); best by the α-β model: "
          f"bucket_mb={model[0]} — {'agree' if best[0] == model[0] else 'differ'}"
          + ("" if best[0] == model[0] else
             f" (the model's margin between them: {abs(best[3] - model[3]) * 1e3:.3g} {unit}, within "
             "what the measurement resolves)" if abs(best[3] - model[3]) < 0.05 * model[3] else ""))
    if per_bucket:
        print(f"  every bucket pays 2(N−1)α = {per_bucket * 1e3:.3g} {unit} of latency on this link: "
              + ", ".join(f"{r[1]} bucket(s) {r[1] * per_bucket * 1e3:.3g} {unit}" for r in rows)
              + " — a finer bucket wins only while the backward it overlaps is longer than that")
