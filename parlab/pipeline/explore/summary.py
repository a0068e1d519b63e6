"""Chapter 04's closing numbers, printed from the notebook's own runs: ZB's step time in each run
that measured it (why they differ: configuration and clock), the chapter's headlines with their
verdicts, and "When to use it (from this run)" — each threshold measured or derived in the chapter
(GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2021; interleaving, Megatron-LM SC 2021 §2.2;
Zero Bubble, Qi et al. ICLR 2024; eager 1F1B, Zhuang et al. MLSys 2023; DualPipe, DeepSeek-V3
report §3.2.1; LAMP, Zhu et al. MICCAI 2020).
"""

from __future__ import annotations

from parlab.pipeline import cost
from parlab.pipeline.explore.dualpipe import MODEL as DUALPIPE_MODEL


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _shape(mc) -> str:
    return f"C={mc.n_embd}, T={mc.block_size}, {mc.n_layer} layers"


def _step(result) -> tuple[str, float]:
    """(the step as printed, the step in its own unit) of a run: accelerator µs when paced."""
    t, clock = result.step_time(), result.clock
    if clock.paced:
        return f"{t * 1e6:.1f} µs on the {clock.name} (virtual time)", t * 1e6
    return f"{t * 1e3:.1f} ms ({clock.label})", t * 1e3


def _pipeline_width(result) -> int:
    """Pipeline stages of a run (ranks holding distinct stage lists)."""
    return len({tuple(out.extras["stages"]) for out in result.outputs})


def zb_steps(zb: dict, results: dict, dualpipe_rows: list) -> list[dict]:
    """ZB's step in each run that measured it, with the run's configuration and clock, and ZB's
    step over 1F1B's in the same run (the comparison a run supports; none on this CPU's raw clock,
    where the correctness runs check values); why the numbers differ."""
    from parlab.pipeline.explore import _resolved_microbatches

    rows = []
    r = zb["result"]
    rows.append({"where": "Timelines (section 6)", "config": f"p={r.config.world_size}, m="
                 f"{_resolved_microbatches(r)}, {_shape(r.config.model_config)}",
                 "clock": r.clock.label, "step": _step(r)[0], "vs_1f1b": None})
    d = {x["scheme"]: x for x in dualpipe_rows}
    x = d.get("pp-zb")
    if x is not None:
        rows.append({"where": "DualPipe table", "config": f"p={x['pp']}, m={x['m']}, C="
                     f"{DUALPIPE_MODEL['n_embd']}, T={DUALPIPE_MODEL['block_size']}, "
                     f"{DUALPIPE_MODEL['n_layer']} layers, NVLink", "clock": x["clock"],
                     "step": f"{x['step_us']:.1f} µs on the A100",
                     "vs_1f1b": x["step_us"] / d["pp-1f1b"]["step_us"]})
    z, one = results.get("pp-zb"), results.get("pp-1f1b")
    if z is not None:
        rows.append({"where": "correctness runs (section 5)", "config": f"p="
                     f"{z.config.world_size}, m={_resolved_microbatches(z)}, "
                     f"{_shape(z.config.model_config)}", "clock": z.clock.label,
                     "step": _step(z)[0],
                     "vs_1f1b": z.step_time() / one.step_time() if one and z.clock.paced
                     else None, "raw": not z.clock.paced})
    for x in rows:
        ratio = ("n/a (this CPU's clock: those runs check values, not time)" if x.get("raw")
                 else "n/a (no 1F1B in that run)" if x["vs_1f1b"] is None
                 else f"{x['vs_1f1b']:.2f}×")
        print(f"{x['where']:32} {x['config']:48} step {x['step']:44} ZB / 1F1B {ratio}")
    configs, clocks = len({x["config"] for x in rows}), len({x["clock"] for x in rows})
    print(f"one schedule, {len(rows)} numbers: {configs} configurations (model width, p, m, link) "
          f"on {clocks} clock{'s' if clocks > 1 else ''} "
          f"({', '.join(sorted({x['clock'] for x in rows}))}) — a step time "
          "belongs to its run; compare ZB with 1F1B inside one run (last column), never across")
    return rows


def summary(world_size: int, curve: list, memory: dict, results: dict, zb: dict, part: dict,
            narrow: list, dualpipe_rows: list, unet_memory: list, lamp_rows: list) -> None:
    """The chapter's headlines from this run, and when to use each schedule (thresholds from the
    run or the chapter's closed forms)."""
    agree = [abs(measured - theory) <= 0.05 for _, _, measured, _, theory in curve]
    last = max(curve, key=lambda row: row[1]) if curve else None
    print(f"- measured 1F1B bubble (paced) vs (p−1)/(m+p−1): {sum(agree)} of {len(curve)} points "
          f"within 5 points" + (f"; at m={last[1]} {last[2]:.1%} vs {last[4]:.1%}" if last else ""))
    gp, f1 = memory.get("pp-gpipe"), memory.get("pp-1f1b")
    act = max(f1) / max(gp) if gp and f1 else None
    print(f"- 1F1B's largest stage held {'n/a' if act is None else f'{act:.2f}×'} GPipe's "
          "activations at the same bubble")
    from parlab.pipeline.explore import _resolved_microbatches

    times = cost.stage_compute(zb["result"].timeline)
    m_zb = _resolved_microbatches(zb["result"])
    b = sum(t["B"] for t in times.values())
    w = sum(t.get("W", 0.0) for t in times.values())
    print(f"- ZB: W was {w / (b + w):.0%} of the backward here; the bubble it can move is bounded "
          f"by that share (measured {zb['measured']:.1%} vs 1F1B's closed form "
          f"{cost.theory_bubble('1f1b', world_size, m_zb):.1%} at m={m_zb})")
    gain = part["even"]["step_s"] / part["balanced"]["step_s"]
    if part.get("same"):
        raw = part.get("head_blocks_raw")
        print(f"- the balanced split is the even split on {part['profiled_on']}: the heavy-vocabulary "
              f"head costs {part['head_blocks']:.2f} blocks there"
              + ("" if raw is None else f" ({raw:.1f} on this CPU, raw)"))
    else:
        print(f"- the balanced split ran {gain:.2f}× the even split's throughput on the heavy-head "
              "model")
    print()
    print("\n".join(when_to_use_lines(when_to_use_numbers(
        world_size, curve, act, results, zb, times, part, narrow, dualpipe_rows, unet_memory,
        lamp_rows))))


def when_to_use_numbers(world_size: int, curve: list, act, results: dict, zb: dict, times: dict,
                        part: dict, narrow: list, dualpipe_rows: list, unet_memory: list,
                        lamp_rows: list) -> dict:
    """The numbers `when_to_use_lines` reads, each taken from this run's results (or, where a run
    could not compare like with like, the chapter's closed form at this run's p and m)."""
    from parlab.pipeline.explore import _resolved_microbatches

    agree = [abs(measured - theory) <= 0.05 for _, _, measured, _, theory in curve]
    last = max(curve, key=lambda row: row[1]) if curve else None
    b = sum(t["B"] for t in times.values())
    w = sum(t.get("W", 0.0) for t in times.values())
    out = {"p": world_size, "agree": sum(agree), "points": len(curve),
           "last_m": last[1] if last else None, "last_bubble": last[2] if last else None,
           "act": act, "message_ms": zb["latency"] * 1e3, "overhead_ms": zb["overhead"] * 1e3,
           "forward_ms": min(t["F"] for t in times.values()) * 1e3, "w_share": w / (b + w),
           "gain": part["even"]["step_s"] / part["balanced"]["step_s"],
           "even_spread": max(part["even"]["stage_s"]) / min(part["even"]["stage_s"]),
           "slowest_ratio": max(part["balanced"]["stage_s"]) / max(part["even"]["stage_s"]),
           "same_split": part.get("same", False), "head_blocks": part.get("head_blocks"),
           "head_blocks_raw": part.get("head_blocks_raw"), "profiled_on": part.get("profiled_on"),
           "narrow": [(r["method"], r["ratio"], bool(r.get("hidden"))) for r in narrow]}
    inter, plain = results.get("pp-interleaved"), results.get("pp-1f1b")
    if inter is not None and plain is not None:
        pps = [_pipeline_width(r) for r in (inter, plain)]
        if pps[0] == pps[1]:
            ledger = [sum(r.bytes_per_rank(op="send", phase="pp-fwd"))
                      + sum(r.bytes_per_rank(op="send", phase="pp-bwd")) for r in (inter, plain)]
            out["inter_bytes"], out["inter_how"] = ledger[0] / ledger[1], "in this run's ledger"
        else:  # interleaving needs 2·p ≤ layers, so it may run at a smaller p than 1F1B did
            p, m = pps[1], _resolved_microbatches(plain)
            out["inter_bytes"] = (sum(cost.p2p_messages_per_step(p, 2, m, r) for r in range(p))
                                  / sum(cost.p2p_messages_per_step(p, 1, m, r) for r in range(p)))
            out["inter_how"] = f"in closed form at p={p} (the interleaved run used p={pps[0]})"
    d = {x["scheme"]: x for x in dualpipe_rows}
    if d:  # the DualPipe table ran
        out["dual_bubble"] = d["pp-dualpipe"]["bubble"] / d["pp-1f1b"]["bubble"]
        out["dual_step"] = d["pp-dualpipe"]["step_us"] / d["pp-1f1b"]["step_us"]
    by = {(r["side"], r["pp"]): r["activations"] for r in unet_memory}
    sides, pps = sorted({r["side"] for r in unet_memory}), sorted({r["pp"] for r in unet_memory})
    if len(pps) > 1:
        out["unet_pp"], out["unet_cut"] = pps[-1], by[(sides[-1], pps[0])] / by[(sides[-1], pps[-1])]
        out["unet_grow"] = (by[(sides[-1], pps[0])] / by[(sides[0], pps[0])] if len(sides) > 1
                            else None)
        top = [max(s["total"] for s in row["measured"]) for row in lamp_rows[:2]]
        out["lamp"] = top[1] / top[0] if len(top) == 2 else None
    return out


def _than(ratio: float, below: str, above: str) -> str:
    """`below` when a ratio is under 1, else `above`: the direction of a measured comparison."""
    return below if ratio < 1 else above


def when_to_use_lines(n: dict) -> list[str]:
    """Chapter 04's "When to use it (from this run)": four lines, each threshold or comparison
    from `when_to_use_numbers` (this run), its direction computed from the numbers."""
    from parlab.pipeline.explore.eager import FASTER

    lines = ["When to use it (from this run):"]
    cost_ms = n["message_ms"] + n["overhead_ms"]
    # zero on a paced clock over the loopback: a message is instant there and the host's
    # bookkeeping between actions is not paced time (parlab.core.clock)
    margin = (f"{n['forward_ms'] / cost_ms:.0f}×, paced" if cost_ms > 0 else
              "both free on the paced clock over the loopback")
    base = (f"- a pipeline (GPipe / 1F1B) when a stage's forward per micro-batch dwarfs a boundary "
            f"message and the per-action overhead: the wide model's {n['forward_ms']:.1f} A100 ms "
            f"forward against a {n['message_ms']:.2f} ms message + {n['overhead_ms']:.2f} ms per "
            f"action ({margin}; the Links section prints what NVLink and 1GbE add), and the "
            f"measured 1F1B bubble was within 5 points of (p−1)/(m+p−1) at {n['agree']} of "
            f"{n['points']} points")
    if n["last_m"] is not None:
        half = n["last_bubble"] / 2
        base += (f"; then raise m: halving this run's {n['last_bubble']:.1%} at p={n['p']}, "
                 f"m={n['last_m']} takes m ≥ {cost.smallest_microbatches(n['p'], half)}")
    if n["act"] is not None:
        base += (f"; 1F1B over GPipe whenever m > p: same bubble, {n['act']:.2f}× GPipe's peak "
                 f"activations here ({_than(n['act'], 'less', 'not less')})")
    lines.append(base)
    beyond = [f"ZB-H1 when W is a large share of the backward (here {n['w_share']:.0%}) and m ≥ p, "
              "at 1F1B's peak activations"]
    if "inter_bytes" in n:
        beyond.append(f"interleaving (v = 2) when the link is fast beside a chunk's compute: "
                      f"(p−1)/(v·m+p−1) for {n['inter_bytes']:.1f}× 1F1B's pipeline bytes "
                      f"{n['inter_how']}")
    if "dual_bubble" in n:
        beyond.append(f"DualPipe at p ≥ 4 when 2× parameters fit and a data-parallel all-reduce "
                      f"absorbs its mirror sync: bubble {n['dual_bubble']:.2f}× 1F1B's "
                      f"({_than(n['dual_bubble'], 'smaller', 'not smaller')}), step "
                      f"{n['dual_step']:.2f}× ({_than(n['dual_step'], 'shorter', 'not shorter')}) "
                      "here without one")
    lines.append("- past 1F1B's bubble: " + "; ".join(beyond))
    if n.get("same_split"):
        split = (f"- a balanced partition whenever layers are uneven on the machine you train on: "
                 f"here the profile on {n['profiled_on']} put the large-vocabulary head at "
                 f"{n['head_blocks']:.2f} blocks"
                 + ("" if n.get("head_blocks_raw") is None else
                    f" (on this CPU, raw: {n['head_blocks_raw']:.1f})") + ", so "
                 f"the even split was already the balanced one (its stages ran "
                 f"{n['even_spread']:.2f}× apart) — profile on the clock you train on")
    else:
        split = (f"- a balanced partition whenever layers are uneven: the even split's stages ran "
                 f"{n['even_spread']:.1f}× apart on the heavy-head model, and the balanced split "
                 f"ran {n['gain']:.2f}× its throughput ("
                 + ("faster" if n["gain"] >= 1 + FASTER else
                    "not faster" if n["gain"] < 1 else
                    f"within the chapter's {FASTER:.0%} bar: no gain"))
        split += (")" if n["gain"] >= 1 + FASTER else
                  f": its slowest stage took {n['slowest_ratio']:.2f}× the even split's slowest — "
                  "the profile priced the layers unlike the run; profile on the clock you train on)")
    if "unet_cut" in n:
        grow = "n/a" if n["unet_grow"] is None else f"{n['unet_grow']:.1f}×"
        split += (f"; pipeline a 3-D U-Net when its activations overflow: pp={n['unet_pp']} cut the "
                  f"largest stage {n['unet_cut']:.2f}× while doubling the side cost {grow}")
        if n.get("lamp") is not None:
            split += (f", and LAMP's memory split took it to {n['lamp']:.2f}× the even split's "
                      f"({_than(n['lamp'], 'smaller', 'not smaller')})")
    lines.append(split)
    faster = [method for method, _, hidden in n["narrow"] if hidden]
    lines.append(
        "- eager 1F1B when a boundary message is a sizeable share of a forward and rank r has room "
        "for p−r−1 more micro-batches: here its pipeline span (the eager cell's paced run) was "
        + ", ".join(f"{abs(1 - ratio):.1%} {_than(ratio, 'shorter', 'longer')} ({method})"
                    for method, ratio, _ in n["narrow"])
        + f" — {'worth it' if faster else 'not worth it'} by the chapter's {FASTER:.0%} bar"
        + ("" if faster else " (the eager cell's diagnosis says why)"))
    return lines
