"""`python -m parlab bench serving`: the chapter's headline numbers, each ratio measured in one run.

Two jobs (Luo et al., "CrossoverScheduler", 2021): throughput of sequential, concurrent and
crossover at each world size on `--clock` (paced A100 by default), the ratio to sequential (goal:
crossover ≥ 1.2× on 1GbE in A100 time) beside the model's prediction and verdict. Edge split
(Lin & Wang, 2021; here our saliency ranking, `masks.search`): bytes per image and accuracy per
density, plain and with the group lasso (goal: ≥ 80% fewer bytes at ≤ 2 points accuracy loss),
and request latency per real edge link in paced Jetson Nano time. In full: docs/serving.md,
`parlab.serving.bench`.
"""

from __future__ import annotations

import argparse

from parlab.core.progress import progress
from parlab.serving import cost, edge, grouped, masks
from parlab.serving import explore as ex
from parlab.serving.explore import edge as ex_edge
from parlab.serving.schedules import SCHEDULES
from parlab.serving.sharing import run_jobs


def bench_jobs(world_size: int, link: str, steps: int, repeats: int, clock: str = "A100") -> dict:
    specs = ex.jobs(world_size)
    best: dict = {}
    for _ in range(repeats):
        for schedule in SCHEDULES:
            r = run_jobs(specs, world_size, schedule, steps, None if link == "loopback" else link,
                         clock=clock)
            if schedule not in best or r.wall_s < best[schedule].wall_s:
                best[schedule] = r
    print(f"\n== two jobs, N={world_size}, {link}, {steps} steps each, best of {repeats}, "
          f"{best['sequential'].clock.label}")
    model = ex.model_table(best, link)
    ratios = ex.throughput_table(best, model)
    ex.crossover_verdict(best, model)
    return ratios


def bench_edge(world_size: int, learn_steps: int, tune_steps: int, densities) -> None:
    (x, y), (xt, yt) = ex_edge.data()
    print(f"\n== edge split over N={world_size}: bytes per image (all devices) and test accuracy")
    for lasso in (0.0, ex_edge.LASSO):
        net = masks.learn(x, y, ex_edge.CONFIG, steps=learn_steps, lasso=lasso)
        dense_net = masks.finetune(net, x, y, grouped.full_masks(ex_edge.CONFIG), steps=tune_steps, lr=3e-3)
        dense_acc = grouped.accuracy(dense_net, xt, yt)
        dense_bytes = sum(sum(p.values()) for p in cost.edge_bytes(ex_edge.CONFIG, dense_net.masks,
                                                                   world_size, 1))
        print(f"trained {'with group lasso ' + str(lasso) if lasso else 'plainly'}: all features "
              f"{dense_bytes:,} B, accuracy {dense_acc:.1%}")
        for density in densities:
            tuned = masks.finetune(net, x, y, masks.search(net, x[:256], density), steps=tune_steps,
                                   lr=3e-3)
            sent = sum(sum(p.values()) for p in cost.edge_bytes(ex_edge.CONFIG, tuned.masks, world_size, 1))
            acc = grouped.accuracy(tuned, xt, yt)
            print(f"  density {density:<5} {sent:>7,} B  {1 - sent / dense_bytes:>5.0%} fewer  "
                  f"accuracy {acc:.1%}  ({100 * (dense_acc - acc):+.1f} points lost)")
    print(f"\n== latency per request of 128 images, N={world_size} vs one device, paced "
          f"{edge.EDGE_DEVICE} time")
    net = ex_edge.tuned(1.0)
    alone = edge.run_edge(net, xt[:128], 1, clock=edge.EDGE_DEVICE).latency
    for density in (1.0, 0.05):
        for name, link in edge.EDGE_LINKS.items():
            t = edge.run_edge(ex_edge.tuned(density), xt[:128], world_size, link=link,
                              clock=edge.EDGE_DEVICE).latency
            print(f"  density {density:<4} {name:<9} {t * 1e3:8.2f} ms  ({t / alone:.2f}× one device,"
                  f" {alone * 1e3:.2f} ms)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench serving", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--links", nargs="+", default=["1GbE", "10GbE"])
    parser.add_argument("--clock", default="A100", help='"A100" (paced, default), "H100", "V100" '
                        'or "wall" (this CPU, raw)')
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--learn-steps", type=int, default=ex_edge.LEARN_STEPS)
    parser.add_argument("--tune-steps", type=int, default=ex_edge.TUNE_STEPS)
    parser.add_argument("--densities", type=float, nargs="+", default=[0.2, 0.1, 0.05, 0.0])
    parser.add_argument("--skip-edge", action="store_true")
    args = parser.parse_args(argv)
    for n in progress(args.world_sizes, desc="world sizes"):
        for link in args.links:
            bench_jobs(n, link, args.steps, args.repeats, args.clock)
    if not args.skip_edge:
        bench_edge(2, args.learn_steps, args.tune_steps, args.densities)
    print("\njobs: paced time is virtual, bit-reproducible (raw wall time with --clock wall is "
          "shared and noisy: compare within a run); edge latencies: paced Jetson Nano time")
    return 0
