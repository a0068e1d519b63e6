"""Notebook 04's section on the pipelined 3-D U-Net (Zhu et al., "LAMP: Large Deep Nets with
Automated Model Parallelism for Image Segmentation", MICCAI 2020): exactness vs the single process,
skip connections crossing stages (bytes beside `unet_cost`, messages on the timeline), peak memory
per stage against model and input size, and whole-volume vs sliding-window inference.
"""

from __future__ import annotations

import math
import time

import torch

import parlab
from parlab.core.memory import ActivationMeter
from parlab.models import UNet3D, UNet3DConfig, volumes
from parlab.pipeline import unet_cost
from parlab.pipeline.unet_stages import skip_routes

SKIP_COLOR = "#E377C2"
PHASES = ("pp-fwd", "pp-bwd", "pp-skip", "pp-skip-bwd")


def unet_check(world_size: int, steps: int = 2, batch_size: int = 8, schedules=("gpipe", "1f1b"),
               model_config: dict | None = None, clock: str | None = None) -> dict:
    """pp-<schedule> on `world_size` stages (on `clock`: values do not depend on it, the timeline
    does) vs single; per rank, the bytes of every pipeline phase beside the closed forms of
    `unet_cost` (main path and skips)."""
    mc = dict(model_config or {})
    ref = parlab.run("single", model="unet3d", steps=steps, batch_size=batch_size, model_config=mc)
    results = {}
    for name in schedules:
        results[name] = r = parlab.run(f"pp-{name}", world_size=world_size, model="unet3d",
                                       steps=steps, batch_size=batch_size, model_config=mc,
                                       **({"clock": clock} if clock else {}))
        print(f"pp-{name:5} model=unet3d, pp={world_size}: match: {r.compare(ref).match}")
    r = results[schedules[-1]]
    cfg, counts = r.config.model_config, r.outputs[0].extras["layers_per_stage"]
    print(f"levels={cfg.levels}, base={cfg.base}, block {cfg.block_size}³, layers per stage "
          f"{counts}; skips leaving their stage (level, from stage, to stage): "
          f"{skip_routes(cfg.levels, counts)}")
    print(f"bytes sent in {steps} steps ({'/'.join(PHASES)}), measured = closed form:")
    for rank in range(world_size):
        got = [r.bytes_per_rank(phase=ph)[rank] for ph in PHASES]
        main = unet_cost.main_bytes_per_step(cfg, counts, batch_size, rank)
        skip = unet_cost.skip_bytes_per_step(cfg, counts, batch_size, rank)
        want = [steps * b for b in main + skip]
        print(f"  stage {rank}: {' / '.join(f'{b:,}' for b in got)} B  "
              f"(closed form {' / '.join(f'{b:,}' for b in want)}): {got == want}")
    direct, relayed = unet_cost.relayed_skip_bytes(cfg, counts, batch_size)
    print(f"skips per step sent straight: {direct:,} B; relayed stage by stage they would be "
          f"{relayed:,} B ({relayed / max(direct, 1):.2f}×)")
    straight_vs_relayed(cfg, batch_size)
    return results


def straight_vs_relayed(cfg, rows: int) -> list[tuple]:
    """Closed form (`unet_cost.relayed_skip_bytes`) at every even split of this U-Net's 2L layers:
    where a skip passes a stage (p ≥ 3), relaying it costs (consumer − producer) times its bytes."""
    from parlab.pipeline.stages import even_partition

    out = []
    for p in range(2, 2 * cfg.levels + 1):
        counts = even_partition(2 * cfg.levels, p)
        direct, relayed = unet_cost.relayed_skip_bytes(cfg, counts, rows)
        out.append((p, counts, direct, relayed))
    cells = [f"p={p} {c}: {d:,} → {r:,} B ({r / max(d, 1):.2f}×)" for p, c, d, r in out]
    differ = [p for p, _, d, r in out if r != d]
    print("skip bytes per step, straight → relayed (closed form, even splits): " + "; ".join(cells))
    print(f"they differ from p = {min(differ)} on, where a skip passes a stage in between"
          if differ else "no split makes a skip pass a stage: straight and relayed cost the same")
    return out


def skip_timeline(result, ax=None):
    """The shared timeline, each skip message (and skip gradient) drawn in its own colour from the
    moment its receiver posted the receive to its arrival, and a tick where its sender issued it."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    import parlab.viz

    ranks = sorted({e["rank"] for e in result.timeline})
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.8 + 0.8 * len(ranks)))
    parlab.viz.timeline(result.timeline, ax=ax,
                        title=f"{result.config.scheme} on the U-Net ({result.clock.label})")
    lo, hi, _ = parlab.viz.step_window(result.timeline) or (0.0, float("inf"), 0)
    skips = [e for e in result.timeline if e["kind"] == "comm" and lo <= e["t0"] < hi
             and e["args"].get("phase", "").startswith("pp-skip")]
    for e in skips:
        t0, t1 = (e["t0"] - lo) * 1e3, (e["t1"] - lo) * 1e3
        if e["name"] == "recv":  # posted → arrived, on the receiver's message row
            ax.broken_barh([(t0, max(t1 - t0, 0.05))], (e["rank"] - 0.39, 0.22),
                           facecolors=SKIP_COLOR, edgecolor="none")
        else:  # issued here (the send itself is waited at the step's end)
            ax.plot([t0, t0], [e["rank"] - 0.5, e["rank"] - 0.17], color=SKIP_COLOR, lw=2)
    legend = ax.get_legend()
    old = list(legend.legend_handles) if legend is not None else []
    names = [t.get_text() for t in legend.get_texts()] if legend is not None else []
    ax.legend(handles=old + [Patch(color=SKIP_COLOR)], labels=names + ["skip message (pp-skip)"],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    sent = [e for e in skips if e["name"] != "recv"]
    print(f"step shown: {len(sent)} skip messages sent, "
          f"{sum(e['args'].get('bytes', 0) for e in sent):,} bytes")
    return ax


def memory_per_stage(pps=(1, 2, 4), sizes=(16, 32), bases=(4, 8), batch_size: int = 2,
                     levels: int = 3) -> list[dict]:
    """Peak activations and parameters of the largest stage (GPipe, one micro-batch), beside the
    whole model on one process, for each model width (base) and input side: LAMP's point is that
    the largest stage holds a fraction of both, so a larger model or volume fits per device."""
    rows = []
    print(f"batch {batch_size}, levels {levels}; largest stage's peak activations (MiB) and "
          "parameters, measured; closed form: activations ∝ rows·S³ (×8 when S doubles)")
    for base in bases:
        for side in sizes:
            mc = {"levels": levels, "base": base, "block_size": side}
            cells = []
            for pp in pps:
                scheme = "single" if pp == 1 else "pp-gpipe"
                extra = {} if pp == 1 else {"microbatches": 1}
                r = parlab.run(scheme, world_size=pp, model="unet3d", steps=1,
                               batch_size=batch_size, model_config=mc, **extra)
                acts = max(m["activations"] for m in r.memory)
                params = max(m["params"] for m in r.memory)
                form = max(unet_cost.stage_params(r.config.model_config,
                                                  r.outputs[0].extras.get("layers_per_stage",
                                                                          [2 * levels]))) * 4 \
                    if pp > 1 else sum(unet_cost.layer_params(r.config.model_config)) * 4
                rows.append({"base": base, "side": side, "pp": pp, "activations": acts,
                             "params": params, "params_form": form})
                cells.append(f"pp={pp}: {acts / 2**20:6.2f} MiB, {params / 1e3:6.1f} kB "
                             f"(form {form / 1e3:6.1f} kB)")
            print(f"  base {base}, S={side:>2}: " + " | ".join(cells))
    for base in bases:
        by = {(r["side"], r["pp"]): r["activations"] for r in rows if r["base"] == base}
        if len(sizes) > 1:
            s0, s1 = sizes[0], sizes[-1]
            grow, top = by[(s1, 1)] / by[(s0, 1)], pps[-1]
            print(f"base {base}: whole-model activations S={s1} / S={s0}: "
                  f"{grow:.2f}× (closed form {(s1 / s0) ** 3:.0f}×); largest "
                  f"stage at pp={top}, S={s1} / whole model at S={s0}: "
                  f"{by[(s1, top)] / by[(s0, 1)]:.2f}×")
            if top > 1:
                cut = by[(s1, 1)] / by[(s1, top)]
                print(f"reading it: pp={top} cuts the largest stage's activations {cut:.2f}× (an "
                      f"even split would cut {top}×: the full-resolution layers Down(0), Up(0) and "
                      f"the head sit in the first and last stages), while doubling S multiplies "
                      f"them {grow:.1f}× — pipelining over {top} stages buys back "
                      f"{math.log(cut, grow):.0%} of one doubling of the side (LAMP's memory-balanced "
                      "split, below, measures what a better split recovers)")
    return rows


def train_unet(steps: int = 150, block: int = 16, batch_size: int = 4, lr: float = 1e-2,
               seed: int = 0, model_config: dict | None = None, scheme: str = "single",
               world_size: int = 1, **options) -> UNet3D:
    """Train with `scheme` (the single process, or a pipeline: the same parameters) and return
    the model with its final parameters."""
    mc = {"block_size": block, **(model_config or {})}
    r = parlab.run(scheme, world_size=world_size, model="unet3d", steps=steps,
                   batch_size=batch_size, seed=seed, lr=lr, model_config=mc, **options)
    model = UNet3D(UNet3DConfig(**mc), seed=seed)
    model.load_state_dict(r.state)
    print(f"trained {steps} steps on {block}³ crops with {scheme} on {world_size} rank(s), peak "
          f"activations per rank {max(m['activations'] for m in r.memory) / 2**20:.1f} MiB: "
          f"loss {r.losses[0]:.3f} → {r.losses[-1]:.3f}")
    return model


def sliding_window(model, x, window: int, stride: int):
    """Logits of x (1, 1, D, D, D) from windows of side `window` every `stride` voxels, overlapping
    predictions averaged (the usual way to segment a volume bigger than the training block)."""
    side = x.size(-1)
    starts = list(range(0, side - window + 1, stride))
    if starts[-1] != side - window:
        starts.append(side - window)
    logits = torch.zeros((1, model.config.n_classes) + x.shape[2:])  # (1, classes, D, D, D)
    count = torch.zeros((1, 1) + x.shape[2:])
    for a in starts:
        for b in starts:
            for c in starts:
                part = x[..., a:a + window, b:b + window, c:c + window]  # (1, 1, w, w, w)
                logits[..., a:a + window, b:b + window, c:c + window] += model(part)
                count[..., a:a + window, b:b + window, c:c + window] += 1
    return logits / count


def _scores(logits, y) -> dict:
    pred = logits.argmax(1)  # (1, D, D, D)
    dice = []
    for k in (1, 2):
        inter = ((pred == k) & (y == k)).sum().item()
        total = (pred == k).sum().item() + (y == k).sum().item()
        dice.append(2 * inter / total if total else 1.0)
    return {"accuracy": (pred == y).float().mean().item(), "dice": sum(dice) / len(dice)}


def inference_compare(model, index: int = 0, side: int = 64, window: int = 16,
                      repeats: int = 3) -> dict:
    """Whole-volume vs sliding-window inference on the first side³ voxels of test volume `index`
    (64³): time (best of `repeats`), voxel accuracy and mean Dice of balls and cubes, and the
    feature-map numbers one forward holds (`unet_cost.feature_numbers`), on the same volume."""
    x, y = volumes.test_volume(index)
    x, y = x[..., :side, :side, :side], y[..., :side, :side, :side]  # (1, 1, s, s, s), (1, s, s, s)
    cfg = model.config
    ways = {"whole volume": lambda: model(x),
            f"windows {window}³, stride {window}": lambda: sliding_window(model, x, window, window),
            f"windows {window}³, stride {window // 2}":
                lambda: sliding_window(model, x, window, window // 2)}
    rows, threads = {}, torch.get_num_threads()
    torch.set_num_threads(1)  # one thread, as every rank computes: shared cores, fair times
    try:
        with torch.no_grad():
            for name, fn in ways.items():
                best = float("inf")
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    logits = fn()
                    best = min(best, time.perf_counter() - t0)
                rows[name] = {"seconds": best, **_scores(logits, y)}
    finally:
        torch.set_num_threads(threads)
    whole = unet_cost.feature_numbers(UNet3DConfig(**{**cfg.__dict__, "block_size": 32}), 1) * \
        (side / 32) ** 3  # features scale with S³ (the config caps block_size at 32)
    part = unet_cost.feature_numbers(UNet3DConfig(**{**cfg.__dict__, "block_size": window}), 1)
    print(f"test volume {index}: {side}³; features held by one forward (closed form): whole "
          f"{whole * 4 / 2**20:.1f} MiB, one window {part * 4 / 2**20:.2f} MiB")
    for name, r in rows.items():
        print(f"  {name:24} {r['seconds'] * 1e3:7.1f} ms  accuracy {r['accuracy']:.4f}  "
              f"mean Dice {r['dice']:.3f}")
    names = list(rows)
    w, t, o = (rows[n] for n in names)
    if abs(w["dice"] - t["dice"]) < 0.01:
        why = (f"no difference beyond ±0.01 on this volume, at a mean Dice of {w['dice']:.2f}: "
               "what this run shows is that the whole volume and the windows give the same "
               "predictions for this model, not whether context beyond a window would decide a "
               "voxel for one trained longer or on larger crops")
    elif w["dice"] > t["dice"]:
        why = ("windows cut objects at their borders and lose the context there, the whole volume "
               "does not")
    elif window == cfg.block_size:
        why = (f"this model was trained on {cfg.block_size}³ crops whose borders are zero padding: "
               "tiled windows show it exactly that, the whole volume shows context it never trained "
               "with — LAMP's remedy is to train on larger inputs, which the pipeline makes fit")
    else:
        why = (f"the whole volume is further from the {cfg.block_size}³ crops the model trained on "
               f"than {window}³ windows are")
    print(f"diagnosis: whole-volume Dice {w['dice']:.3f} vs tiled {t['dice']:.3f} "
          f"({w['dice'] - t['dice']:+.3f}): {why}")
    cache = (f"; the whole volume is slower here: a {window}³ window's feature maps "
             f"({cfg.base * window ** 3 * 4 // 1024} KiB per map at level 0) stay in this CPU's "
             "cache, the whole volume's do not" if w["seconds"] > t["seconds"] else "")
    print(f"whole / tiled time {w['seconds'] / t['seconds']:.2f}× (one call vs "
          f"{(side // window) ** 3} calls on the same voxels{cache}); overlapping windows "
          f"{o['seconds'] / t['seconds']:.1f}× the tiled time (closed form "
          f"{len(range(0, side - window + 1, window // 2)) ** 3 / (side // window) ** 3:.1f}× the "
          f"windows), Dice {o['dice']:.3f}")
    return rows


def activation_meter_check(model, side: int = 16) -> int:
    """Bytes saved for backward by one forward at side `side` (ActivationMeter), for reference."""
    meter = ActivationMeter(exclude=model.parameters())
    x = torch.zeros(1, 1, side, side, side)
    with meter:
        model.loss(x, torch.zeros(1, side, side, side, dtype=torch.long))
    return meter.peak


def schedule_rows(pps=(2, 4), microbatches: int = 4, steps: int = 4, batch_size: int = 8,
                  model_config: dict | None = None) -> list[dict]:
    """GPipe vs 1F1B on the U-Net (bench): median step time, largest stage's peak activations and
    the skips' share of the pipeline's bytes, measured in one run per schedule."""
    rows = []
    for pp in pps:
        for name in ("gpipe", "1f1b"):
            r = parlab.run(f"pp-{name}", world_size=pp, model="unet3d", steps=steps,
                           batch_size=batch_size, microbatches=microbatches,
                           model_config=dict(model_config or {}))
            sent = {ph: sum(r.bytes_per_rank(phase=ph)) for ph in PHASES}
            rows.append({"pp": pp, "schedule": name, "step_s": r.step_time(warmup=1),
                         "activations": max(m["activations"] for m in r.memory),
                         "skip_share": (sent["pp-skip"] + sent["pp-skip-bwd"]) / sum(sent.values())})
            row = rows[-1]
            print(f"pp={pp} m={microbatches} pp-{name:5} step {row['step_s'] * 1e3:7.1f} ms, largest "
                  f"stage activations {row['activations'] / 2**20:6.2f} MiB, skips "
                  f"{row['skip_share']:.0%} of the pipeline's bytes", flush=True)
    return rows


def bench(steps: int = 4) -> dict:
    """`python -m parlab bench pp --unet`: schedules, memory per stage vs model and input size,
    whole-volume vs sliding-window inference on a 64³ test volume."""
    out = {"schedules": schedule_rows(steps=steps)}
    out["memory"] = memory_per_stage()
    small = train_unet()  # 16³ crops, one process
    out["inference"] = inference_compare(small, side=64, repeats=2)
    # LAMP's point: a larger training input, which the pipeline fits — 32³ crops on 2 stages
    large = train_unet(block=32, batch_size=2, scheme="pp-gpipe", world_size=2)
    out["inference_32"] = inference_compare(large, side=64, repeats=2)
    a, b = out["inference"]["whole volume"]["dice"], out["inference_32"]["whole volume"]["dice"]
    print(f"whole-volume Dice, trained on 16³ crops {a:.3f}, on 32³ crops (pipelined) {b:.3f}: "
          f"the larger training input is {'better' if b > a else 'not better'} here "
          f"({b - a:+.3f}; it also saw {2 * 32 ** 3 / (4 * 16 ** 3):.0f}× the voxels per step, "
          "2·32³ vs 4·16³, so input size and data seen are not separated)")
    return out
