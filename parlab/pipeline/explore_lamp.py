"""Notebook 04's LAMP partition (Zhu et al., "LAMP: Large Deep Nets with Automated Model
Parallelism for Image Segmentation", MICCAI 2020): the U-Net's stages even by layer count vs
balanced by measured memory (`pipeline.lamp`, its code's `balance_by_size`), each stage's memory
as the run measured it (the memory ledger: `RunResult.memory` per rank) beside the partition's own
estimate (`lamp.stage_memory`).
"""

from __future__ import annotations

import parlab
from parlab.engine.loop import build_model
from parlab.models import UNet3DConfig
from parlab.pipeline import cost, lamp
from parlab.pipeline.schemes import resolve

MIB = 2 ** 20


def layer_name(mc: dict, index: int) -> str:
    """The name of layer `index` of the U-Net of config `mc` (Down(k), Bottom, Up(k), Head)."""
    levels = UNet3DConfig(**mc).levels
    if index < levels - 1:
        return f"Down({index})"
    if index == levels - 1:
        return "Bottom"
    return f"Up({2 * levels - 2 - index})" if index < 2 * levels - 1 else "Head"


def estimate(result) -> list[dict]:
    """The partition's estimate per stage for the run `result` (one dp replica): the profile of
    one micro-batch, × the schedule's in-flight micro-batches, + param_scale × parameters."""
    cfg, mc = result.config, result.config.model_config
    plan = resolve(cfg, cfg.options.get("schedule") or cfg.scheme.removeprefix("pp-"))
    counts = result.outputs[0].extras["layers_per_stage"]
    rows = cfg.batch_size // (plan.dp * plan.microbatches)
    sizes = lamp.layer_sizes(build_model(cfg), mc, rows)  # checkpointed if the run was
    flight = [cost.in_flight_peak(plan.schedule, plan.pp, plan.microbatches, s)
              for s in range(plan.pp)]
    return lamp.stage_memory(counts, sizes, flight, lamp.PARAM_COPIES.get(cfg.optimizer, 2))


def measured(result) -> list[dict]:
    """Each rank's measured peak bytes: activations (saved for backward) and parameters +
    gradients + optimizer state (its memory ledger)."""
    out = []
    for m in result.memory:
        params = m["params"] + m["grads"] + m["optimizer"]
        out.append({"activations": m["activations"], "params": params,
                    "total": m["activations"] + params})
    return out


def even_vs_lamp(world_sizes=(2, 4), schedule: str = "gpipe", steps: int = 2,
                 batch_size: int = 8, model_config: dict | None = None, **options) -> list[dict]:
    """pp-<schedule> with partition 'even' and 'lamp' at each world size, both checked against the
    single process; per stage, measured memory beside the estimate, and the largest stage of each."""
    mc = dict(model_config or {})
    ref = parlab.run("single", model="unet3d", steps=steps, batch_size=batch_size,
                     model_config=mc, **options)
    rows = []
    for world in world_sizes:
        for partition in ("even", "lamp"):
            r = parlab.run(f"pp-{schedule}", world_size=world, model="unet3d", steps=steps,
                           batch_size=batch_size, model_config=mc, partition=partition, **options)
            got, est = measured(r), estimate(r)
            counts = r.outputs[0].extras["layers_per_stage"]
            rows.append({"pp": world, "partition": partition, "counts": counts,
                         "match": r.compare(ref).match, "measured": got, "estimate": est})
            print(f"pp={world} {partition:4} layers per stage {counts}, matches single: "
                  f"{rows[-1]['match']}")
            for s, (g, e) in enumerate(zip(got, est)):
                print(f"  stage {s}: measured {g['total'] / MIB:6.3f} MiB (activations "
                      f"{g['activations'] / MIB:6.3f}, params+grads+optimizer "
                      f"{g['params'] / MIB:6.3f}); estimate {e['total'] / MIB:6.3f} MiB "
                      f"({e['activations'] / MIB:6.3f} + {e['params'] / MIB:6.3f})")
        even, ours = rows[-2], rows[-1]
        top = [max(s["total"] for s in row["measured"]) for row in (even, ours)]
        top_est = [max(s["total"] for s in row["estimate"]) for row in (even, ours)]
        print(f"pp={world}: largest stage even {top[0] / MIB:.3f} MiB → lamp {top[1] / MIB:.3f} "
              f"MiB measured ({top[1] / top[0]:.2f}×); estimated {top_est[0] / MIB:.3f} → "
              f"{top_est[1] / MIB:.3f} MiB ({top_est[1] / top_est[0]:.2f}×)")
        worst = max(range(world), key=lambda s: ours["estimate"][s]["total"])
        if ours["counts"][worst] == 1:
            lo = sum(ours["counts"][:worst])
            print(f"  the largest LAMP stage is one layer ({layer_name(mc, lo)}, stage {worst}): "
                  "no contiguous split of whole layers goes below it")
    return rows
