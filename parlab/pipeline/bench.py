"""`python -m parlab bench pp`: throughput and bubble of every pipeline schedule vs micro-batches,
at 2 and 4 stages, with ratios to pp-gpipe and torch-pp measured in the same run; and even vs
balanced stages on a model with a heavy head.

    python -m parlab bench pp                      # the full table (~2–4 min on 2 cores)
    python -m parlab bench pp --quick              # pp=2, m in {2, 4}
    python -m parlab bench pp --json out.json      # raw numbers
    python -m parlab bench pp --eager              # 1F1B vs eager 1F1B (AlpaComm) on an emulated link
    python -m parlab bench pp --unet               # the pipelined 3-D U-Net (LAMP)

A wider model (C=128, T=64) makes stage compute dominate a message; at 4 stages 4 ranks share 2
cores, so the 4-stage bubble is measured, not clean. The sizes and options in full:
docs/pipeline.md, `parlab.pipeline.bench`.
"""

from __future__ import annotations

import argparse
import json
import statistics

import parlab
from parlab.core.progress import progress
from parlab.pipeline import cost

MODEL = {"n_layer": 8, "n_embd": 128, "n_head": 4, "block_size": 64}
HEAVY_HEAD = {"n_layer": 8, "n_embd": 128, "n_head": 4, "block_size": 32, "vocab_size": 8192}
OURS = ("gpipe", "1f1b", "interleaved", "zb")  # `bench all`'s headline rows
SWEEP = OURS + ("zbv",)  # the sweep's: ZB-V (Qi et al., ICLR 2024, §6) beside the others
CHUNKS = {"interleaved": 2, "zbv": 2}  # model chunks per rank of a schedule (default 1)
TORCH = ("torch-gpipe", "torch-1f1b")


def _measure(scheme, pp, m, steps, batch, model_config, ours: str = "", **options):
    """One run's throughput and bubbles; `ours`: the schedule our executor ran (its closed forms
    and measured bubbles apply), "" for torch.distributed.pipelining's."""
    r = parlab.run(scheme, world_size=pp, steps=steps, microbatches=m, batch_size=batch,
                   model_config=model_config, **options)
    step = r.step_time()
    bubble = least = ideal = ideal_lat = latency = overhead = ideal_all = float("nan")
    if ours:
        from parlab.pipeline.schedules import make_schedule
        schedule = make_schedule(ours, pp, m, CHUNKS.get(ours, options.get("chunks", 1)))
        bubble = cost.measured_bubble(r.timeline)
        least = cost.measured_bubble(r.timeline, stat="min")
        ideal = cost.bubble_of(cost.ideal_from_measured(schedule, r.timeline))
        latency = cost.measured_message_latency(r.ledger)
        ideal_lat = cost.bubble_of(cost.ideal_from_measured(schedule, r.timeline, latency))
        overhead = cost.measured_action_overhead(r.timeline)
        ideal_all = cost.bubble_with_overhead(schedule, r.timeline, latency, overhead)
    return {"scheme": scheme, "ours": ours, "pp": pp, "m": m, "step_s": step,
            "samples_per_s": batch / step,
            "compute_ms": 1e3 * busiest_compute(r.timeline) if ours else float("nan"),
            "bubble": bubble, "bubble_least": least, "ideal_measured_costs": ideal,
            "latency_s": latency, "ideal_measured_costs_and_latency": ideal_lat,
            "overhead_s": overhead, "ideal_with_overhead": ideal_all,
            **{k: v for k, v in options.items() if k != "partition"}}


def _measure_ours(name, pp, m, steps, batch, model_config) -> dict:
    """`_measure` of our schedule `name` (interleaved with 2 chunks; ZB-V's two chunks per rank
    are its own), with its closed-form bubble."""
    chunks = CHUNKS.get(name, 1)
    row = _measure(f"pp-{name}", pp, m, steps, batch, model_config, ours=name,
                   **({"chunks": chunks} if name == "interleaved" else {}))
    row["theory"] = cost.theory_bubble(name, pp, m, chunks)
    return row


def busiest_compute(timeline) -> float:
    """Median over steps (the first left out) of the busiest rank's F + B + W seconds."""
    per: dict = {}
    for e in cost.pipeline_events(timeline):
        step = e["args"]["step"]
        if step:
            key = (step, e["rank"])
            per[key] = per.get(key, 0.0) + e["t1"] - e["t0"]
    steps = sorted({s for s, _ in per})
    return statistics.median(max(v for (s, _), v in per.items() if s == step) for step in steps)


def diagnose(group) -> list[str]:
    """Where a schedule with a smaller closed-form bubble than 1F1B ran slower, why, from the
    same runs: its measured bubble and its busiest rank's compute per step against 1F1B's."""
    base = next((r for r in group if r["ours"] == "1f1b"), None)
    lines = []
    for r in group:
        if base is None or not r["ours"]:  # the closed-form bubble picks interleaved and zb
            continue
        if r["theory"] < base["theory"] and r["samples_per_s"] < base["samples_per_s"]:
            why = []
            if r["bubble"] >= base["bubble"]:
                why.append(f"its measured bubble did not shrink ({r['bubble']:.1%} vs "
                           f"{base['bubble']:.1%}: more messages, each a chance to wait)")
            if r["overhead_s"] > base["overhead_s"]:
                why.append(f"each of its actions spent {r['overhead_s'] * 1e3:.2f} ms outside "
                           f"compute and waits vs 1F1B's {base['overhead_s'] * 1e3:.2f} ms (a "
                           "send and a receive beside most actions: every chunk boundary crosses "
                           "ranks); the ideal schedule with that overhead has a "
                           f"{r['ideal_with_overhead']:.1%} bubble vs 1F1B's "
                           f"{base['ideal_with_overhead']:.1%}")
            if r["compute_ms"] > base["compute_ms"]:
                why.append(f"its busiest rank computed {r['compute_ms']:.1f} vs "
                           f"{base['compute_ms']:.1f} ms per step "
                           f"({r['compute_ms'] / base['compute_ms'] - 1:+.0%}: more, smaller "
                           "actions" + (", and the split backward's own matmuls" if
                                        r["ours"] in ("zb", "zbv") else "") + ")")
            lines.append(f"  {r['scheme']} has the smaller closed-form bubble ({r['theory']:.1%}"
                         f" vs 1F1B's {base['theory']:.1%}) but ran slower: " + "; ".join(why))
    return lines


def sweep(pps, ms, steps, batch, model_config) -> list[dict]:
    rows = []
    for pp in progress(pps, desc="pipeline degrees"):
        for m in ms:
            group = []
            for name in SWEEP:
                if name == "interleaved" and (m % pp or 2 * pp > model_config["n_layer"]):
                    continue
                if name == "zbv" and (m < 2 * pp - 1 or 2 * pp > model_config["n_layer"]):
                    continue  # its closed form needs m >= 2p−1; 2p stages of >= 1 layer
                group.append(_measure_ours(name, pp, m, steps, batch, model_config))
            for sched in ("gpipe", "1f1b"):
                if sched == "1f1b" and m < pp:
                    continue
                group.append(_measure("torch-pp", pp, m, steps, batch, model_config,
                                      schedule=sched))
            base = next(r for r in group if r["ours"] == "gpipe")["samples_per_s"]
            torch_best = max((r["samples_per_s"] for r in group if not r["ours"]),
                             default=float("nan"))
            for r in group:
                r["vs_gpipe"] = r["samples_per_s"] / base
                r["vs_torch"] = r["samples_per_s"] / torch_best
            rows += group
            _print(group)
            for line in diagnose(group):
                print(line, flush=True)
    return rows


def _print(group) -> None:
    for r in group:
        name = r["scheme"] + (f"[{r['schedule']}]" if "schedule" in r else "")
        bubble = "" if r["bubble"] != r["bubble"] else (
            f"bubble {r['bubble']:5.1%} (least {r['bubble_least']:5.1%}; theory {r['theory']:5.1%}: "
            f"{(r['bubble'] - r['theory']) * 100:+5.1f} / {(r['bubble_least'] - r['theory']) * 100:+5.1f}"
            f" pts; ideal at measured stage times {r['ideal_measured_costs']:5.1%}, + measured "
            f"latency {r['latency_s'] * 1e3:.1f} ms: {r['ideal_measured_costs_and_latency']:5.1%}, "
            f"+ measured {r['overhead_s'] * 1e3:.2f} ms per action outside compute and waits: "
            f"{r['ideal_with_overhead']:5.1%})")
        print(f"pp={r['pp']} m={r['m']:<2} {name:18} {r['samples_per_s']:7.1f} samples/s  "
              f"×{r['vs_gpipe']:.2f} gpipe  ×{r['vs_torch']:.2f} torch-pp  {bubble}", flush=True)


def partitions(steps, batch, m=4) -> list[dict]:
    rows = []
    for label in ("even", "balanced"):
        r = parlab.run("pp-1f1b", world_size=2, steps=steps, microbatches=m, batch_size=batch,
                       model_config=HEAVY_HEAD, partition=label)
        step = r.step_time()
        rows.append({"partition": label, "layers": r.outputs[0].extras["layers_per_stage"],
                     "samples_per_s": batch / step, "bubble": cost.measured_bubble(r.timeline),
                     "stage_ms": {s: round(1e3 * (t["F"] + t["B"]), 2) for s, t in
                                  cost.stage_compute(r.timeline).items()}})
    for r in rows:
        print(f"partition {r['partition']:8} layers {r['layers']}: {r['samples_per_s']:6.1f} "
              f"samples/s, bubble {r['bubble']:5.1%}, stage F+B ms {r['stage_ms']}")
    print(f"balanced / even throughput: {rows[1]['samples_per_s'] / rows[0]['samples_per_s']:.2f}×")
    return rows


HEADLINE_ROWS = 16  # rows per micro-batch (a global batch of 16·m, as Megatron fixes the micro-batch
# and grows m): 13–50 ms of compute per action beside the ~0.2–0.4 ms each costs in sends,
# receives and bookkeeping (`cost.measured_action_overhead`), the proportion a GPU's
# milliseconds of compute keep beside NCCL's microseconds


def headline_rows(repeats: int, steps: int, rows_per_microbatch: int = HEADLINE_ROWS,
                  ms=(4, 8)) -> list[dict]:
    """`python -m parlab bench all`'s pipeline rows at p=2, the four schedules interleaved
    (GPipe, 1F1B, interleaved, ZB, GPipe, ...) `repeats` times: GPipe's and 1F1B's measured
    bubble minus the closed form (p−1)/(m+p−1) in points (GPipe §2.3; Narayanan et al., SC 2021,
    §2.2.1), and interleaved's and ZB-H1's throughput over 1F1B's beside what their closed-form
    bubbles promise, (1 − bubble)/(1 − bubble₁F₁B) (Narayanan et al. §2.2.2; Qi et al., ICLR
    2024, §3), with the measured per-action overhead and compute that explain any shortfall; and
    our GPipe's and 1F1B's throughput over torch.distributed.pipelining's on the same stages."""
    rows = []
    for m in progress(ms, desc="microbatch counts"):
        batch = rows_per_microbatch * m
        runs: dict = {name: [] for name in OURS + TORCH}
        for _ in range(repeats):
            for name in OURS:
                runs[name].append(_measure_ours(name, 2, m, steps, batch, MODEL))
            for name in TORCH:  # the same stages and schedule in torch.distributed.pipelining
                runs[name].append(_measure("torch-pp", 2, m, steps, batch, MODEL,
                                           schedule=name.removeprefix("torch-")))
        for name in ("gpipe", "1f1b"):
            excess = [100 * (r["bubble"] - r["theory"]) for r in runs[name]]
            least = statistics.median(100 * (r["bubble_least"] - r["theory"]) for r in runs[name])
            modelled = statistics.median(r["ideal_with_overhead"] for r in runs[name])
            rows.append({"chapter": "pipeline", "name": f"{name} bubble − closed form (points), "
                         f"p=2 m={m}", "ratio": statistics.median(excess), "low": min(excess),
                         "high": max(excess), "detail": (
                             f"measured {statistics.median(r['bubble'] for r in runs[name]):.1%} vs "
                             f"(p−1)/(m+p−1) = {runs[name][0]['theory']:.1%}; least-disturbed step "
                             f"{least:+.1f} pts; ideal with the measured "
                             f"{statistics.median(r['overhead_s'] for r in runs[name]) * 1e3:.2f} "
                             f"ms per action outside compute and waits: {modelled:.1%}; batch "
                             f"{batch}")})
        for name in ("interleaved", "zb"):
            ratios = [r["samples_per_s"] / b["samples_per_s"]
                      for r, b in zip(runs[name], runs["1f1b"])]
            promise = (1 - runs[name][0]["theory"]) / (1 - runs["1f1b"][0]["theory"])
            compute = statistics.median(r["compute_ms"] / b["compute_ms"]
                                        for r, b in zip(runs[name], runs["1f1b"]))
            detail = (f"throughput over 1F1B's; closed-form bubbles {runs[name][0]['theory']:.1%}"
                      f" vs {runs['1f1b'][0]['theory']:.1%} promise {promise:.2f}; its busiest "
                      f"rank computes {compute:.2f}× 1F1B's per step")
            slow = [r for r, ratio in zip(runs[name], ratios) if ratio < 1]
            if slow:  # the repeats it lost, diagnosed from those same runs
                detail += "; lost " + str(len(slow)) + ": " + " | ".join(
                    line.split(": ", 1)[-1] for r, b in zip(runs[name], runs["1f1b"])
                    if r["samples_per_s"] < b["samples_per_s"] for line in diagnose([b, r]))
            rows.append({"chapter": "pipeline", "name": f"{name} / 1f1b throughput, p=2 m={m}",
                         "ratio": statistics.median(ratios), "low": min(ratios),
                         "high": max(ratios), "detail": detail})
        for name in ("gpipe", "1f1b"):
            ratios = [r["samples_per_s"] / t["samples_per_s"]
                      for r, t in zip(runs[name], runs[f"torch-{name}"])]
            rows.append({"chapter": "pipeline", "name": f"{name} ours / torch-pp throughput, "
                         f"p=2 m={m}", "ratio": statistics.median(ratios), "low": min(ratios),
                         "high": max(ratios), "detail": "the same stages and schedule in "
                         f"torch.distributed.pipelining; batch {batch}"})
    return rows


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench pp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pp", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--microbatches", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="pp=2, m in {2, 4}, 3 steps")
    parser.add_argument("--no-partition", action="store_true")
    parser.add_argument("--json", help="write the raw rows here")
    parser.add_argument("--eager", action="store_true",
                        help="only 1F1B vs eager 1F1B over resharding boundaries (Zhuang et al. 2023)")
    parser.add_argument("--unet", action="store_true",
                        help="only the pipelined 3-D U-Net (Zhu et al., LAMP, MICCAI 2020)")
    args = parser.parse_args(argv)
    if args.unet:
        from parlab.pipeline.explore.unet import bench as unet_bench
        rows = unet_bench(steps=max(args.steps, 3))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"unet": rows}, f, indent=1, default=str)
        return 0
    if args.eager:
        from parlab.pipeline.explore.eager import reshard_step_times
        rows = reshard_step_times(steps=args.steps)
        narrow = reshard_step_times(steps=args.steps, widths=[2, 1])  # tp=2 → tp=1
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"eager": rows, "eager_2_to_1": narrow}, f, indent=1, default=str)
        return 0
    if args.quick:
        args.pp, args.microbatches, args.steps = [2], [2, 4], 3
    print(f"model {MODEL}, global batch {args.batch}, {args.steps} steps (first left out); "
          "2 shared cores: ratios are from one run, noisy")
    rows = sweep(args.pp, args.microbatches, args.steps, args.batch, MODEL)
    part = [] if args.no_partition else partitions(args.steps, args.batch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sweep": rows, "partition": part}, f, indent=1, default=str)
    return 0
