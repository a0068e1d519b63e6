"""Chapter 04's looped breadth-first schedule (Lamy-Poirier, "Breadth-First Pipeline Parallelism",
MLSys 2023) beside PyTorch's `ScheduleLoopedBFS` and Megatron's interleaved 1F1B: our action lists
against torch's own order, the run against the single process, its bubble measured on the paced
A100 beside (p−1)/(v·m+p−1), and the activations each schedule holds (`cost.held_peak` on the
schedule data).
"""

from __future__ import annotations

import parlab
from parlab.pipeline import cost
from parlab.pipeline.looped_bfs import torch_order
from parlab.pipeline.schedules import make_schedule


def looped_bfs_report(world_size: int = 2, microbatches: int = 4, chunks: int = 2, steps: int = 2,
                      clock: str = "A100") -> dict:
    """Print the four comparisons; returns the measured bubble and the verdicts."""
    from parlab.pipeline import explore

    p, m, v = world_size, microbatches, chunks
    ours = make_schedule("looped-bfs", p, m, v)
    same = [list(rank) for rank in ours.actions] == torch_order(p, m, v)
    print(f"looped-bfs p={p} m={m} v={v}: our action lists "
          + ("equal" if same else "DIFFER from")
          + " torch.distributed.pipelining's ScheduleLoopedBFS order, rank by rank")
    print(ours.text())
    got = explore.measured_vs_ideal("pp-looped-bfs", p, m, steps=steps, draw=False, clock=clock,
                                    chunks=v)
    run = got["result"]
    ref = parlab.run("single", steps=steps, model_config=explore.COMPUTE_HEAVY,
                     batch_size=run.config.batch_size)
    match = run.compare(ref)
    print(f"exact: pp-looped-bfs vs single on the same model: {str(match).split('  (')[0]}")
    theory = cost.theory_bubble("looped-bfs", p, m, v)
    gap = got["measured"] - theory
    off = got["measured"] - got["ideal"]
    print(f"bubble (paced A100): measured {got['measured']:.1%} vs the ideal of these action lists at "
          f"the measured stage times {got['ideal']:.1%}: {off * 100:+.1f} points — "
          + ("agrees" if abs(off) <= 0.01 else "does NOT agree") + " (±1 point); the closed form "
          f"(p−1)/(v·m+p−1) = {theory:.1%} assumes equal stages ({gap * 100:+.1f} points: here the "
          "first and last stages also carry the embedding and the head)")
    rows = {}
    for name in ("gpipe", "1f1b", "interleaved", "looped-bfs"):
        w = v if name in ("interleaved", "looped-bfs") else 1
        if name == "interleaved" and m % p:
            continue
        schedule = make_schedule(name, p, m, w)
        held = cost.held_peak(schedule, 0, {s: 1.0 / w for s in range(p * w)})
        rows[name] = (cost.ideal_bubble(schedule, forward=1.0 / w), held)
        print(f"  {name:12} ideal bubble {rows[name][0]:6.1%}, rank 0 holds {held:5.2f} "
              "micro-batches of a whole stage's activations")
    if "interleaved" in rows:
        b_bfs, h_bfs = rows["looped-bfs"]
        b_int, h_int = rows["interleaved"]
        print(f"looped-bfs vs interleaved 1F1B at the same p, m, v: bubble {b_bfs:.1%} vs "
              f"{b_int:.1%} ({'the same' if abs(b_bfs - b_int) < 1e-9 else 'different'}), "
              f"activations {h_bfs / h_int:.2f}× — breadth first pays GPipe's memory for the "
              "same bubble, and in exchange runs each chunk's micro-batches back to back (its "
              "gradients for a chunk are complete early: Lamy-Poirier's overlap with data "
              "parallelism)")
    return {"same_as_torch": same, "match": match.match, "measured": got["measured"],
            "ideal": got["ideal"], "theory": theory, "rows": rows}
