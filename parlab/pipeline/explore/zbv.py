"""Chapter 04's ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §6) and the
schedules' bubbles at a real model's shapes.

`zbv_report`: our action lists against PyTorch's own `ScheduleZBVZeroBubble` order, the run
against the single process, the bubble measured on the paced A100 beside the ideal of the same
lists and the closed form (p−1)/(6m+p−1), the activations held (`cost.held_peak`) and messages
sent beside 1F1B and ZB-H1. `bubbles_at_scale`: gpt2-xl's width (a few of its 48 blocks: the
number is a parameter, and said in the output) shapes-only on paced A100s over NVLink 3, each
schedule's bubble measured beside the ideal of its lists at the run's stage times and the closed
form at equal stages.
"""

from __future__ import annotations

import parlab
from parlab.pipeline import cost, cost_dualpipe
from parlab.pipeline.schedules import make_schedule
from parlab.pipeline.zbv import torch_order, zbv_p2p_messages_per_step

TOLERANCE = 0.01  # measured vs ideal bubble, in fraction of the step (virtual time is exact)
CHUNKS = {"interleaved": 2, "looped-bfs": 2, "zbv": 2}  # chunks per rank; the others 1


def _closed(name: str, p: int, m: int) -> float | None:
    """The closed form at equal stages (F = B = W), or None where none applies at this p, m."""
    if name == "dualpipe":
        return cost_dualpipe.dualpipe_bubble(p, m)
    if name == "zbv" and m < 2 * p - 1 or name == "looped-bfs" and m < p:
        return None
    return cost.theory_bubble(name, p, m, CHUNKS.get(name, 1))


def zbv_report(world_size: int = 2, microbatches: int = 4, steps: int = 2,
               clock: str = "A100") -> dict:
    """Print the comparisons; returns the measured and ideal bubble and the verdicts."""
    from parlab.pipeline import explore

    p, m = world_size, microbatches
    ours = make_schedule("zbv", p, m, 2)
    same = [list(rank) for rank in ours.actions] == torch_order(p, m)
    print(f"zbv p={p} m={m}: our action lists " + ("equal" if same else "DIFFER from")
          + " torch.distributed.pipelining's ScheduleZBVZeroBubble order, rank by rank")
    print(ours.text())
    model = {**explore.COMPUTE_HEAVY, "n_layer": max(explore.COMPUTE_HEAVY["n_layer"], 2 * p)}
    run = parlab.run("pp-zbv", world_size=p, steps=steps, microbatches=m, clock=clock,
                     model_config=model)
    ref = parlab.run("single", steps=steps, model_config=model, batch_size=run.config.batch_size)
    match = run.compare(ref)
    print(f"exact: pp-zbv vs single on the same model: {str(match).split('  (')[0]}")
    measured = cost.measured_bubble(run.timeline)
    ideal = cost.bubble_of(cost.ideal_from_measured(ours, run.timeline))
    closed = _closed("zbv", p, m)
    ok = abs(measured - ideal) <= TOLERANCE
    print(f"bubble (paced A100, {model['n_layer']} layers in {2 * p} stages): measured "
          f"{measured:.1%} vs the ideal of these action lists at the measured stage times "
          f"{ideal:.1%}: " + ("agrees" if ok else "does NOT agree") + f" (±{TOLERANCE:.0%}); "
          + (f"the closed form (p−1)/(6m+p−1) = {closed:.1%} assumes equal stages, F = B = W"
             if closed is not None else f"m < 2p−1 = {2 * p - 1}: no closed form (the order is "
             "built for 2p−1 micro-batches and the rest dropped)"))
    rows = {}
    for name in ("1f1b", "zb", "zbv"):
        v = CHUNKS.get(name, 1)
        s = make_schedule(name, p, m, v)
        held = cost.held_peak(s, 0, {k: 1.0 / v for k in range(p * v)})
        sends = (zbv_p2p_messages_per_step(p, m, 1 % p) if name == "zbv"
                 else cost.p2p_messages_per_step(p, 1, m, 1 % p))
        rows[name] = (cost.ideal_bubble(s, forward=1.0 / v, backward=2.0 / v), held, sends)
        print(f"  {name:5} ideal bubble {rows[name][0]:6.1%} (F = B = W), rank 0 holds "
              f"{held:4.2f} micro-batches of a whole stage's activations, rank {1 % p} sends "
              f"{sends} boundaries per step")
    b_v, h_v, s_v = rows["zbv"]
    b_1, h_1, s_1 = rows["1f1b"]
    print(f"ZB-V vs 1F1B: bubble {b_v:.1%} vs {b_1:.1%}, activations held {h_v / h_1:.2f}× "
          f"({'the same' if abs(h_v - h_1) < 1e-9 else 'different'}: the paper's claim), "
          f"messages {s_v / s_1:.1f}× (both chunks send down and back)")
    return {"same_as_torch": same, "match": match.match, "measured": measured, "ideal": ideal,
            "theory": closed, "rows": rows}


def _busiest(timeline: list[dict], step: int) -> tuple[int, float]:
    """(rank, its compute ÷ the ranks' mean) for the most loaded rank in `step`."""
    busy: dict[int, float] = {}
    for e in cost.pipeline_events(timeline, step):
        busy[e["rank"]] = busy.get(e["rank"], 0.0) + e["t1"] - e["t0"]
    rank = max(busy, key=busy.get)
    return rank, busy[rank] * len(busy) / sum(busy.values())


def bubbles_at_scale(schedules=("1f1b", "zbv"), microbatches=(4, 8), pp: int = 4,
                     layers: int = 8, preset: str = "gpt2-xl", link: str = "NVLink3",
                     steps: int = 2) -> list[tuple]:
    """Each schedule at each m, shapes-only at `preset`'s width with `layers` of its blocks on paced
    A100s over `link`: rows (schedule, m, measured, ideal, closed form or None, busiest rank's
    compute ÷ the mean), printed."""
    from parlab.models.presets import PRESETS

    full = PRESETS[preset]["n_layer"]
    print(f"{preset}'s width ({PRESETS[preset]['n_embd']} wide, {PRESETS[preset]['n_head']} "
          f"heads, vocabulary {PRESETS[preset]['vocab_size']}) with {layers} of its {full} blocks "
          f"(fewer blocks keep this cell short; the parameter `scale_layers` gives more), "
          f"shapes only, p={pp}, one row per micro-batch, paced A100 over {link}")
    print(f"{'schedule':11} {'m':>3} {'measured':>9} {'ideal':>7} {'closed':>7} {'busiest':>8}  verdict")
    rows = []
    for name in schedules:
        v = CHUNKS.get(name, 1)
        for m in microbatches:
            try:
                schedule = make_schedule(name, pp, m, v)
            except ValueError as e:
                print(f"{name:11} {m:>3}  — {e}")
                continue
            options = {"chunks": v} if name in ("interleaved", "looped-bfs") else {}
            r = parlab.run(f"pp-{name}", world_size=pp, model=preset, shapes_only=True,
                           model_config={"n_layer": layers}, clock="A100", link=link,
                           microbatches=m, batch_size=m, steps=steps, timeout=3600.0, **options)
            latency = cost.measured_message_latency(r.ledger)
            measured = cost.measured_bubble(r.timeline)
            ideal = cost.bubble_of(cost.ideal_from_measured(schedule, r.timeline, latency))
            closed = _closed(name, pp, m)
            ok = abs(measured - ideal) <= TOLERANCE
            load = _busiest(r.timeline, steps - 1)
            print(f"{name:11} {m:>3} {measured:9.1%} {ideal:7.1%} "
                  + (f"{closed:7.1%}" if closed is not None else f"{'—':>7}")
                  + f" {load[1]:7.2f}× (rank {load[0]})  measured vs ideal "
                  + f"{'agrees' if ok else 'does NOT agree'} (±{TOLERANCE:.0%})"
                  + ("" if closed is None else f"; vs closed form {(measured - closed) * 100:+.1f} "
                     "points"))
            rows.append((name, m, measured, ideal, closed, load[1]))
    if rows:
        print("busiest: the most loaded rank's compute in the last step over the ranks' mean. "
              "Closed forms assume equal stages; here the first and last stages also hold the "
              f"embedding and the {PRESETS[preset]['vocab_size']}-token head (ZB-V's V puts both on "
              "rank 0), so the ideal of the lists at the run's own stage times is the judge")
    return rows
