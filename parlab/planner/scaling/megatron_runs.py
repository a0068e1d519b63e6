"""Megatron-LM's Table 1 on a laptop: the published configurations run shapes-only, in paced time.

Narayanan et al. ("Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC 2021, Table 1) report the teraFLOP/s per A100 of GPT models of 1.7 B to 1 T
parameters on Selene (DGX A100 nodes). Every row that fits in `max_ranks` ranks runs here as
`parlab.run("nd", ..., shapes_only=True, clock="A100")` with that row's shapes, degrees, batch
and recomputation on nodes of 8 (`parlab.core.topology.nodes`); its achieved rate is Megatron's
eq. 3 FLOPs (`scaling.extrapolate.iteration_flops`) ÷ (paced step · GPUs), printed beside the
published rate and the analytic model (`scaling.extrapolate.predict`). Simplifications (bf16
mixed instead of fp16 with loss scaling, unfused kernels, one micro-batch at pp = 1, no biases):
docs/planner.md, `parlab.planner.scaling.megatron_runs`.
"""

from __future__ import annotations

import time

import parlab
from parlab.core.link import ACCELERATORS
from parlab.core.topology import nodes
from parlab.planner.scaling.extrapolate import HARDWARE, MEGATRON, HwPlan, iteration_flops, predict

GPUS_PER_NODE = 8  # a DGX A100


def preset_of(shape_name: str) -> str:
    """The preset (parlab.models.presets) of a Table 1 shape: "1.7B" -> "megatron-1.7b"."""
    return f"megatron-{shape_name.lower()}"


def fitting_rows(max_ranks: int = 64) -> list[tuple]:
    """Table 1's rows (`extrapolate.MEGATRON`) whose GPU count is at most `max_ranks`."""
    if isinstance(max_ranks, bool) or not isinstance(max_ranks, int) or max_ranks < 1:
        raise ValueError(f"max_ranks={max_ranks!r} must be an int >= 1")
    return [row for row in MEGATRON if row[1] <= max_ranks]


def run_row(shape, gpus: int, batch: int, tp: int, pp: int, published: float,
            steps: int = 1, microbatches: int | None = None,
            precision: str = "bf16-mixed") -> dict:
    """Run one Table 1 row shapes-only on paced A100s; its achieved TFLOP/s per GPU beside the
    published one and the analytic model's for the same plan."""
    dp = gpus // (tp * pp)
    options = {"microbatches": microbatches or pp} if pp > 1 else {}
    t0 = time.perf_counter()
    r = parlab.run("nd", world_size=gpus, model=preset_of(shape.name), steps=steps,
                   clock="A100", link=nodes(gpus, GPUS_PER_NODE, "NVLink", "HDR-IB"),
                   shapes_only=True, dp=dp, tp=tp, pp=pp, batch_size=batch, checkpoint=True,
                   precision=precision, timeout=3600.0, **options)  # up to 64 ranks share this CPU's cores
    wall = time.perf_counter() - t0
    step = r.step_times[-1]  # the last step: the optimizer's state exists, as in steady state
    measured = iteration_flops(shape, batch) / (step * gpus) / 1e12
    model = predict(shape, HARDWARE["A100"], HwPlan(tp, pp, dp, batch // dp if pp == 1 else 1),
                    batch)
    counted = r.pace["flops"] / (gpus * steps) if isinstance(r.pace, dict) else float("nan")
    return {"model": shape.name, "GPUs": gpus, "batch": batch, "plan": f"tp{tp}·pp{pp}·dp{dp}",
            "step_s": step, "eq3_flops": iteration_flops(shape, batch) / gpus,
            "counted_flops": counted, "measured_TFLOPs": measured, "published_TFLOPs": published,
            "error": (measured - published) / published,
            "model_TFLOPs": model["tflops"],
            "model_error": (model["tflops"] - measured) / measured,
            "memory_GB": max(sum(m.values()) for m in r.memory) / 1e9,
            "wall_s": wall, "ranks": gpus}


def verdict(row: dict, tolerance: float = 0.25) -> str:
    """Plain words from the row's own numbers: within `tolerance` of the published rate or not,
    and which way."""
    error = row["error"]
    side = "above" if error > 0 else "below"
    within = "within" if abs(error) <= tolerance else "outside"
    text = (f"{row['measured_TFLOPs']:.0f} TFLOP/s per A100, {abs(error):.0%} {side} Table 1's "
            f"{row['published_TFLOPs']:.0f} ({within} {tolerance:.0%}); the formula "
            f"{row['model_error']:+.0%} from the run")
    sustained = ACCELERATORS["A100"].flops / 1e12
    if row["measured_TFLOPs"] > sustained:  # said, not left for the reader to wonder at
        text += (f"; above the {sustained:.0f} TFLOP/s the clock prices an A100 at, because eq. 3 "
                 f"counts {row['eq3_flops'] / row['counted_flops'] - 1:.0%} more FLOPs than the "
                 f"run's operators executed")
    return text


def table(max_ranks: int = 64, steps: int = 1, progress=print) -> list[dict]:
    """Every row that fits in `max_ranks`, run; each printed as it completes."""
    rows = []
    for shape, gpus, batch, tp, pp, published in fitting_rows(max_ranks):
        row = run_row(shape, gpus, batch, tp, pp, published, steps=steps)
        rows.append(row)
        if progress:
            progress(format_row(row))
    return rows


def show(ranks: int = 2, progress=print) -> list[dict]:
    """Chapter 13's section: with `ranks` >= 32, every Table 1 row that fits (`table`); below, the
    1.7B row's data-parallel slice on `ranks` GPUs (the same 16 sequences per GPU, tp1·pp1, a
    smaller all-reduce ring inside one node), said to be a slice, beside the same published rate."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks={ranks!r} must be an int >= 1")
    if fitting_rows(ranks):
        return table(ranks, progress=progress)
    shape, gpus, batch, tp, pp, published = MEGATRON[0]
    per_gpu = batch // gpus
    if progress:
        progress(f"Table 1 runs {shape.name} on {gpus} GPUs; here its data-parallel slice on "
                 f"{ranks} (the same {per_gpu} sequences per GPU; the gradient all-reduce rings "
                 f"{ranks} GPUs{' inside one node' if ranks <= GPUS_PER_NODE else ''}, not "
                 f"{gpus} over InfiniBand):")
    row = run_row(shape, ranks, per_gpu * ranks, tp, pp, published)
    if progress:
        progress(format_row(row))
    return [row]


def format_row(row: dict) -> str:
    return (f"{row['model']:>6} on {row['GPUs']:>3} A100s ({row['plan']}, batch {row['batch']}): "
            f"step {row['step_s']:.3f} A100 s, measured {row['measured_TFLOPs']:.1f} TFLOP/s · "
            f"published {row['published_TFLOPs']:.0f} ({row['error']:+.1%}) · extrapolate.py "
            f"{row['model_TFLOPs']:.1f} ({row['model_error']:+.1%} from the run) · "
            f"{row['memory_GB']:.1f} GB per rank (parameters, gradients, Adam, activations) · "
            f"{row['wall_s']:.0f} s of this CPU for {row['ranks']} ranks\n"
            f"    FLOPs per GPU per step: eq. 3 counts {row['eq3_flops'] / 1e15:.3f} PFLOP, the "
            f"clock's meter priced {row['counted_flops'] / 1e15:.3f} PFLOP (the rate is eq. 3 ÷ "
            f"the paced step, as Table 1's)\n    {verdict(row)}")


# ----------------------------------------------------------------------------- 64 ranks
BIG = dict(preset="megatron-7.5b", world_size=64, dp=2, tp=8, pp=4, batch_size=8,
           microbatches=4)  # tp inside a node of 8, a pipeline of 4 nodes, two replicas


def big_run(preset=BIG["preset"], world_size=BIG["world_size"], dp=BIG["dp"], tp=BIG["tp"],
            pp=BIG["pp"], batch_size=BIG["batch_size"], microbatches=BIG["microbatches"]) -> str:
    """One shapes-only step of `nd` on `world_size` ranks (default: a 7.5B GPT as dp 2 · tp 8 ·
    pp 4 on 64 ranks, 1F1B over 4 micro-batches of one sequence), with the wall time and the
    memory of all ranks together on this machine: the line to print."""
    from parlab.engine.many_ranks import measure_run

    m = measure_run("nd", world_size, model=preset, steps=1, clock="A100",
                    link=nodes(world_size, GPUS_PER_NODE, "NVLink", "HDR-IB"), shapes_only=True,
                    dp=dp, tp=tp, pp=pp, batch_size=batch_size, microbatches=microbatches,
                    checkpoint=True, timeout=3600.0)  # 64 ranks share this CPU's cores
    r, mib = m["result"], 2 ** 20
    state = max(sum(x.values()) for x in r.memory) / 1e9
    return (f"{preset} as dp{dp}·tp{tp}·pp{pp} on {world_size} ranks, batch {batch_size} in "
            f"{microbatches} micro-batches: step {r.step_times[0]:.3f} A100 s, "
            f"{len(r.ledger)} messages, {state:.1f} GB per rank (A100: 80) · this CPU: "
            f"{m['wall_s']:.0f} s wall, all ranks together PSS {m['peak_pss'] / mib:,.0f} MiB "
            f"(RSS {m['peak_rss'] / mib:,.0f} MiB counting shared pages once per rank)")



def preset_step(preset: str = "megatron-1.7b", batch: int = 1, layers: int | None = None):
    """(setup, step) for `parlab.core.roofline.compare`: setup builds `preset`
    (parlab.models.presets), optionally cut to `layers` blocks, and a batch of `batch` sequences
    of its context; step runs one forward and backward of it."""
    import torch

    from parlab import models
    from parlab.models.presets import resolve

    model_name, overrides, _ = resolve(preset, {"n_layer": layers} if layers else None)
    config = models.model_config(model_name, overrides)

    def setup():
        model = models.build_model(model_name, config, seed=0)
        return model, torch.randint(0, config.vocab_size, (batch, config.block_size))  # (B, T)

    def step(state):
        model, x = state
        model.loss(x, x).backward()

    return setup, step
