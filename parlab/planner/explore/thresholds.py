"""Chapter 13: the scaling-book's closed-form thresholds beside the planner's real-scale ranking.

Austin et al., "How to Scale Your Model" (Google DeepMind 2025), training chapter: DP and FSDP are
compute-bound past (b/2)·F/β tokens per replica, TP below (2d + d_ff)·β/(b·F) ways
(`parlab.planner.thresholds`, derivation and simplifications there). Each plan the planner ranks
(`parlab.planner.scaling.real_scale.enumerate_plans`) is checked on the links
`extrapolate.predict` charges it (dp's all-reduce on InfiniBand, tp inside a node on NVLink), and
the pick's agreement with the closed forms is a computed verdict, diagnosed where they differ.
"""

from __future__ import annotations

from parlab.planner import thresholds as th

TOP = 12  # rows printed per table before "… N more"


def format_table(rows: list[dict]) -> str:
    out = [f"{'GPU':<5} {'link':<9} {'F TFLOP/s':>9} {'β GB/s':>7} {'F/β':>6} "
           f"{'DP ≥ tok':>8} {'FSDP ≥ tok':>10} {'TP ≤':>6} {'TP(MLP) ≤':>9}"]
    for r in rows:
        out.append(f"{r['accelerator']:<5} {r['link']:<9} {r['flops'] / 1e12:9.0f} "
                   f"{r['beta'] / 1e9:7.1f} {r['F_over_beta']:6.0f} {r['dp_min_tokens']:8.0f} "
                   f"{r['fsdp_min_tokens']:10.0f} {r['tp_max']:6.1f} {r['tp_max_mlp']:9.1f}")
    return "\n".join(out)


def check_ranking(preset: str, world_size: int, batch: int, accelerator: str = "A100") -> dict:
    """Every plan the planner ranks at `world_size`, checked against the closed forms."""
    from parlab.planner.scaling import real_scale
    from parlab.planner.scaling.extrapolate import HARDWARE, predict

    plans, _ = real_scale.enumerate_plans(preset, world_size, batch)
    dp_row = th.threshold_row(preset, accelerator, "InfiniBand")
    tp_row = th.threshold_row(preset, accelerator, "NVLink")
    seq = real_scale.check_preset(preset)["block_size"]
    shape, hw = real_scale.shape_of(preset), HARDWARE[accelerator]
    rows = []
    for rank, p in enumerate(plans, 1):
        plan = p["plan"]
        tokens = batch * seq / plan.dp
        c = th.plan_check(plan.tp, plan.dp, tokens, dp_row, tp_row)
        rows.append({"rank": rank, "name": p["name"], "pred_s": p["pred_s"], "tokens": tokens,
                     "bubble": predict(shape, hw, plan, batch)["bubble"], "plan": plan, **c})
    return {"N": world_size, "batch": batch, "rows": rows, "dp_row": dp_row, "tp_row": tp_row}


def verdict(check: dict) -> str:
    """Does the planner's pick agree with the closed forms? Computed, with a diagnosis if not."""
    rows = check["rows"]
    if not rows:
        return f"N={check['N']}: the planner ranks no plan; nothing to compare"
    pick, bound = rows[0], [r for r in rows if r["compute_bound"]]
    slow = [r["rank"] for r in rows if not r["compute_bound"]]
    share = (f"{len(bound)} of {len(rows)} ranked plans clear both bounds"
             + (f"; the communication-bound ones rank {slow}" if slow else ""))
    if pick["compute_bound"]:
        return (f"N={check['N']}: agrees — the pick {pick['name']} clears both closed forms ({share}); "
                "among those the planner orders by what the closed forms leave out (bubble, α, "
                "the unoverlapped dp all-reduce, the head)")
    if not bound:
        return (f"N={check['N']}: no ranked plan clears both bounds ({share}): the closed forms "
                f"call every plan communication-bound and the planner picks the least bad, {pick['name']}")
    alt = bound[0]
    why = (f"its pipeline bubble ({alt['bubble']:.0%} of its slots), which the closed forms ignore"
           if alt["bubble"] > 0 else
           "α and the dp all-reduce the planner does not overlap, which the closed forms ignore")
    return (f"N={check['N']}: disagrees — the pick {pick['name']} is communication-bound by the closed "
            f"forms while {alt['name']} (rank {alt['rank']}) clears them; the planner's model "
            f"charges {alt['name']} {alt['pred_s'] / pick['pred_s'] - 1:+.0%} more for {why}")


def show(preset: str, world_sizes, batch: int, accelerator: str = "A100") -> list[dict]:
    """Print the thresholds (A100 and H100, NVLink and InfiniBand) and, per world size, every plan
    the planner ranks against them (top `TOP` rows, then "… N more") with the verdict."""
    print(f"{preset}: closed-form thresholds (scaling-book, training chapter; b = 2 bytes, α ignored, "
          "perfect overlap; parlab.planner.thresholds)")
    print(format_table(th.threshold_table(preset)))
    checks = []
    for n in world_sizes:
        c = check_ranking(preset, n, batch, accelerator)
        dp_row, tp_row = c["dp_row"], c["tp_row"]
        print(f"\nN={n}, batch {batch} sequences, {accelerator}: dp over {dp_row['link']} needs ≥ "
              f"{dp_row['dp_min_tokens']:.0f} tokens per replica, tp over {tp_row['link']} ≤ "
              f"{tp_row['tp_max']:.1f} (the links extrapolate.predict charges)")
        print(f"  {'rank':>4} {'plan':<20} {'model s':>8} {'tok/replica':>11} {'DP':>4} {'TP':>4} "
              f"{'closed form':<14}")
        for r in c["rows"][:TOP]:
            print(f"  {r['rank']:>4} {r['name']:<20} {r['pred_s']:8.3f} {r['tokens']:11.0f} "
                  f"{'ok' if r['dp_ok'] else 'no':>4} {'ok' if r['tp_ok'] else 'no':>4} "
                  f"{'compute-bound' if r['compute_bound'] else 'comm-bound':<14}")
        if len(c["rows"]) > TOP:
            print(f"  … {len(c['rows']) - TOP} more")
        print(verdict(c))
        checks.append(c)
    return checks
