"""Chapter 04's closing numbers, printed from the notebook's own runs: ZB's step time in each run
that measured it (why they differ: configuration and clock), the chapter's headlines with their
verdicts, and "When to use it (from this run)" — each threshold measured or derived in the chapter
(GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2021; interleaving, Megatron-LM SC 2021 §2.2;
Zero Bubble, Qi et al. ICLR 2024; eager 1F1B, Zhuang et al. MLSys 2023; DualPipe, DeepSeek-V3
report §3.2.1; LAMP, Zhu et al. MICCAI 2020).
"""

from __future__ import annotations

from parlab.pipeline import cost
from parlab.pipeline.explore_dualpipe import MODEL as DUALPIPE_MODEL


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _shape(mc) -> str:
    return f"C={mc.n_embd}, T={mc.block_size}, {mc.n_layer} layers"


def _step(result) -> tuple[str, float]:
    """(the step as printed, the step in its own unit) of a run: accelerator µs when paced."""
    t, clock = result.step_time(), result.clock
    if clock.paced:
        us = clock.accelerator_seconds(t) * 1e6
        return f"{us:.1f} µs on the {clock.name} ({t * 1e3:.0f} ms paced, ×{clock.dilation:,.0f})", us
    return f"{t * 1e3:.1f} ms ({clock.label})", t * 1e3


def _pipeline_width(result) -> int:
    """Pipeline stages of a run (ranks holding distinct stage lists)."""
    return len({tuple(out.extras["stages"]) for out in result.outputs})


def zb_steps(zb: dict, results: dict, dualpipe_rows: list) -> list[dict]:
    """ZB's step in each run that measured it, with the run's configuration and clock, and ZB's
    step over 1F1B's in the same run (the comparison a run supports); why the numbers differ."""
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
        rows.append({"where": "correctness runs (section 5, 7)", "config": f"p="
                     f"{z.config.world_size}, m={_resolved_microbatches(z)}, "
                     f"{_shape(z.config.model_config)}", "clock": z.clock.label,
                     "step": _step(z)[0],
                     "vs_1f1b": z.step_time() / one.step_time() if one else None})
    for x in rows:
        ratio = "n/a (no 1F1B in that run)" if x["vs_1f1b"] is None else f"{x['vs_1f1b']:.2f}×"
        print(f"{x['where']:32} {x['config']:48} step {x['step']:44} ZB / 1F1B {ratio}")
    configs, clocks = len({x["config"] for x in rows}), len({x["clock"] for x in rows})
    print(f"one schedule, {len(rows)} numbers: {configs} configurations (model width, p, m, link) "
          f"on {clocks} clocks ({', '.join(sorted({x['clock'] for x in rows}))}) — a step time "
          "belongs to its run; compare ZB with 1F1B inside one run (last column), never across")
    return rows


def summary(world_size: int, curve: list, memory: dict, results: dict, zb: dict, part: dict,
            narrow: list, dualpipe_rows: list, unet_memory: list, lamp_rows: list) -> None:
    """The chapter's headlines from this run, and when to use each schedule (thresholds from the
    run or the chapter's closed forms)."""
    from parlab.pipeline.explore_eager import FASTER

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
    print(f"- the balanced split ran {gain:.2f}× the even split's throughput on the heavy-head model")
    d = {x["scheme"]: x for x in dualpipe_rows}
    dp_ratio = d["pp-dualpipe"]["bubble"] / d["pp-1f1b"]["bubble"] if d else None
    dp_step = d["pp-dualpipe"]["step_us"] / d["pp-1f1b"]["step_us"] if d else None
    print("\nWhen to use it (from this run):")
    ledger = {s: sum(r.bytes_per_rank(op="send", phase="pp-fwd"))
              + sum(r.bytes_per_rank(op="send", phase="pp-bwd")) for s, r in results.items()}
    print(f"- pipeline at all when one stage's forward per micro-batch dwarfs a message and the "
          f"per-action overhead: the wide model's measured {zb['latency'] * 1e3:.2f} ms message and "
          f"{zb['overhead'] * 1e3:.2f} ms per action beside its "
          f"{min(t['F'] for t in times.values()) * 1e3:.1f} ms forwards (paced) let the bubbles "
          "follow theory; section 7 prints what the tiny default model paid instead")
    if last:
        half = last[2] / 2
        print(f"- GPipe / 1F1B: raise m until (p−1)/(m+p−1) is what you accept: halving this run's "
              f"measured {last[2]:.1%} at p={world_size}, m={last[1]} takes m ≥ "
              f"{cost.smallest_microbatches(world_size, half)}; prefer 1F1B whenever m > p: same "
              f"bubble, {'n/a' if act is None else f'{act:.2f}×'} GPipe's activations here")
    inter, plain = results.get("pp-interleaved"), results.get("pp-1f1b")
    if inter is not None and plain is not None:
        pps = [_pipeline_width(r) for r in (inter, plain)]
        if pps[0] == pps[1]:
            ratio, how = ledger["pp-interleaved"] / ledger["pp-1f1b"], "in this run's ledger"
        else:  # interleaving needs 2·p ≤ layers, so it may run at a smaller p than 1F1B did
            p, m = pps[1], _resolved_microbatches(plain)
            ratio = (sum(cost.p2p_messages_per_step(p, 2, m, r) for r in range(p))
                     / sum(cost.p2p_messages_per_step(p, 1, m, r) for r in range(p)))
            how = f"in closed form at p={p} (the interleaved run used p={pps[0]})"
        print(f"- interleaved (v = 2 chunks): bubble (p−1)/(v·m+p−1) for {ratio:.1f}× 1F1B's "
              f"pipeline bytes {how} — when the link is fast beside a chunk's compute")
    print(f"- ZB-H1 when W is a large share of the backward (here {w / (b + w):.0%}) and m ≥ p; it "
          "holds 1F1B's peak activations")
    print(f"- a balanced partition whenever layers are uneven: {gain:.2f}× here on a head worth "
          "many blocks (section 6 prints the profile)")
    faster = [r["method"] for r in narrow if r.get("hidden")]
    print("- eager 1F1B when a boundary message is a sizeable share of a forward and rank r has "
          "room for p−r−1 more micro-batches: here its step was "
          + ", ".join(f"{abs(1 - r['ratio']):.1%} {'shorter' if r['ratio'] < 1 else 'longer'} "
                      f"({r['method']})" for r in narrow)
          + f" — {'worth it' if faster else 'not worth it'} by the chapter's {FASTER:.0%} bar")
    if dp_ratio is not None:
        print(f"- DualPipe at p ≥ 4 when 2× parameters fit and a data-parallel all-reduce can absorb "
              f"the mirror sync: bubble {dp_ratio:.2f}× 1F1B's, but step {dp_step:.2f}× here "
              "without one")
    by = {(r["side"], r["pp"]): r["activations"] for r in unet_memory}
    sides, pps = sorted({r["side"] for r in unet_memory}), sorted({r["pp"] for r in unet_memory})
    if len(pps) > 1:
        s1 = sides[-1]
        cut = by[(s1, pps[0])] / by[(s1, pps[-1])]
        grow = by[(s1, pps[0])] / by[(sides[0], pps[0])] if len(sides) > 1 else None
        top = [max(s["total"] for s in row["measured"]) for row in lamp_rows[:2]]
        print(f"- pipeline a 3-D U-Net when activations overflow: pp={pps[-1]} cut the largest "
              f"stage {cut:.2f}× while doubling the side cost {'n/a' if grow is None else f'{grow:.1f}×'}"
              + (f"; LAMP's memory split took the largest stage to {top[1] / top[0]:.2f}× the "
                 "even one's" if len(top) == 2 else ""))
