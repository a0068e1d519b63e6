"""What notebooks/04_pipeline.ipynb runs: schedules drawn, runs checked against the reference,
ledger bytes beside their closed forms, measured timelines beside ideal ones, bubble curves,
activation memory, balanced partitions, ours beside torch.distributed.pipelining, emulated links,
and the widget. Papers: GPipe (Huang et al. 2019), PipeDream / 1F1B (Narayanan et al. 2019, 2021),
Megatron-LM interleaving (Narayanan et al. 2021), Zero Bubble (Qi et al. 2024), LAMP (Zhu et al.
2020), layer-wise partitioning ("Layer-wise partitioning and merging for efficient and scalable deep
learning").
"""

from __future__ import annotations

import statistics

import parlab
from parlab.core import cost as comm_cost
from parlab.core.progress import progress
from parlab.pipeline import cost
from parlab.pipeline.draw import gantt, ideal_and_measured
from parlab.pipeline.schedules import make_schedule

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved", "zb")
# A model where stage compute dominates a loopback message: 64 tokens × 128 channels.
COMPUTE_HEAVY = {"n_layer": 4, "n_embd": 128, "n_head": 4, "block_size": 64}


def show_schedules(pp: int, microbatches: int, chunks: int = 2) -> None:
    """Each schedule's ideal Gantt chart at the same total work: one stage's forward of the whole
    batch is 1 unit, so a micro-batch's forward lasts 1/m (1/(v·m) per chunk), its backward twice
    that (B = W = half of it when split). Naive runs the batch as one piece (m = 1)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(SCHEDULES), 1, figsize=(12, 1.0 + 0.5 * pp * len(SCHEDULES)),
                             sharex=True)
    spans = {}
    for ax, name in zip(axes, SCHEDULES):
        m = microbatches if name != "interleaved" else max(pp, microbatches - microbatches % pp)
        v = chunks if name == "interleaved" else 1
        schedule = make_schedule(name, pp, m, v)
        events = cost.ideal_timeline(schedule, forward=1.0 / (v * schedule.microbatches))
        spans[name] = max(e["t1"] for e in events)
        gantt(events, ax, f"{name} (p={pp}, m={schedule.microbatches}, v={v}): step "
              f"{spans[name]:.2f} units, bubble {cost.bubble_of(events):.1%} (closed form "
              f"{cost.theory_bubble(name, pp, schedule.microbatches, v):.1%})", unit=1.0,
              xlabel="time (units of one stage's forward of the whole batch)")
        if ax is not axes[-1]:
            ax.set_xlabel("")  # one shared time axis, labelled once at the bottom
    best = min(spans, key=spans.get)
    fig.suptitle(f"same work in every panel: {best} finishes first, in "
                 f"{spans[best] / spans['naive']:.0%} of naive's step", fontsize="medium")
    fig.tight_layout()
    print("step in units of one stage's forward of the whole batch: "
          + ", ".join(f"{k} {t:.2f}" for k, t in spans.items())
          + " — each panel computes 3 units per stage; the rest of its step is bubble")


def bubble_table(pp: int, microbatches: list[int], chunks: int = 2) -> None:
    """Simulated bubble vs closed form for every schedule and micro-batch count. ZB-H1's closed
    form (p−1)/(3m+p−1) assumes m ≥ p (enough W's to fill the warm-up); below that it is marked
    invalid instead of printed as a prediction."""
    print(f"{'schedule':12} " + " ".join(f"m={m:<13}" for m in microbatches))
    invalid = False
    for name in SCHEDULES[1:]:
        row = []
        for m in microbatches:
            if name == "interleaved" and m % pp:
                row.append(f"{'-':15}")
                continue
            v = chunks if name == "interleaved" else 1
            sim = cost.ideal_bubble(make_schedule(name, pp, m, v), forward=1.0 / v)
            if name == "zb" and m < pp:
                invalid = True
                row.append(f"{sim:5.1%} (n/a*)  ")
                continue
            row.append(f"{sim:5.1%} ({cost.theory_bubble(name, pp, m, v):5.1%})")
        print(f"{name:12} " + " ".join(row))
    print("simulated (closed form); interleaved: v = 2 chunks per rank, m a multiple of p")
    top = max(microbatches)
    megatron = [f"m={m} {cost.bubble_overhead(pp, m):.1%}" for m in microbatches]
    gap = cost.bubble_overhead(pp, top) - cost.theory_bubble("1f1b", pp, top)
    print("GPipe / 1F1B as Megatron-LM (§2.2.1) and the Ultra-Scale Playbook write the bubble, "
          f"idle over ideal compute, (p−1)/m: {', '.join(megatron)} — the same idle time over a "
          f"different denominator: x = (p−1)/m is the step fraction x/(1+x) = (p−1)/(m+p−1); "
          f"they differ by {gap * 100:.1f} points at m={top} and agree only when m ≫ p")
    if invalid:
        print(f"* m < p = {pp}: ZB-H1's (p−1)/(3m+p−1) is not valid — with fewer micro-batches than "
              "stages there are too few W's to fill the warm-up bubble; the simulation is the answer")


def check_all(world_size: int, steps: int = 2, clock: str | None = None) -> dict:
    """Every pipeline scheme at its defaults vs the single process: `match: True`. Ours run on
    `clock` (values do not depend on it); torch-pp's sends are PyTorch's own, outside any clock."""
    ref = parlab.run("single", steps=steps)
    results = {}
    for scheme in ["pp-naive", "pp-gpipe", "pp-1f1b", "pp-interleaved", "pp-zb", "torch-pp"]:
        paced = {} if scheme.startswith("torch-") or clock is None else {"clock": clock}
        r = parlab.run(scheme, world_size=world_size, steps=steps, **paced)
        results[scheme] = r
        o = r.config.options
        print(f"{scheme:15} pp={o.get('pp') or world_size}: {r.compare(ref)}".split("  (")[0])
    return results


def ledger_report(result) -> None:
    """Bytes each rank sent, by phase, beside the closed forms of parlab.pipeline.cost."""
    cfg = result.config
    mc, steps = cfg.model_config, cfg.steps
    stage_counts = [len(out.extras["stages"]) for out in result.outputs]
    v = stage_counts[0]
    pp = len({tuple(out.extras["stages"]) for out in result.outputs})
    dp = cfg.world_size // pp
    m = _resolved_microbatches(result)
    rows = cfg.batch_size // (dp * m)
    numel = rows * mc.block_size * mc.n_embd
    wte = mc.vocab_size * mc.n_embd
    print(f"{cfg.scheme}: pp={pp}, dp={dp}, v={v}, m={m}, boundary activation {rows}×"
          f"{mc.block_size}×{mc.n_embd} fp32 = {numel * 4:,} B, {steps} steps")
    for rank in range(cfg.world_size):
        pp_rank = rank % pp
        p2p = sum(result.bytes_per_rank(op="send", phase=ph)[rank] for ph in ("pp-fwd", "pp-bwd"))
        formula = steps * cost.p2p_bytes_per_step(pp, v, m, pp_rank, numel)
        tie = result.bytes_per_rank(phase="embed-tie")[rank]
        tie_formula = steps * comm_cost.ring_all_reduce(wte, 2, 0)[0] * 4 if (
            pp > 1 and pp_rank in (0, pp - 1)) else 0
        print(f"  rank {rank}: p2p {p2p:>10,} B (closed form {formula:>10,})   embed-tie "
              f"{tie:>8,} B (closed form {tie_formula:>8,})")


def _resolved_microbatches(result) -> int:
    from parlab.pipeline.schemes import resolve
    name = result.config.scheme
    schedule = result.config.options["schedule"] if "schedule" in result.config.options else \
        name.removeprefix("pp-")  # pp and torch-pp take it as an option, pp-* carry it in the name
    return resolve(result.config, schedule).microbatches


def measured_vs_ideal(scheme: str, world_size: int, microbatches: int | None, steps: int = 3,
                      model_config=None, draw: bool = True, clock: str = "A100", **options):
    """Run on `clock` (virtual A100 time by default, `parlab.core.clock`: every F / B / W span lasts
    the time its operators and FLOPs take on the A100; "wall": this CPU, raw); compare the
    measured bubble with the closed form and with the ideal timeline simulated from the measured
    per-stage F / B / W times; draw ideal over measured (last step)."""
    model_config = model_config or COMPUTE_HEAVY
    if microbatches is not None:
        options["microbatches"] = microbatches
    r = parlab.run(scheme, world_size=world_size, steps=steps, model_config=model_config,
                   clock=clock, **options)
    from parlab.pipeline.schemes import resolve
    name = r.config.options.get("schedule") if scheme == "pp" else scheme.removeprefix("pp-")
    plan = resolve(r.config, name)
    schedule = make_schedule(name, plan.pp, plan.microbatches, plan.chunks)
    latency = cost.measured_message_latency(r.ledger)
    ideal = cost.ideal_from_measured(schedule, r.timeline)
    with_latency = cost.bubble_of(cost.ideal_from_measured(schedule, r.timeline, latency))
    overhead = cost.measured_action_overhead(r.timeline)
    with_overhead = cost.bubble_with_overhead(schedule, r.timeline, latency, overhead)
    last = cost.pipeline_events(r.timeline, step=steps - 1)
    measured, predicted = cost.measured_bubble(r.timeline), cost.bubble_of(ideal)
    least = cost.measured_bubble(r.timeline, stat="min")
    theory = cost.theory_bubble(name, plan.pp, plan.microbatches, plan.chunks)
    print(f"{scheme} p={plan.pp} m={plan.microbatches} v={plan.chunks}: bubble measured "
          f"{measured:.1%} (least-disturbed step {least:.1%}); closed form {theory:.1%}; ideal at "
          f"the measured stage times {predicted:.1%}, and with the measured message latency "
          f"{latency * 1e3:.3g} {r.clock.unit} {with_latency:.1%}, and with the measured "
          f"{overhead * 1e3:.3g} {r.clock.unit} per action outside compute and waits (sends, receives, "
          f"bookkeeping) {with_overhead:.1%}; {step_label(r)}")
    if schedule.split_backward:
        explain_zero_bubble(r, plan, measured)
    if draw:
        ideal_and_measured(ideal, last, f"{scheme}, p={plan.pp}, m={plan.microbatches}")
    return {"measured": measured, "least": least, "ideal": predicted, "theory": theory,
            "latency": latency, "ideal_with_latency": with_latency, "overhead": overhead,
            "ideal_with_overhead": with_overhead, "result": r}


def step_label(result) -> str:
    """A run's median step on its clock: the accelerator's own µs in virtual time, this CPU's ms
    on the wall clock."""
    t = result.step_time()
    if not result.clock.paced:
        return f"step {t * 1e3:.1f} ms ({result.clock.label})"
    return f"step {t * 1e6:.1f} µs on the {result.clock.name} ({result.clock.label}, virtual)"


def explain_zero_bubble(result, plan, measured: float) -> None:
    """Why ZB gains less here than its closed form promises, from the run itself: the closed form
    assumes F = B = W; the measured B and W are what they are, and 1F1B simulated at the same
    measured times (B + W as one backward) is the fair baseline."""
    times = cost.stage_compute(result.timeline)
    f = statistics.mean(t["F"] for t in times.values())
    b = statistics.mean(t["B"] for t in times.values())
    w = statistics.mean(t.get("W", 0.0) for t in times.values())
    zb = cost.bubble_of(cost.ideal_from_measured(make_schedule("zb", plan.pp, plan.microbatches),
                                                 result.timeline))
    one = make_schedule("1f1b", plan.pp, plan.microbatches)
    f1b = cost.ideal_bubble(one, forward=[times[s]["F"] for s in range(plan.pp)],
                            backward=[times[s]["B"] + times[s].get("W", 0.0) for s in range(plan.pp)])
    unit = result.clock.unit
    print(f"  measured per micro-batch: F {f * 1e3:.3g} {unit}, B {b * 1e3:.3g} {unit}, W "
          f"{w * 1e3:.3g} {unit} "
          f"(the closed form assumes F = B = W). At these times the ideal bubble is ZB {zb:.1%} vs "
          f"1F1B {f1b:.1%}: W is what ZB moves into the bubble, so the gain is bounded by W's "
          f"share of the backward ({w / (b + w):.0%}). "
          + (f"The measured {measured:.1%} is that ideal within {abs(measured - zb) * 100:.1f} "
             "points: in virtual time nothing between the actions costs time (no per-action "
             "overhead, no interference)" if result.clock.paced else
             f"The rest of the measured {measured:.1%} is per-action overhead and interference: ZB "
             "runs 3 actions per micro-batch where 1F1B runs 2."))


def bubble_curve(world_size: int, microbatches: list[int], schedules=("1f1b",), steps: int = 3,
                 model_config=None, clock: str = "A100"):
    """Measured bubble vs micro-batches beside the closed form, on `clock` (paced A100 time by
    default); returns the rows."""
    import matplotlib.pyplot as plt

    rows = []
    _, ax = plt.subplots(figsize=(6, 3.5))
    for name in progress(schedules, desc="bubble curve, schedules"):
        ms = [m for m in microbatches if name != "interleaved" or m % world_size == 0]
        got = [measured_vs_ideal(f"pp-{name}", world_size, m, steps, model_config, draw=False,
                                 clock=clock) for m in ms]
        v = 2 if name == "interleaved" else 1
        dense = list(range(1, max(ms) + 1))
        line = ax.plot(dense, [cost.theory_bubble(name, world_size, m, v) for m in dense], "--",
                       label=f"{name} closed form")[0]
        ax.plot(ms, [g["measured"] for g in got], "o", color=line.get_color(),
                label=f"{name} measured")
        ax.plot(ms, [g["least"] for g in got], "x", color=line.get_color(),
                label=f"{name} least-disturbed step")
        rows += [(name, m, g["measured"], g["least"], g["theory"]) for m, g in zip(ms, got)]
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("bubble (share of the step)")
    gap = max(abs(measured - theory) for *_, measured, _, theory in rows)
    first, last = min(rows, key=lambda r: r[1]), max(rows, key=lambda r: r[1])
    ax.set_title(f"p={world_size}: measured bubble {first[2]:.0%} at m={first[1]} → {last[2]:.0%} "
                 f"at m={last[1]}, at most {gap * 100:.1f} points off the closed form",
                 fontsize="medium")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.figure.tight_layout()
    return rows


def step_anatomy(result) -> dict:
    """Where the last measured step went, on the rank that computed most: F/B/W compute, the
    optimizer, time blocked in a receive or a collective (timeline waits in the step's window), and
    the rest of the step (op launches, Python, waiting for a core); the messages that rank sent
    and their measured median delivery time (ledger)."""
    last = result.config.steps - 1
    per_rank = []
    for rank in range(result.config.world_size):
        mine = [e for e in result.timeline if e["rank"] == rank]
        spans = [e for e in mine if e["kind"] == "compute" and e["args"].get("step") == last]
        if not spans:
            continue
        t0, t1 = min(e["t0"] for e in spans), max(e["t1"] for e in spans)
        ops = [e for e in spans if e["name"] in ("F", "B", "W")]
        per_rank.append({
            "rank": rank, "compute": sum(e["t1"] - e["t0"] for e in ops), "ops": len(ops),
            "optimizer": sum(e["t1"] - e["t0"] for e in spans if e["name"] == "optimizer"),
            "blocked": sum(min(e["t1"], t1) - max(e["t0"], t0) for e in mine
                           if e["kind"] == "wait" and e["t1"] > t0 and e["t0"] < t1)})
    if not per_rank:  # torch-pp: no F/B/W spans of ours
        per_rank = [{"rank": 0, "compute": 0.0, "ops": 0, "optimizer": 0.0, "blocked": 0.0}]
    top = max(per_rank, key=lambda x: x["compute"])
    step_s = result.step_time()
    sends = sum(1 for r in result.ledger if r["rank"] == top["rank"] and r["op"] == "send"
                and r["step"] == last)
    return {"step_ms": 1e3 * step_s, "compute_ms": 1e3 * top["compute"], "ops": top["ops"],
            "optimizer_ms": 1e3 * top["optimizer"], "blocked_ms": 1e3 * top["blocked"],
            "sends": sends, "latency_ms": 1e3 * cost.measured_message_latency(result.ledger),
            "other_ms": 1e3 * max(0.0, step_s - top["compute"] - top["optimizer"] - top["blocked"])}


def explain_curve(rows: list, tolerance: float = 0.05) -> None:
    """Each measured bubble of `bubble_curve` against its closed form, with the verdict: within
    `tolerance` (absolute) or not, and where not, the measured share outside compute and waits."""
    for name, m, measured, least, theory in rows:
        gap = measured - theory
        ok = abs(gap) <= tolerance
        print(f"{name} m={m}: measured {measured:.1%} (least-disturbed step {least:.1%}), closed "
              f"form {theory:.1%}: {gap * 100:+.1f} points — "
              + ("agrees" if ok else "does NOT agree")
              + f" (±{tolerance * 100:.0f} points)"
              + ("" if ok else ": the closed form counts compute only; the run also pays its "
                 "messages and the per-action work between spans (the ideal lines above price them)"))


def compare_step_times(results: dict) -> None:
    """Measured whole-step time of each run of `check_all` (ours and torch-pp side by side), and
    the diagnosis from the same runs when the ordering is not the bubble's."""
    import os

    base = results["torch-pp"].step_time()
    print(f"clock: {results['torch-pp'].clock.label} — these are the correctness runs of "
          "check_all, kept raw: what they show is this CPU's per-op and per-message cost")
    rows = {}
    for scheme, r in results.items():
        t = r.step_time()
        a = rows[scheme] = step_anatomy(r)
        print(f"{scheme:15} {t * 1e3:7.1f} ms/step  ({t / base:.2f}× torch-pp's time)" + (
              f": F/B/W {a['compute_ms']:5.1f} ms in {a['ops']:2d} ops, optimizer "
              f"{a['optimizer_ms']:4.1f}, blocked {a['blocked_ms']:5.1f}, rest {a['other_ms']:5.1f} ms; "
              f"{a['sends']} sends" if a["ops"] else ""))
    ours = {k: v for k, v in rows.items() if k.startswith("pp-")}
    fastest = min(ours, key=lambda k: ours[k]["step_ms"])
    whole = [k for k in ours if "microbatches" not in results[k].config.options]  # pp-naive:
    naive_name = whole[0] if whole else None  # the schedule of one micro-batch, the baseline
    naive = ours.get(naive_name)
    if fastest == naive_name and naive:
        per_op = [(v["step_ms"] - naive["step_ms"]) / max(1, v["ops"] - naive["ops"])
                  for k, v in ours.items() if k != naive_name and v["ops"] > naive["ops"]]
        cores = len(os.sched_getaffinity(0))
        load = os.getloadavg()[0]
        print(f"\nwhy pp-naive is fastest here, from these runs: its whole step computes only "
              f"{naive['compute_ms']:.1f} ms in {naive['ops']} ops; the schedules that split it into "
              f"micro-batches run more, smaller ops and messages (median delivery "
              f"{statistics.median(v['latency_ms'] for v in ours.values()):.2f} ms each); in these "
              f"runs each extra op came with ≈{statistics.median(per_op):.1f} ms more step time — "
              f"more than the whole bubble ({naive['compute_ms'] / 2:.1f} ms at p=2) they could "
              f"remove from a {naive['compute_ms']:.0f} ms step. {len(results[fastest].outputs)} "
              f"ranks on {cores} cores (load average {load:.1f}: the cores are shared), so every "
              "extra wake-up can wait for a core.")
        spread = [v["compute_ms"] for v in ours.values() if v["ops"]]
        if max(spread) > 2 * min(spread):
            print(f"Interference, measured: the same forward and backward work of one step took "
                  f"{min(spread):.1f}–{max(spread):.1f} ms of F/B/W compute across these runs, so "
                  "the ordering above is noise as much as schedule.")
        print("The bubble pays off only when a micro-batch's compute dwarfs those fixed costs: "
              "the wide model of the Timelines section, where the measured bubbles follow theory.")


PANEL_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb", "naive")


def panel_follow(values: dict) -> dict:
    """`widgets.experiment_panel`'s `follow`: interleaved is offered only where it can run (m a
    multiple of p, 2 chunks per rank of the panel's 4 layers)."""
    p, m = values["world_size"], values["microbatches"]
    offered = [s for s in PANEL_SCHEDULES if s != "interleaved" or (m % p == 0 and 2 * p <= 4)]
    return {"schedule": (offered, values["schedule"] if values["schedule"] in offered else "1f1b")}


def widget_run(world_size: int = 2, microbatches: int = 4, schedule: str = "1f1b") -> None:
    """The panel's callback: run one schedule and draw its ideal and measured timelines."""
    if schedule == "interleaved" and (microbatches % world_size or 2 * world_size > 4):
        print(f"interleaved needs m % p == 0 and 2·p <= 4 layers; got p={world_size}, "
              f"m={microbatches}")
        return
    measured_vs_ideal(f"pp-{schedule}", world_size, None if schedule == "naive" else microbatches,
                      steps=2,
                      model_config={"n_layer": 4}, **({"chunks": 2} if schedule == "interleaved"
                                                      else {}))

