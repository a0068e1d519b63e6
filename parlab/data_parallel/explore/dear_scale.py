"""Where a paced data-parallel step goes: measured beside the list-scheduling model, and why DeAR
measured slower than WFBP on gpt2-xl.

WFBP (Zhang et al., "Poseidon", USENIX ATC 2017) all-reduces each bucket from the backward hooks;
DeAR (Zhang, Shi, Chu et al., "DeAR: Accelerating Distributed Deep Learning with Fine-Grained
All-Reduce Pipelining", ICDCS 2023) splits it into a reduce-scatter in backward and an all-gather
before each bucket's next forward: (N-1) rounds each, so 2(N-1)·α per bucket — the all-reduce's
own rounds, no extra latency ("without extra communications", the paper's abstract).

`diagnose` runs the four variants shapes-only on paced A100s at gpt2-xl's width with few layers
(`parlab.run(..., shapes_only=True, clock="A100")`) and splits one steady step of rank 0 from its
timeline (`parlab.core.trace`): forward, backward, optimizer compute spans and the time blocked in
`wait()` (exposed communication). The model is `parlab.data_parallel.cost.predict_step_time` —
the variant's messages list-scheduled on the α-β link — fed the run's own compute, or the FLOPs
alone (6Ψt at the sustained rate and Adam's 28 bytes per parameter, `at_scale.compute_times`).
What the breakdown showed (printed by `diagnose`, each with its number):

- the FLOP-only compute misses most of the paced compute: the paced clock prices every kernel on
  the roofline (softmax, norms, GELU over the 25 heads' 1,024² scores; Adam's kernels each
  reading and writing Ψ floats), so measured ÷ FLOP model ≈ 2–3×. Fed its measured compute, the
  model agrees with the run within `TOLERANCE`.
- a step that contains DeAR's *first* deferred update also creates Adam's state (zeros for m and
  v), which the other variants pay in step 0: a middle step of 3 charged it to DeAR alone. The
  steady step is the second-last (`steady_index`), with no state creation and no flush.
- the tied embedding's gradient is complete last in backward and needed first in the next
  forward, so neither WFBP nor DeAR hides its bucket: WFBP exposes its all-reduce, DeAR its
  reduce-scatter plus all-gather — the same 2(N-1)·α + 2(N-1)/N·S·4/β.
"""

from __future__ import annotations

from parlab.data_parallel.explore.at_scale import steady_index  # noqa: F401 - part of this API
from parlab.data_parallel.explore.paced_compute import pack_price  # noqa: F401

PRESET, WORLD, LINK, BUCKET_MB, N_LAYER, STEPS = "gpt2-xl", 2, "NVLink", 25.0, 1, 4
TOLERANCE = 0.05  # model (fed the run's compute) vs measured step, relative
PHASES = ("forward", "backward", "optimizer")
PAIR = ("ddp-overlap", "dear")  # (WFBP, DeAR): the two compared step by step


def run(variant: str, n_layer: int = N_LAYER, n: int = WORLD, link: str = LINK,
        bucket_mb: float = BUCKET_MB, steps: int = STEPS, accelerator: str = "A100"):
    """One shapes-only paced run of `variant` at gpt2-xl's shapes with `n_layer` layers, one
    sequence of 1,024 tokens per rank."""
    import parlab

    return parlab.run(variant, world_size=n, model=PRESET, model_config={"n_layer": n_layer},
                      shapes_only=True, clock=accelerator, link=link, batch_size=n, steps=steps,
                      timeout=3600.0, **({} if variant == "ddp-naive" else {"bucket_mb": bucket_mb}))


def breakdown(result, index: int | None = None) -> dict:
    """Seconds of step `index` (default: the steady one) on rank 0's paced clock: "step" (from its
    step marks), each compute phase's spans, "exposed" (blocked in wait()) and "other" (the rest:
    0 when every moment is a span or a wait)."""
    index = steady_index(len(result.step_times)) if index is None else index
    marks = result.outputs[0].step_marks
    lo, hi = marks[index], marks[index + 1]
    mine = [e for e in result.timeline if e["rank"] == 0 and lo <= e["t0"] < hi]
    out = {"step": hi - lo}
    for phase in PHASES:
        out[phase] = sum(e["t1"] - e["t0"] for e in mine if e["kind"] == "compute"
                         and e["name"] == phase)
    out["exposed"] = sum(e["t1"] - e["t0"] for e in mine if e["kind"] == "wait")
    out["other"] = out["step"] - sum(out[k] for k in PHASES + ("exposed",))
    return out


def numels(n_layer: int = N_LAYER) -> list[int]:
    """Elements of each parameter of gpt2-xl with `n_layer` layers (meta device: no memory)."""
    import torch

    from parlab import models
    from parlab.models.presets import PRESETS

    with torch.device("meta"):
        net = models.build_model("gpt", models.model_config(
            "gpt", {**PRESETS[PRESET], "n_layer": n_layer}), 0)
    return [p.numel() for p in net.parameters()]


def modelled(variant: str, compute: dict, sizes: list[int], n: int = WORLD, link: str = LINK,
             bucket_mb: float = BUCKET_MB, accelerator: str = "A100") -> float:
    """`predict_step_time`'s steady step of `variant` for compute seconds {"forward",
    "backward", "optimizer"} on the real `link`."""
    from parlab.core.link import real
    from parlab.data_parallel.cost import predict_step_time

    lk = real(link, accelerator)
    return predict_step_time(variant, sizes, n, t_forward=compute["forward"],
                             t_backward=compute["backward"], t_optimizer=compute["optimizer"],
                             alpha=lk.latency_s, beta=lk.bandwidth_Bps,
                             **({} if variant == "ddp-naive" else {"bucket_mb": bucket_mb}))["step_s"]


def closed_form_exposed(sizes: list[int], n: int = WORLD, link: str = LINK,
                        accelerator: str = "A100") -> dict:
    """Seconds of the tied embedding's bucket (its own: larger than any bucket cap) on the link:
    WFBP's all-reduce 2(N-1)α + 2(N-1)/N·4S/β, DeAR's reduce-scatter + all-gather, each
    (N-1)α + (N-1)/N·4S/β."""
    from parlab.core.link import real

    lk = real(link, accelerator)
    s = sizes[0]  # the token embedding, tied to the head: parameter 0
    half = (n - 1) * lk.latency_s + (n - 1) / n * 4 * s / lk.bandwidth_Bps
    return {"all_reduce": 2 * half, "reduce_scatter + all_gather": half + half}


def diagnose(n_layer: int = N_LAYER, n: int = WORLD, link: str = LINK,
             bucket_mb: float = BUCKET_MB, steps: int = STEPS, variants=None) -> dict:
    """Run the four variants, print measured beside the model (fed the run's compute, and FLOPs
    only), the steady step's breakdown, and the diagnosis with verdicts; returns the numbers."""
    from parlab.core.link import real
    from parlab.data_parallel.explore import at_scale

    variants = at_scale.VARIANTS if variants is None else variants
    sizes = numels(n_layer)
    psi = sum(sizes)
    flop = _flop_compute(psi)
    from parlab.core.clock import resolve
    from parlab.data_parallel.explore.paced_compute import counted, hook_seconds

    work = counted(PRESET, n_layer)
    roofline = {k: resolve("A100").price(work[k]) for k in PHASES}  # counted in this process
    runs = {v: run(v, n_layer, n, link, bucket_mb, steps) for v in variants}
    parts = {v: breakdown(r) for v, r in runs.items()}
    model = {v: modelled(v, parts[v], sizes, n, link, bucket_mb) for v in variants}
    flop_model = {v: modelled(v, flop, sizes, n, link, bucket_mb) for v in variants}
    counted_model = {v: modelled(v, {**roofline, "backward": roofline["backward"]
                                     + hook_seconds(v, sizes, n, bucket_mb=bucket_mb)},
                                 sizes, n, link, bucket_mb) for v in variants}
    print(f"clock: paced A100 time; {n} A100s over {real(link, 'A100')}; gpt2-xl width with "
          f"{n_layer} layer(s) ({psi / 1e6:,.0f} M parameters, the tied embedding "
          f"{sizes[0] / psi:.0%} of them), shapes-only, one sequence of 1,024 tokens per GPU, "
          f"{bucket_mb:g} MB buckets; step {steady_index(steps)} of {steps} (steady), rank 0")
    print("model: the variant's messages list-scheduled on the link beside compute taken from "
          "(a) the run's own spans, (b) the kernels counted in this process, plus the hooks' bucket "
          "copies (WFBP, DeAR) as the paced clock prices them, (c) "
          "FLOPs alone; the breakdown is the run's steady step")
    print(f"{'variant':<24}{'measured':>9}{'(a)':>8}{'(b)':>8}{'(c)':>8}{'forward':>9}"
          f"{'backward':>9}{'Adam':>7}{'exposed':>8}  (ms)")
    ok = []
    for v in variants:
        p = parts[v]
        print(f"{v + ' (' + at_scale.NAMES[v] + ')':<24}{p['step'] * 1e3:>9.3f}{model[v] * 1e3:>8.3f}"
              f"{counted_model[v] * 1e3:>8.3f}{flop_model[v] * 1e3:>8.3f}"
              f"{p['forward'] * 1e3:>9.3f}{p['backward'] * 1e3:>9.3f}"
              f"{p['optimizer'] * 1e3:>7.3f}{p['exposed'] * 1e3:>8.3f}")
        ok.append(abs(model[v] / p["step"] - 1) <= TOLERANCE)
    worst = max(abs(model[v] / parts[v]["step"] - 1) for v in variants)
    worst_b = max(abs(counted_model[v] / parts[v]["step"] - 1) for v in variants)
    print(f"(b) the model with the counted compute vs measured: worst {worst_b:.2%} "
          f"({'within' if worst_b <= TOLERANCE else 'NOT within'} {TOLERANCE:.0%}: "
          f"{'holds' if worst_b <= TOLERANCE else 'does NOT hold'})")
    ok.append(worst_b <= TOLERANCE)
    print(f"(a) the model fed the run's own compute vs measured: worst {worst:.1%} "
          f"({'within' if all(ok) else 'NOT within'} {TOLERANCE:.0%}: "
          f"{'holds' if all(ok) else 'does NOT hold'})")
    first = variants[0]
    compute = sum(parts[first][k] for k in PHASES)
    print(f"(c) compute: {first}'s measured {compute * 1e3:.3f} ms vs FLOPs only "
          f"{sum(flop.values()) * 1e3:.3f} ms ({compute / sum(flop.values()):.2f}×): the paced "
          "clock prices every kernel on the roofline (softmax, norms, GELU and AdamW's separate "
          "kernels are memory-bound), which 6Ψt FLOPs and 28 bytes per parameter leave out")
    extra = {v: parts[v]["backward"] - roofline["backward"] for v in variants}
    print("(b) backward beyond the counted model's: " + ", ".join(
        f"{at_scale.NAMES[v]} {x * 1e3:+.3f} ms" for v, x in extra.items())
          + " — WFBP's and DeAR's hooks copy each gradient into its bucket inside backward (priced); "
          "naive and bucketed average and copy after backward, outside any compute span (unpriced)")
    if PAIR[0] in parts:
        pack, copied = pack_price(sizes), parts[PAIR[0]]["backward"] - parts[first]["backward"]
        print(f"WFBP's backward − {first}'s: {copied * 1e3:.3f} ms; the copies into the buckets as "
              f"the paced clock prices copy_ (self, source and result: 12 bytes per element) plus "
              f"a launch per tensor: {pack * 1e3:.3f} ms ("
              + ("equal within 1%: holds" if abs(copied - pack) <= 0.01 * pack else "NOT equal")
              + ")")
    out = {"runs": runs, "parts": parts, "model": model, "flop_model": flop_model,
           "counted_model": counted_model, "ok": all(ok)}
    if set(PAIR) <= set(runs):
        out.update(_dear_vs_wfbp(runs, parts, sizes, n, link))
    return out


def _flop_compute(psi: int) -> dict:
    from parlab.core.link import ACCELERATORS

    acc, tokens = ACCELERATORS["A100"], 1024
    return {"forward": 2 * psi * tokens / acc.flops, "backward": 4 * psi * tokens / acc.flops,
            "optimizer": 28 * psi / acc.hbm_Bps}


def _dear_vs_wfbp(runs, parts, sizes, n, link) -> dict:
    w, d = (parts[v] for v in PAIR)
    times = runs[PAIR[1]].step_times
    first = times[1] - times[steady_index(len(times))]
    print(f"DeAR's step 1 is {first * 1e3:.3f} ms longer than its steady step: it holds DeAR's "
          "first deferred update, which creates Adam's state (m, v) — the others create it in "
          "step 0; a middle step of 3 charged it to DeAR alone")
    closed = closed_form_exposed(sizes, n, link)
    ar, rs_ag = closed["all_reduce"], closed["reduce_scatter + all_gather"]
    print(f"exposed: WFBP {w['exposed'] * 1e3:.3f} ms, DeAR {d['exposed'] * 1e3:.3f} ms; the tied "
          f"embedding's bucket (done last in backward, needed first in forward): all-reduce "
          f"{ar * 1e3:.3f} ms = reduce-scatter + all-gather {rs_ag * 1e3:.3f} ms (closed form, "
          "2(N-1) rounds either way: DeAR pays no extra α)")
    delta = {k: d[k] - w[k] for k in PHASES + ("exposed",)}
    gain = w["step"] / d["step"]
    same = abs(delta["backward"]) <= 0.01 * w["backward"]
    print(f"DeAR over WFBP (steady): {gain:.3f}×; DeAR − WFBP = "
          + ", ".join(f"{k} {v * 1e3:+.3f}" for k, v in delta.items()) + " ms: the same backward "
          "(the same copies into the buckets; DeAR's reduce-scatter allocates its output shards, "
          "which launches no kernel) — "
          + ("equal within 1% of WFBP's backward: holds" if same else
             "NOT equal within 1%: something else differs"))
    return {"dear_first_update_s": first, "closed_exposed": closed, "dear_minus_wfbp": delta,
            "dear_over_wfbp": gain}
