"""Notebook 04's LAMP partition (Zhu et al., "LAMP: Large Deep Nets with Automated Model
Parallelism for Image Segmentation", MICCAI 2020): the U-Net's stages even by layer count vs
balanced by measured memory (`pipeline.lamp`, its code's `balance_by_size`), each stage's memory
as the run measured it (the memory ledger: `RunResult.memory` per rank) beside the partition's own
estimate (`lamp.stage_memory`); and its patch-size curriculum (small patches, then larger) beside
fixed patch sizes, scored on a whole test volume (`curriculum_vs_fixed`).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

import parlab
from parlab.engine.loop import build_model, optimizer_spec
from parlab.models import UNet3D, UNet3DConfig, volumes
from parlab.pipeline import cost, lamp
from parlab.pipeline.explore.unet import _scores
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


# --------------------------------------------------------------- the patch-size curriculum
def train_patches(phases, batch_size: int = 4, lr: float = 1e-2, seed: int = 0,
                  model_config: dict | None = None):
    """A U-Net trained through `phases`, a list of (patch side, steps), one after the other on the
    same parameters (each phase's crops drawn from the training volumes at that side).

    LAMP trains with progressively larger input patches, which its pipeline makes fit (Zhu et
    al., MICCAI 2020: curriculum training on small, then larger patches). *Simplification*: the
    phases run here, in one process, with the loop's optimizer settings (`optimizer_spec`):
    `parlab.run` cannot start from given parameters, so a phase cannot be a pipelined run; a
    pipeline trains the same parameters as this process (exact vs `single`, tested), only the
    memory per device differs. The optimizer state carries over between phases.
    """
    mc = {**(model_config or {})}
    model = UNet3D(UNet3DConfig(**{**mc, "block_size": max(side for side, _ in phases)}), seed=seed)
    opt_class, settings = optimizer_spec(SimpleNamespace(optimizer="adamw", lr=lr))
    optimizer = opt_class(model.parameters(), **settings)
    step, losses = 0, []
    for side, steps in phases:
        for _ in range(steps):
            x, y = volumes.volume_batch(step, batch_size, seed, side)  # (B, 1, s, s, s), (B, s, s, s)
            loss = model.loss(x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
    return model, losses


def curriculum_vs_fixed(steps: int = 90, sides=(8, 16, 32), batch_size: int = 4, side: int = 32,
                        index: int = 0, seed: int = 0) -> dict:
    """Whole-volume mean Dice (balls and cubes) on test volume `index` (its first side³ voxels)
    after `steps` steps at each fixed patch side, and after the curriculum: the same number of
    steps split evenly over the sides, smallest first."""
    x, y = volumes.test_volume(index, seed)
    x, y = x[..., :side, :side, :side], y[..., :side, :side, :side]  # (1, 1, s, s, s), (1, s, s, s)
    runs = {f"fixed {s}³": [(s, steps)] for s in sides}
    share = steps // len(sides)
    runs["curriculum " + " → ".join(f"{s}³" for s in sides)] = \
        [(s, share) for s in sides[:-1]] + [(sides[-1], steps - share * (len(sides) - 1))]
    out, threads = {}, torch.get_num_threads()
    for name, phases in runs.items():
        torch.set_num_threads(1)  # one thread, as a rank computes: on shared cores 2 threads spin
        try:
            model, losses = train_patches(phases, batch_size=batch_size, seed=seed)
            with torch.no_grad():
                scores = _scores(model(x), y)
        finally:
            torch.set_num_threads(threads)
        voxels = sum(n * s ** 3 for s, n in phases) * batch_size
        out[name] = {**scores, "voxels_seen": voxels, "last_loss": losses[-1]}
        print(f"{name:28} {steps} steps, {voxels / 1e6:5.2f} M training voxels: whole-volume "
              f"({side}³) accuracy {scores['accuracy']:.4f}, mean Dice {scores['dice']:.3f}",
              flush=True)
    if all(r["dice"] == 0.0 for r in out.values()):
        print(f"every run predicts background only after {steps} steps: too few to compare")
    cur = out[list(runs)[-1]]
    big = out[f"fixed {sides[-1]}³"]
    print(f"curriculum vs fixed {sides[-1]}³: mean Dice {cur['dice'] - big['dice']:+.3f} with "
          f"{cur['voxels_seen'] / big['voxels_seen']:.2f}× the training voxels (same steps): patch "
          "size and data seen are not separated here, and one seed decides none of it")
    return out
