"""WFBP and DeAR where they matter: gpt2-xl's gradients on 8 A100s (one DGX A100, NVLink 3).

Wait-free backpropagation (WFBP: Zhang et al., "Poseidon", USENIX ATC 2017; `ddp-overlap`) starts a
bucket's all-reduce from the backward hooks as soon as its gradients are ready, so only the last
buckets' communication is exposed. DeAR (Zhang et al., "DeAR: Accelerating Distributed Deep
Learning with Fine-Grained All-Reduce Pipelining", ICDCS 2023; `dear`) splits each all-reduce in
two: the reduce-scatter overlaps backward, the all-gather overlaps the *next* forward. Against
them, `ddp-naive` (one all-reduce per tensor after backward) and `ddp-bucketed` (25 MB buckets
after backward) hide nothing.

`priced`: every variant's steady step on the chapter's list-scheduling model
(`parlab.data_parallel.cost.predict_step_time`), gpt2-xl's 388 tensors (`numels`, built on the
meta device), the ring on the real link, and the compute as the paced clock prices it: every
kernel of forward, backward and a steady AdamW step on the roofline, counted at 1 and 2 layers
and extended to 48 (`paced_compute`). `compute="flops"` prices 2Ψ·t forward and 4Ψ·t backward
FLOPs (Kaplan et al. 2020) and Adam's 28 bytes per parameter instead: about half the paced
compute, since the memory-bound kernels are left out (`dear_scale.diagnose` prints the split).
`measured`: the same variants run shapes-only on paced A100s (`parlab.run(..., shapes_only=True,
clock="A100")`): minutes of this CPU per variant, so the chapter runs it only when asked; the
step measured is the steady second-last (`steady_index`).
"""

from __future__ import annotations

PRESET, WORLD, LINK, BUCKET_MB, ROWS = "gpt2-xl", 8, "NVLink", 25.0, 1  # rows: sequences per GPU
VARIANTS = ("ddp-naive", "ddp-bucketed", "ddp-overlap", "dear")
# the name each variant goes by in the papers and the chapter's prose, beside its scheme (pairs)
LABELS = (("ddp-naive", "naive"), ("ddp-bucketed", "bucketed"), ("ddp-overlap", "WFBP"), ("dear", "DeAR"))
NAMES = dict(LABELS)
ADAM_BYTES = 28  # per parameter: read p, g, m, v and write p, m, v in fp32
_NUMELS: dict = {}


def numels(preset: str = PRESET) -> list[int]:
    """Elements of each of the preset's parameters in registration order (meta device: no memory)."""
    if preset not in _NUMELS:
        import torch

        from parlab import models
        from parlab.models.presets import PRESETS

        with torch.device("meta"):
            net = models.build_model("gpt", models.model_config("gpt", dict(PRESETS[preset])), 0)
        _NUMELS[preset] = [p.numel() for p in net.parameters()]
    return _NUMELS[preset]


def compute_times(preset: str = PRESET, rows: int = ROWS, accelerator: str = "A100") -> dict:
    """Forward, backward and optimizer seconds of one rank's step: 2Ψt, 4Ψt FLOPs at the
    accelerator's sustained rate (t = rows × block_size tokens), Adam's bytes at its HBM rate."""
    from parlab.core.link import ACCELERATORS
    from parlab.models.presets import PRESETS

    acc = ACCELERATORS[accelerator]
    psi, tokens = sum(numels(preset)), rows * PRESETS[preset]["block_size"]
    return {"t_forward": 2 * psi * tokens / acc.flops, "t_backward": 4 * psi * tokens / acc.flops,
            "t_optimizer": ADAM_BYTES * psi / acc.hbm_Bps}


def step_compute(preset: str = PRESET, rows: int = ROWS, accelerator: str = "A100",
                 compute: str = "roofline") -> dict:
    """{"t_forward", "t_backward", "t_optimizer"}: the paced clock's price of the kernels
    (`compute="roofline"`, `paced_compute.compute_times`) or FLOPs alone (`"flops"`)."""
    if compute not in ("roofline", "flops"):
        raise ValueError(f"compute={compute!r} must be 'roofline' or 'flops'")
    if compute == "flops":
        return compute_times(preset, rows, accelerator)
    from parlab.data_parallel.explore import paced_compute

    return paced_compute.compute_times(preset, accelerator, rows)


def priced(preset: str = PRESET, n: int = WORLD, link: str = LINK, bucket_mb: float = BUCKET_MB,
           rows: int = ROWS, variants=VARIANTS, accelerator: str = "A100",
           compute: str = "roofline") -> dict:
    """{variant: predict_step_time's {"step_s", "comm_s", "exposed_s"}} on the real `link`
    ("NVLink": the accelerator's own generation), compute priced by `step_compute`."""
    from parlab.core.link import real
    from parlab.data_parallel.cost import predict_step_time
    from parlab.data_parallel.explore.paced_compute import hook_seconds

    lk = real(link, accelerator)
    times = step_compute(preset, rows, accelerator, compute)
    sizes = numels(preset)

    def backward(v):  # the roofline's own backward plus what the hooks add (`hook_seconds`)
        extra = hook_seconds(v, sizes, n, accelerator, bucket_mb) if compute == "roofline" else 0.0
        return {**times, "t_backward": times["t_backward"] + extra}

    return {v: predict_step_time(v, sizes, n, **backward(v), alpha=lk.latency_s,
                                 beta=lk.bandwidth_Bps,
                                 **({} if v == "ddp-naive" else {"bucket_mb": bucket_mb}))
            for v in variants}


def steady_index(steps: int) -> int:
    """The step measured: the second-last. Step 0's forward waits for nothing, DeAR's step 1
    holds its first deferred update (Adam's state created), its last flushes every owed update."""
    if steps < 4:
        raise ValueError(f"steps={steps!r} must be >= 4: DeAR's steady step is the second-last "
                         "of at least 4 (its step 1 creates Adam's state, its last flushes)")
    return steps - 2



def measured(preset: str = PRESET, n: int = WORLD, link: str = LINK, bucket_mb: float = BUCKET_MB,
             rows: int = ROWS, variants=VARIANTS, steps: int = 4) -> dict:
    """{variant: its steady step's paced A100 seconds}, each variant run shapes-only on `n` ranks.
    The steady step is the second-last (`steady_index`): the first forward waits for
    nothing, DeAR's step 1 holds its first deferred update (which creates AdamW's state, paid by
    the others in step 0), and its last step also applies every owed update (`flush`)."""
    import parlab

    index = steady_index(steps)

    out = {}
    for v in variants:
        r = parlab.run(v, world_size=n, model=preset, shapes_only=True, clock="A100", link=link,
                       batch_size=rows * n, steps=steps, timeout=3600.0,
                       **({} if v == "ddp-naive" else {"bucket_mb": bucket_mb}))
        out[v] = r.step_times[index]
    return out


def show(run: bool = False, preset: str = PRESET, n: int = WORLD, link: str = LINK,
         accelerator: str = "A100", where: str = "") -> dict:
    """Print the priced step of every variant (and, with `run`, the measured one beside it), the
    speedups of WFBP and DeAR over naive and bucketed, and verdicts; returns the numbers.
    `where`: how the `n` GPUs sit (e.g. "one per node"), printed with the clock."""
    from parlab.core.link import ACCELERATORS, real

    if run and accelerator != "A100":
        raise ValueError("measured runs use the chapter's A100 clock; price other accelerators")
    p = priced(preset, n, link, accelerator=accelerator)
    m = measured(preset, n, link) if run else None
    times = step_compute(preset, accelerator=accelerator)
    flops = compute_times(preset, accelerator=accelerator)
    compute = sum(times.values())
    acc = ACCELERATORS[accelerator]

    def hook(i):  # what the paced clock adds to VARIANTS[i]'s backward
        from parlab.data_parallel.explore.paced_compute import hook_seconds

        return hook_seconds(VARIANTS[i], numels(preset), n, accelerator, BUCKET_MB)

    print(f"clock: paced {accelerator} time ({acc.flops / 1e12:.0f} TFLOP/s sustained, HBM "
          f"{acc.hbm_Bps / 1e9:,.0f} GB/s); {n} {accelerator}s{where} over "
          f"{real(link, accelerator)}; {preset} ({sum(numels(preset)) / 1e9:.2f} B parameters, fp32 "
          f"gradients), {ROWS} sequence of 1,024 tokens per GPU, buckets of {BUCKET_MB:g} MB")
    print(f"compute per step, every kernel on the roofline (counted at 1 and 2 layers, extended to "
          f"all): {compute * 1e3:.1f} ms (forward {times['t_forward'] * 1e3:.1f}, backward "
          f"{times['t_backward'] * 1e3:.1f}, AdamW {times['t_optimizer'] * 1e3:.1f}); FLOPs alone "
          f"(6Ψt, 28 B/parameter) would say {sum(flops.values()) * 1e3:.1f} ms "
          f"({compute / sum(flops.values()):.2f}× less); WFBP's and DeAR's hooks add their bucket "
          f"copies to backward as the paced clock prices them ({hook(2) * 1e3:.1f} ms; DeAR's "
          f"shard allocations {(hook(3) - hook(2)) * 1e3:.1f} ms more); link busy per step (naive) "
          f"{p['ddp-naive']['comm_s'] * 1e3:.1f} ms")
    print(f"{'variant':<24} {'priced step':>12} {'exposed':>9}" + (f" {'measured':>10}" if m else ""))
    for v in VARIANTS:
        line = (f"{v + ' (' + NAMES[v] + ')':<24} {p[v]['step_s'] * 1e3:>9.1f} ms "
                f"{p[v]['exposed_s'] * 1e3:>6.1f} ms")
        print(line + (f" {m[v] * 1e3:>7.1f} ms" if m else ""))
    if m:
        gaps = {v: m[v] / p[v]["step_s"] - 1 for v in VARIANTS}
        print("measured ÷ priced − 1: " + ", ".join(f"{NAMES[v]} {g:+.1%}" for v, g in gaps.items())
              + (" (all within 2%: holds)" if max(map(abs, gaps.values())) <= 0.02
                 else " (NOT all within 2%)"))
    verdicts = []
    for source, t in (("priced", {v: p[v]["step_s"] for v in p}),) + ((("measured", m),) if m else ()):
        for fast in ("ddp-overlap", "dear"):
            for slow in ("ddp-naive", "ddp-bucketed"):
                speedup = t[slow] / t[fast]
                ok = speedup > 1.0
                verdicts.append(ok)
                print(f"{source}: {NAMES[fast]} over {NAMES[slow]}: {speedup:.2f}× "
                      f"({'faster: holds' if ok else 'not faster: does NOT hold'})")
        gain = t["ddp-overlap"] / t["dear"]
        hidden = times["t_backward"] >= p["ddp-naive"]["comm_s"]
        print(f"{source}: DeAR over WFBP: {gain:.3f}× — "
              + (f"backward ({times['t_backward'] * 1e3:.1f} ms) is at least as long as the link's "
                 f"work ({p['ddp-naive']['comm_s'] * 1e3:.1f} ms), so WFBP already hides nearly all "
                 "of it and DeAR has little left to win" if hidden else
                 f"the link's work ({p['ddp-naive']['comm_s'] * 1e3:.1f} ms) outlasts backward "
                 f"({times['t_backward'] * 1e3:.1f} ms): DeAR hides the all-gathers behind the "
                 "next forward, which WFBP cannot")
              + f" ({'DeAR faster: holds' if gain > 1.0 + 1e-9 else 'DeAR not faster'})")
    return {"priced": p, "measured": m, "verdicts": verdicts}
