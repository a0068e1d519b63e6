"""What notebooks/04_pipeline.ipynb runs: schedules drawn, runs checked against the reference,
ledger bytes beside their closed forms, measured timelines beside ideal ones, bubble curves,
activation memory, balanced partitions, ours beside torch.distributed.pipelining, emulated links,
and the widget. Papers: GPipe (Huang et al. 2019), PipeDream / 1F1B (Narayanan et al. 2019, 2021),
Megatron-LM interleaving (Narayanan et al. 2021), Zero Bubble (Qi et al. 2024), LAMP (Zhu et al.
2020), layer-wise partitioning ("Layer-wise partitioning and merging for efficient and scalable deep
learning").
"""

from __future__ import annotations

import parlab
from parlab.core import cost as comm_cost
from parlab.engine.runner import COMMON_OPTIONS
from parlab.pipeline import cost
from parlab.pipeline.draw import gantt, ideal_and_measured
from parlab.pipeline.schedules import make_schedule

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved", "zb")
# A model where stage compute dominates a loopback message: 64 tokens × 128 channels.
COMPUTE_HEAVY = {"n_layer": 4, "n_embd": 128, "n_head": 4, "block_size": 64}
# A model with a heavy head: an 8192-token vocabulary costs ~5 blocks of compute at the last stage.
HEAVY_HEAD = {"n_layer": 8, "n_embd": 64, "n_head": 4, "block_size": 32, "vocab_size": 8192}


def show_schedules(pp: int, microbatches: int, chunks: int = 2) -> None:
    """Each schedule's ideal Gantt chart (F = 1, B = 2 or B = W = 1) and its bubble."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(SCHEDULES), 1, figsize=(10, 1.0 + 0.5 * pp * len(SCHEDULES)))
    for ax, name in zip(axes, SCHEDULES):
        m = microbatches if name != "interleaved" else max(pp, microbatches - microbatches % pp)
        v = chunks if name == "interleaved" else 1
        schedule = make_schedule(name, pp, m, v)
        events = cost.ideal_timeline(schedule, forward=1.0 / v)
        gantt(events, ax, f"{name} (p={pp}, m={schedule.microbatches}, v={v}): bubble "
              f"{cost.bubble_of(events):.1%}, closed form {cost.theory_bubble(name, pp, m, v):.1%}",
              unit=1.0, xlabel="time (units of one forward)")
    fig.tight_layout()


def bubble_table(pp: int, microbatches: list[int], chunks: int = 2) -> None:
    """Simulated bubble vs closed form for every schedule and micro-batch count."""
    print(f"{'schedule':12} " + " ".join(f"m={m:<13}" for m in microbatches))
    for name in SCHEDULES[1:]:
        row = []
        for m in microbatches:
            if name == "interleaved" and m % pp:
                row.append(f"{'-':15}")
                continue
            v = chunks if name == "interleaved" else 1
            sim = cost.ideal_bubble(make_schedule(name, pp, m, v), forward=1.0 / v)
            row.append(f"{sim:5.1%} ({cost.theory_bubble(name, pp, m, v):5.1%})")
        print(f"{name:12} " + " ".join(row))
    print("simulated (closed form)")


def check_all(world_size: int, steps: int = 2) -> dict:
    """Every pipeline scheme at its defaults vs the single process: `match: True`."""
    ref = parlab.run("single", steps=steps)
    results = {}
    for scheme in ["pp-naive", "pp-gpipe", "pp-1f1b", "pp-interleaved", "pp-zb", "torch-pp"]:
        r = parlab.run(scheme, world_size=world_size, steps=steps)
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
    schedule = result.config.options.get("schedule") if name in ("pp", "torch-pp") else \
        name.removeprefix("pp-")
    return resolve(result.config, schedule).microbatches


def measured_vs_ideal(scheme: str, world_size: int, microbatches: int | None, steps: int = 3,
                      model_config=None, draw: bool = True, **options):
    """Run; compare the measured bubble with the closed form and with the ideal timeline simulated
    from the measured per-stage F / B / W times; draw ideal over measured (last step)."""
    model_config = model_config or COMPUTE_HEAVY
    if microbatches is not None:
        options["microbatches"] = microbatches
    r = parlab.run(scheme, world_size=world_size, steps=steps, model_config=model_config,
                   **options)
    from parlab.pipeline.schemes import resolve
    name = r.config.options.get("schedule") if scheme == "pp" else scheme.removeprefix("pp-")
    plan = resolve(r.config, name)
    schedule = make_schedule(name, plan.pp, plan.microbatches, plan.chunks)
    latency = cost.measured_message_latency(r.ledger)
    ideal = cost.ideal_from_measured(schedule, r.timeline)
    with_latency = cost.bubble_of(cost.ideal_from_measured(schedule, r.timeline, latency))
    last = cost.pipeline_events(r.timeline, step=steps - 1)
    measured, predicted = cost.measured_bubble(r.timeline), cost.bubble_of(ideal)
    least = cost.measured_bubble(r.timeline, stat="min")
    theory = cost.theory_bubble(name, plan.pp, plan.microbatches, plan.chunks)
    print(f"{scheme} p={plan.pp} m={plan.microbatches} v={plan.chunks}: bubble measured "
          f"{measured:.1%} (least-disturbed step {least:.1%}); closed form {theory:.1%}; ideal at "
          f"the measured stage times {predicted:.1%}, and with the measured message latency "
          f"{latency * 1e3:.2f} ms {with_latency:.1%}; step "
          f"{r.step_time() * 1e3:.0f} ms")
    if draw:
        ideal_and_measured(ideal, last, f"{scheme}, p={plan.pp}, m={plan.microbatches}")
    return {"measured": measured, "least": least, "ideal": predicted, "theory": theory,
            "latency": latency, "ideal_with_latency": with_latency, "result": r}


def bubble_curve(world_size: int, microbatches: list[int], schedules=("1f1b",), steps: int = 3,
                 model_config=None):
    """Measured bubble vs micro-batches beside the closed form; returns the rows."""
    import matplotlib.pyplot as plt

    rows = []
    _, ax = plt.subplots(figsize=(6, 3.5))
    for name in schedules:
        ms = [m for m in microbatches if name != "interleaved" or m % world_size == 0]
        got = [measured_vs_ideal(f"pp-{name}", world_size, m, steps, model_config, draw=False)
               for m in ms]
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
    ax.set_ylabel("bubble fraction")
    ax.set_title(f"bubble vs micro-batches, p={world_size}")
    ax.legend(fontsize="small")
    return rows


def memory_report(world_size: int, microbatches: int, steps: int = 1) -> None:
    """Peak activation bytes per stage: GPipe holds m micro-batches, 1F1B at most p − s."""
    print(f"p={world_size}, m={microbatches}: peak activations per rank (micro-batches in flight)")
    for scheme in ("pp-gpipe", "pp-1f1b", "pp-zb"):
        r = parlab.run(scheme, world_size=world_size, steps=steps, microbatches=microbatches)
        cells = [f"{mem['activations'] / 1e6:6.2f} MB ({out.extras['in_flight_peak']})"
                 for mem, out in zip(r.memory, r.outputs)]
        print(f"  {scheme:9} " + "  ".join(cells))


def partition_report(world_size: int = 2, microbatches: int = 4, steps: int = 4) -> dict:
    """Even vs balanced split of a model with a heavy head: profile, split, run, compare."""
    import torch

    from parlab.models import build_model, model_config
    from parlab.pipeline.partition import balanced_partition, profile_layers, stage_times
    from parlab.pipeline.stages import even_partition

    mc = model_config("gpt", HEAVY_HEAD)
    rows = COMMON_OPTIONS["batch_size"] // microbatches  # the default global batch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # profile as a rank computes: one thread
    try:
        profile = profile_layers(build_model("gpt", mc, 0), mc, rows)
    finally:
        torch.set_num_threads(threads)
    even = even_partition(mc.n_layer, world_size)
    balanced = balanced_partition(profile, world_size)
    print(f"per-layer fwd+bwd (ms): blocks {[round(t * 1e3, 2) for t in profile['layers']]}, "
          f"embedding {profile['first'] * 1e3:.2f}, head+loss {profile['last'] * 1e3:.2f}")
    out = {}
    for label, counts in (("even", even), ("balanced", balanced)):
        predicted = stage_times(counts, profile)
        r = parlab.run("pp-1f1b", world_size=world_size, steps=steps, microbatches=microbatches,
                       model_config=HEAVY_HEAD, partition=list(counts))
        step = min(r.step_times[1:] or r.step_times)
        out[label] = {"counts": counts, "step_s": step,
                      "bubble": cost.measured_bubble(r.timeline, stat="min")}
        print(f"{label:9} layers {counts}: predicted stage ms {[round(t * 1e3, 1) for t in predicted]}"
              f", fastest step {step * 1e3:.0f} ms, least bubble {out[label]['bubble']:.1%}")
    print(f"balanced / even throughput: {out['even']['step_s'] / out['balanced']['step_s']:.2f}×")
    return out


def compare_step_times(results: dict) -> None:
    """Measured whole-step time of each run of `check_all` (ours and torch-pp side by side)."""
    base = results["torch-pp"].step_time()
    for scheme, r in results.items():
        t = r.step_time()
        print(f"{scheme:15} {t * 1e3:7.1f} ms/step  ({t / base:.2f}× torch-pp's time)")


def link_report(world_size: int, microbatches: int, links=("loopback", "10GbE", "1GbE"),
                steps: int = 3) -> None:
    """The same 1F1B run over emulated links: the same bytes, each message α + bytes/β later."""
    from parlab.core.link import resolve

    for link in links:
        r = parlab.run("pp-1f1b", world_size=world_size, steps=steps, microbatches=microbatches,
                       link=link)
        sends = [x for x in r.ledger if x["op"] == "send" and x["rank"] == 0]
        per_message = resolve(link).cost(sends[0]["bytes_sent"]) if resolve(link) else 0.0
        blocked = sum(e["t1"] - e["t0"] for e in r.timeline if e["kind"] == "wait"
                      and e["name"] == "wait recv") / steps / world_size
        print(f"{link:9} {len(sends) // steps} sends/step/rank of {sends[0]['bytes_sent']:,} B, "
              f"α+n/β = {per_message * 1e3:5.1f} ms each; measured: blocked in recv "
              f"{blocked * 1e3:6.1f} ms/step/rank, bubble {cost.measured_bubble(r.timeline):5.1%}, "
              f"step {r.step_time() * 1e3:6.1f} ms")


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


def check_bubble_answer(answer: float | None, pp: int = 4, microbatches: int = 8,
                        chunks: int = 2) -> str:
    """Exercise check: the bubble of interleaved 1F1B at (p, m, v), simulated from the schedule."""
    if answer is None:
        return (f"set my_answer to your prediction of the bubble of interleaved 1F1B at p={pp}, "
                f"m={microbatches}, v={chunks}")
    truth = cost.ideal_bubble(make_schedule("interleaved", pp, microbatches, chunks),
                              forward=1.0 / chunks)
    ok = abs(answer - truth) < 5e-3
    return f"{'correct' if ok else 'not yet'}: the simulated bubble is {truth:.4f}"
