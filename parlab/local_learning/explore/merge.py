"""What notebook 05's section on layer-wise partitioning and merging runs (Akintoye, Han, Lloyd et
al., "Layer-wise partitioning and merging for efficient and scalable deep learning", FGCS 149,
2023, arXiv 2207.11019; `partition_merge`, `schemes_merge`): the merges the step-time model
weighs, `layerwise-merge` against `single`, its bytes beside the closed form, and the measured
comparison with PipeDream and PipeDream-2BW (Narayanan et al., SOSP 2019; ICML 2021) —
throughput on the paced clock, memory per stage beside its formula, loss — each with a verdict
computed from the run.
"""

from __future__ import annotations

import parlab
from parlab.engine.runner import make_config
from parlab.local_learning import cost, partition_merge
from parlab.local_learning.explore import timing as ex_timing

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
    unit = partition_merge.pricing_clock(cfg).unit
    print(f"{cfg.model}, {cfg.batch_size} rows per step, {world_size} devices, link "
          f"{link.name if link else 'none (messages free)'}; in {unit}"
          + ("" if cfg.clock.paced else " (the work counted, priced on the A100)"))
    for c in partition_merge.candidates(cfg):
        mark = "→" if c.layout == chosen.layout else " "
        lay, after = c.layout, max(a + b for a, b in zip(c.sync_s, c.optimizer_s))
        print(f" {mark} k={lay.pp} × dp={lay.dp}: layers {list(lay.counts)}, m={lay.microbatches}; "
              f"slowest pace {max(c.pace_s) * 1e3:6.3f} per micro-batch (message "
              f"{c.message_s * 1e3:6.4f}); pipeline {c.pipeline_s * 1e3:6.3f} + sync and "
              f"update {after * 1e3:6.3f} = step {c.step_s * 1e3:6.3f} {unit} (model)")
    return chosen


# ----------------------------------------------------------------------------- correctness, bytes
def exact_against_single(world_size: int, steps: int = 3):
    """`layerwise-merge` at its own merge against `single`: losses and parameters within 1e-4
    (synchronous: exact; forced stage counts and world sizes 1, 2, 4 are in
    `tests/test_local_learning_merge.py`). Returns the run."""
    ref = parlab.run("single", steps=steps)
    r = parlab.run(SCHEME, world_size=world_size, steps=steps)
    print(f"{SCHEME} at world_size={world_size}: {_layout(r)}; match: {r.compare(ref).match}")
    return r


def bytes_report(result) -> None:
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
def _stashes(row) -> bool:
    """Whether a sweep row's run stashed weight versions (PipeDream's extras count them)."""
    return any(out.extras.get("peak_versions", 0) for out in row["result"].outputs)


def stash_comparison(sweep_rows: list[dict], pp: int, microbatches: int, steps: int = 3,
                     clock: str = "A100", link: str = ex_timing.TIMING_LINK) -> list[dict]:
    """layerwise-merge at its merge and PipeDream-2BW, paced, on the timing model
    (`explore.timing.TIMING_MODEL`) at `pp` devices, beside two runs of the chapter's timing sweep
    (`explore.timing.timing_sweep`, the same model, link, clock and micro-batches): its baseline pp-1f1b —
    the un-merged layer-wise pipeline, one stage per device, flushed 1F1B — and PipeDream. Returns
    [merge, pp-1f1b, PipeDream, 2BW], each row with the merge model's step (`model_step_s`): the
    chosen merge's, and the model of the merge into k = pp stages for the un-merged pipeline."""
    base = sweep_rows[0]["result"].config
    if (base.world_size, base.options.get("microbatches"), base.steps) != (pp, microbatches, steps):
        raise ValueError(f"the sweep ran pp={base.world_size}, microbatches="
                         f"{base.options.get('microbatches')}, steps={base.steps}; this comparison "
                         f"needs pp={pp}, microbatches={microbatches}, steps={steps}")
    common = dict(model_config=ex_timing.TIMING_MODEL, batch_size=ex_timing.TIMING_BATCH, link=link,
                  microbatches=microbatches, clock=clock)
    merged, twobw = ex_timing.compare_schemes(pp, steps=steps, quiet=True, schemes=(
        (SCHEME, {}), ("pipedream-2bw", {})), **common)
    layered = partition_merge.candidates(make_config(SCHEME, world_size=pp, steps=steps, pp=pp,
                                                     **common))[0]
    flushed = dict(sweep_rows[0], model_step_s=layered.step_s, model_counts=layered.layout.counts)
    merged["model_step_s"] = merged["result"].outputs[0].extras["predicted_step_s"]
    return [merged, flushed, next(row for row in sweep_rows if _stashes(row)), twobw]


def throughput_report(rows: list[dict]) -> dict:
    """Step time and throughput of each run, the merge model beside both flushed pipelines, and the
    verdicts: the model within `MODEL_TOLERANCE`, the merge faster than the un-merged layer-wise
    pipeline, and the paper's speed claim against PipeDream and 2BW."""
    merged, flushed, pipedream, twobw = rows
    clock, unit = merged["result"].clock.label, merged["result"].clock.unit
    batch = merged["result"].config.batch_size
    for row in rows:
        model = (f"; merge model {row['model_step_s'] * 1e3:6.3f} {unit}" if "model_step_s" in row
                 else "")
        print(f"{row['scheme']:16} {row['step_s'] * 1e3:6.3f} {unit}/step, "
              f"{batch / row['step_s']:5.0f} samples/s, idle {row['idle']:4.0%}{model}")
    print(f"  layerwise-merge: {_layout(merged['result'])}; pp-1f1b: the un-merged pipeline (the "
          f"merge model's cut at k = {len(flushed['model_counts'])}: {list(flushed['model_counts'])})")
    errors = [abs(row["model_step_s"] / row["step_s"] - 1) for row in (merged, flushed)]
    ok_model = max(errors) <= MODEL_TOLERANCE
    ok_merge = merged["step_s"] <= flushed["step_s"]
    vs_pd, vs_2bw = pipedream["step_s"] / merged["step_s"], twobw["step_s"] / merged["step_s"]
    ok_speed = vs_pd >= 1 and vs_2bw >= 1
    print(f"[{clock}] the merge model within ±{MODEL_TOLERANCE:.0%} of both flushed pipelines "
          f"(worst {max(errors):.1%}): {_verdict(ok_model)}")
    print(f"[{clock}] the merge the model chose is at least as fast as the un-merged layer-wise "
          f"pipeline: {flushed['step_s'] / merged['step_s']:.2f}× its throughput: {_verdict(ok_merge)}")
    print(f"[{clock}] the paper's speed claim, here: layerwise-merge {vs_pd:.2f}× PipeDream's and "
          f"{vs_2bw:.2f}× 2BW's throughput (≥ 1× both): {_verdict(ok_speed)}")
    m = pipedream["result"].config.options.get("microbatches")
    p = pipedream["result"].config.world_size
    if m is not None and m < p:
        print(f"  caveat: m={m} < p={p} micro-batches in flight, the regime where PipeDream idles like a "
              f"flushed pipeline ({pipedream['idle']:.0%} here) and the chapter advises against it: "
              "this compares the merge with PipeDream where PipeDream is weakest")
    return {"model_error": max(errors), "model_holds": ok_model, "merge_holds": ok_merge,
            "vs_pipedream": vs_pd, "vs_2bw": vs_2bw, "speed_holds": ok_speed}


def stage_memory_report(rows: list[dict]) -> dict:
    """Per stage (dp replica 0) of layerwise-merge, PipeDream and 2BW: measured weights, gradients,
    optimizer state and activations, and the stashed weight copies (the run's own count at its
    peak × the stage's bytes), each beside its closed form; the verdicts: no merged stage stashes a
    version, and the merge's largest weight footprint (live + stashed) per device is at most
    PipeDream's, though its stages hold more layers."""
    merged, _, pipedream, twobw = rows
    held = []
    for row in (merged, pipedream, twobw):
        r = row["result"]
        print(f"{row['scheme']}:")
        held.append([])
        for out, mem in zip(r.outputs, r.memory):
            x = out.extras
            if x.get("dp_rank", 0):
                continue  # one replica: every replica holds the same
            n = x["stage_numel"]
            form = cost.merge_stage_memory(n, r.config.optimizer)
            stash, stash_form = (cost.stash_bytes(x["peak_versions"], n),
                                 cost.stash_bytes(x["versions_formula"], n))
            held[-1].append(mem["params"] + stash)
            print(f"  stage {x['stage']}: weights {mem['params']:>9,} B (formula {form['params']:>9,}), "
                  f"grads {mem['grads']:>9,}, optimizer {mem['optimizer']:>9,} "
                  f"(formula {form['optimizer']:>9,}), activations {mem['activations']:>10,}; "
                  f"stashed copies {x['peak_versions']} = {stash:>9,} B (formula {stash_form:>9,})")
    no_stash = all(out.extras["peak_versions"] == 0 for out in merged["result"].outputs)
    lighter = max(held[0]) <= max(held[1])
    print(f"no stashed weight version on any layerwise-merge stage: {_verdict(no_stash)}")
    print(f"largest weights held per device (live + stashed): layerwise-merge {max(held[0]):,} B "
          f"against PipeDream's {max(held[1]):,} B, at most: {_verdict(lighter)}")
    return {"no_stash": no_stash, "lighter": lighter}


def loss_comparison(rows: list[dict]) -> dict:
    """Final losses of the sweep: layerwise-merge and pp-1f1b are both global backprop on the same
    batches (each equals `single`), so their losses agree within 1e-4 whatever the merge — the
    paper's "without compromising the accuracy of the non-parallel approach"; PipeDream's and 2BW's
    stale weights move theirs."""
    merged, flushed, pipedream, twobw = rows
    for row in rows:
        print(f"{row['scheme']:16} losses {', '.join(f'{v:.4f}' for v in row['result'].losses)}")
    ref = flushed["result"].losses
    gap = max(abs(a - b) for a, b in zip(merged["result"].losses, ref))
    ok = gap <= 1e-4 * max(abs(v) for v in ref)
    stale = [max(abs(a - b) for a, b in zip(row["result"].losses, ref)) for row in (pipedream, twobw)]
    print(f"layerwise-merge's losses are global backprop's (pp-1f1b's, within 1e-4): {_verdict(ok)}; "
          f"PipeDream's and 2BW's differ by up to {stale[0]:.1e} and {stale[1]:.1e} (stale weights)")
    return {"exact_holds": ok, "gap": gap, "stale_gaps": stale}
