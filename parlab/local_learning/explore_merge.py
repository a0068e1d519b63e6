"""What notebook 05's section on layer-wise partitioning and merging runs (Akintoye, Han, Lloyd et
al., "Layer-wise partitioning and merging for efficient and scalable deep learning", FGCS 149,
2023, arXiv 2207.11019; `partition_merge`, `schemes_merge`): the merges the step-time model
weighs, `layerwise-merge` against `single`, its bytes beside the closed form, and the measured
comparison with PipeDream and PipeDream-2BW (Narayanan et al., SOSP 2019; ICML 2021) —
throughput on the paced clock, memory per stage beside its formula, loss — each with a verdict
computed from the run.
"""

from __future__ import annotations

import statistics

import parlab
from parlab.engine.runner import make_config
from parlab.local_learning import cost, partition_merge
from parlab.local_learning import explore as ex

SCHEME = "layerwise-merge"
MODEL_TOLERANCE = 0.10  # the step-time model against a paced run: ±10% (stated, checked below)


def _verdict(ok: bool) -> str:
    return "HOLDS" if ok else "DOES NOT HOLD"


def _layout(result) -> str:
    x = result.outputs[0].extras
    return f"k={x['pp']} stages × dp={x['dp']}, layers per stage {x['counts']}, m={x['microbatches']}"


# ----------------------------------------------------------------------------- the merges weighed
def merge_table(world_size: int, **common) -> partition_merge.Candidate:
    """Every merge of the layer-wise partitions the configuration allows, with the model's seconds
    (the run's clock) per micro-batch and per step; the chosen one marked. Returns it."""
    cfg = make_config(SCHEME, world_size=world_size, steps=1, **common)
    chosen = partition_merge.plan(cfg)
    link = partition_merge.link_of(cfg)
    unit = (cfg.clock.label if cfg.clock.paced
            else "the paced clock's reference machine (counted work, margin 1)")
    print(f"{cfg.model}, {cfg.batch_size} rows per step, {world_size} devices, link "
          f"{link.name if link else 'none (messages free)'}; seconds of {unit}")
    for c in partition_merge.candidates(cfg):
        mark = "→" if c.layout == chosen.layout else " "
        lay, after = c.layout, max(a + b for a, b in zip(c.sync_s, c.optimizer_s))
        print(f" {mark} k={lay.pp} × dp={lay.dp}: layers {list(lay.counts)}, m={lay.microbatches}; "
              f"slowest pace {max(c.pace_s) * 1e3:6.1f} ms per micro-batch (message "
              f"{c.message_s * 1e3:5.1f} ms); pipeline {c.pipeline_s * 1e3:7.1f} ms + sync and "
              f"update {after * 1e3:6.1f} ms = step {c.step_s * 1e3:7.1f} ms (model)")
    return chosen


# ----------------------------------------------------------------------------- correctness, bytes
def check_exact(world_size: int, steps: int = 3) -> dict:
    """`layerwise-merge` at its own merge and at the un-merged pipeline (pp = world_size) against
    `single`: losses and parameters within 1e-4 (synchronous: exact)."""
    ref = parlab.run("single", steps=steps)
    out = {}
    for options in [{}] + ([{"pp": world_size}] if world_size > 1 else []):
        r = parlab.run(SCHEME, world_size=world_size, steps=steps, **options)
        label = ", ".join(f"{k}={v}" for k, v in options.items()) or "its merge"
        print(f"{SCHEME} ({label}): {_layout(r)}; match: {r.compare(ref).match}")
        out[label] = r
    return out


def ledger_report(result) -> None:
    """Bytes each rank sent per step, by phase, beside `cost.merge_bytes_per_rank`."""
    cfg = result.config
    layout = partition_merge.plan(cfg).layout
    form = cost.merge_bytes_per_rank(cfg, layout)
    print(f"{SCHEME}: {_layout(result)}")
    phases = ("pp-fwd", "pp-bwd", "embed-tie", "grad-sync")
    by_phase = {ph: result.bytes_per_rank(phase=ph) for ph in phases}
    for rank, total in enumerate(result.bytes_per_rank()):
        parts = ", ".join(f"{ph} {by_phase[ph][rank] // cfg.steps:,}" for ph in phases
                          if by_phase[ph][rank])
        print(f"  rank {rank}: {total // cfg.steps:>8,} B per step ({parts or 'nothing'}); closed "
              f"form {form[rank] // cfg.steps:>8,} B: {total == form[rank]}")


# ----------------------------------------------------------------------------- beside PipeDream
def stash_comparison(pp: int, microbatches: int, steps: int = 3, clock: str = "A100",
                     link: str = ex.TIMING_LINK) -> list[dict]:
    """One paced sweep on the timing model (`explore.TIMING_MODEL`) at `pp` devices: layerwise-merge
    at its merge, layerwise-merge un-merged (k = pp), PipeDream, PipeDream-2BW — in that order."""
    return ex.compare_schemes(pp, steps=steps, model_config=ex.TIMING_MODEL,
                              batch_size=ex.TIMING_BATCH, link=link, microbatches=microbatches,
                              clock=clock, quiet=True,
                              schemes=((SCHEME, {}), (SCHEME, {"pp": pp}), ("pipedream", {}),
                                       ("pipedream-2bw", {})))


def throughput_report(rows: list[dict]) -> dict:
    """Step time and throughput of each run, the model's prediction beside the merge's, and the
    verdicts: the merge beats the un-merged layer-wise pipeline (its own choice, measured), the
    model is within `MODEL_TOLERANCE`, and the paper's speed claim against PipeDream and 2BW."""
    merged, layered, pipedream, twobw = rows
    clock = merged["result"].clock.label
    batch = merged["result"].config.batch_size
    for row in rows:
        r = row["result"]
        x = r.outputs[0].extras
        model = (f"; model {x['predicted_step_s'] * 1e3:6.0f} ms ({_layout(r)})"
                 if "predicted_step_s" in x else "")
        print(f"{row['scheme']:24} {row['step_s'] * 1e3:6.0f} ms/step, {batch / row['step_s']:5.1f} "
              f"samples/s, idle {row['idle']:4.0%}{model}")
    errors = [abs(row["result"].outputs[0].extras["predicted_step_s"] / row["step_s"] - 1)
              for row in (merged, layered)]
    ok_model = max(errors) <= MODEL_TOLERANCE
    ok_merge = merged["step_s"] <= layered["step_s"]
    vs_pd, vs_2bw = pipedream["step_s"] / merged["step_s"], twobw["step_s"] / merged["step_s"]
    ok_speed = vs_pd >= 1 and vs_2bw >= 1
    print(f"[{clock}] the step-time model within ±{MODEL_TOLERANCE:.0%} of both merge runs (worst "
          f"{max(errors):.1%}): {_verdict(ok_model)}")
    print(f"[{clock}] the merge the model chose ({merged['result'].outputs[0].extras['pp']} stages) "
          f"is at least as fast as the un-merged layer-wise pipeline: "
          f"{layered['step_s'] / merged['step_s']:.2f}× its throughput: {_verdict(ok_merge)}")
    print(f"[{clock}] the paper's speed claim, here: layerwise-merge {vs_pd:.2f}× PipeDream's and "
          f"{vs_2bw:.2f}× 2BW's throughput (≥ 1× both): {_verdict(ok_speed)}")
    return {"model_error": max(errors), "model_holds": ok_model, "merge_holds": ok_merge,
            "vs_pipedream": vs_pd, "vs_2bw": vs_2bw, "speed_holds": ok_speed}


def memory_report(rows: list[dict]) -> dict:
    """Per stage (dp replica 0): measured weights, gradients, optimizer state and activations, and
    the stashed weight copies (the run's own count at its peak × the stage's bytes), each beside its
    closed form; the verdicts: no merged stage stashes anything, and at the same stages the merge
    holds fewer weight bytes (live + stashed) than PipeDream on every stage."""
    held = {}
    for row in rows:
        r = row["result"]
        print(f"{row['scheme']}:")
        held[row["scheme"]] = []
        for out, mem in zip(r.outputs, r.memory):
            x = out.extras
            if x.get("dp_rank", 0):
                continue  # one replica: every replica holds the same
            n = x["stage_numel"]
            form = cost.merge_stage_memory(n, r.config.optimizer)
            stash, stash_form = (cost.stash_bytes(x["peak_versions"], n),
                                 cost.stash_bytes(x["versions_formula"], n))
            held[row["scheme"]].append(mem["params"] + stash)
            print(f"  stage {x['stage']}: weights {mem['params']:>9,} B (formula {form['params']:>9,}), "
                  f"grads {mem['grads']:>9,}, optimizer {mem['optimizer']:>9,} "
                  f"(formula {form['optimizer']:>9,}), activations {mem['activations']:>10,}; "
                  f"stashed copies {x['peak_versions']} = {stash:>9,} B (formula {stash_form:>9,})")
    merged, layered, pipedream, _ = (held[row["scheme"]] for row in rows)
    no_stash = all(row["result"].outputs[i].extras["peak_versions"] == 0 for row in rows[:2]
                   for i in range(len(row["result"].outputs)))
    fewer = all(a < b for a, b in zip(layered, pipedream))
    print(f"no stashed weight version on any layerwise-merge stage: {_verdict(no_stash)}")
    print(f"at the same {len(layered)} stages, layerwise-merge holds fewer weight bytes (live + "
          f"stashed) than PipeDream on every stage ({sum(layered):,} B against "
          f"{sum(pipedream):,} B in all): {_verdict(fewer)}")
    return {"no_stash": no_stash, "fewer_than_pipedream": fewer}


def loss_report(world_size: int, microbatches: int, steps: int = 30, clock: str = "A100") -> dict:
    """Loss of the spirals MLP over `steps` for layerwise-merge, PipeDream and 2BW (paced, NVLink)
    beside `single`'s: the merge is synchronous, so its curve is the reference's (the paper's
    "without compromising the accuracy of the non-parallel approach"); the stale-weight pipelines
    follow another trajectory."""
    ref = parlab.run("single", model="mlp", steps=steps)
    rows = ex.compare_schemes(world_size, steps=steps, model="mlp", microbatches=microbatches,
                              link=ex.TIMING_LINK, clock=clock, quiet=True,
                              schemes=((SCHEME, {}), ("pipedream", {}), ("pipedream-2bw", {})))
    gaps = []
    for row in rows:
        r = row["result"]
        gap = max(abs(a - b) for a, b in zip(r.losses, ref.losses))
        gaps.append(gap)
        print(f"{row['scheme']:16} final loss {r.losses[-1]:.4f} (single {ref.losses[-1]:.4f}); "
              f"largest gap to single's curve {gap:.2e}")
    ok = gaps[0] <= 1e-4 * max(1.0, statistics.fmean(abs(v) for v in ref.losses))
    print(f"layerwise-merge's loss curve is single's (within 1e-4): {_verdict(ok)}; PipeDream's and "
          f"2BW's differ by up to {gaps[1]:.2e} and {gaps[2]:.2e} (stale weights)")
    return {"rows": rows, "exact_holds": ok, "gaps": gaps}
