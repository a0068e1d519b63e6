"""Chapter 13's planner where plans pay: GPT-2 XL's shapes on 8 and 16 A100s (nodes of 8, NVLink 3
inside, HDR InfiniBand between), every valid dp·tp·pp plan priced by the real-hardware model
(`parlab.planner.scaling.extrapolate.predict`: Megatron's FLOPs ÷ the A100's sustained rate, ring
α-β, 1F1B's m + p − 1 slots; Narayanan et al., SC 2021), the pick beside one A100 at the same
global batch: its speedup, efficiency and verdict. On the tiny GPT no plan of several ranks beats
one rank (every operator costs its launch); `tiny_verdict` says so from the chapter's own runs.
"""

from __future__ import annotations


def choose(preset: str = "gpt2-xl", world_sizes=(8, 16), batch: int = 64, top: int = 3) -> list[dict]:
    """Print, per world size, the `top` plans by predicted step and the pick's speedup over one
    A100 (same preset and global batch); return one dict per world size."""
    from parlab.planner.scaling import real_scale

    one, _ = real_scale.enumerate_plans(preset, 1, batch)
    if not one:
        raise ValueError(f"preset={preset!r} with batch={batch} does not fit one A100: no baseline")
    base = one[0]["pred_s"]
    print(f"clock: paced A100 model (150 TFLOP/s sustained, NVLink 3 in a node of 8, HDR InfiniBand "
          f"between), {preset}, global batch {batch} sequences; one A100 ({one[0]['name']}): "
          f"{1e3 * base:.0f} A100 ms per step")
    out = []
    for n in world_sizes:
        plans, omitted = real_scale.enumerate_plans(preset, n, batch)
        pick, worst = plans[0], plans[-1]
        speedup = base / pick["pred_s"]
        print(f"N = {n}: {len(plans)} valid plans ({len(omitted)} left out, e.g. {omitted[0]})"
              if omitted else f"N = {n}: {len(plans)} valid plans")
        for i, p in enumerate(plans[:top]):
            print(f"  {i + 1}. {p['name']:<20} {1e3 * p['pred_s']:8.0f} ms  {p['pred_memory_GB']:5.1f} GB"
                  + ("   ← the pick" if i == 0 else ""))
        if len(plans) > top:
            print(f"  … {len(plans) - top} more, the slowest {worst['name']} at "
                  f"{1e3 * worst['pred_s']:.0f} ms")
        pays = speedup > 1
        print(f"  verdict: the pick {pick['name']} is {speedup:.2f}× one A100 (efficiency "
              f"{speedup / n:.0%} of {n}×) — {'it pays' if pays else 'it does NOT pay'}; the slowest "
              f"valid plan is {base / worst['pred_s']:.2f}×, so choosing is worth "
              f"{worst['pred_s'] / pick['pred_s']:.2f}×")
        out.append({"N": n, "pick": pick["name"], "speedup": speedup, "efficiency": speedup / n,
                    "n_plans": len(plans), "choice_gain": worst["pred_s"] / pick["pred_s"]})
    return out


def tiny_verdict(scale_rows: list[dict]) -> bool:
    """Whether any multi-rank point of the tiny GPT's strong-scaling sweep beat one rank (measured,
    paced); prints the best and the verdict. Rows: `points`' dicts with dim, n, mode, step_us (A100 µs)."""
    strong = [r for r in scale_rows if r.get("mode", "strong") == "strong"]
    one = [r for r in strong if r["n"] == 1]
    many = [r for r in strong if r["n"] > 1]
    if not one or not many:
        print("tiny GPT: no one-rank and multi-rank pair in this sweep")
        return False
    base = min(r["step_us"] for r in one) / 1e6
    best = min(many, key=lambda r: r["step_us"])
    beats = best["step_us"] / 1e6 < base
    print(f"tiny GPT, strong scaling: best multi-rank point {best['dim']} × {best['n']} at "
          f"{best['step_us'] / 1e3:.3f} ms against one rank's {1e3 * base:.3f} ms: "
          + ("a plan of several ranks beats one rank" if beats else
             "NO plan of several ranks beats one rank here — a launch-bound model gains nothing from "
             "splitting; the planner earns its keep at the real size above"))
    return beats
