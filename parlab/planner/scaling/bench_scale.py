"""`python -m parlab bench scale`: a 16-rank cluster on a laptop, on paced A100 time (issue 34).

Strong and weak scaling of DP (ddp-overlap), ZeRO-3, TP, PP (pp-1f1b) and a 3-D plan (`nd`) from
1 to 16 ranks on `clock="A100"`, NVLink inside a node of 8 and 100Gb InfiniBand between two nodes
(`parlab.core.topology.two_nodes`; Narayanan et al., SC 2021, for the cluster's shape). Each point
prints its step time, throughput, efficiency, waiting and state per rank beside
`parlab.planner.scaling.step_model.predict_step` and the state's closed form, then where each
dimension stops paying. Options: `--repeats`, `--full`, `--launch --exact`, `--preset`,
`--megatron`, `--big`, `--roofline`, `--real` (every command line: docs/planner.md,
`parlab.planner.scaling.bench_scale`).

    python -m parlab bench scale                      # the default sweep (~5 min on 2 cores)
"""

from __future__ import annotations

import argparse
import time

from parlab.core.progress import progress as bar
from parlab.engine import many_ranks
from parlab.planner.scaling import points

# points left out of the default sweep for their wall time on this CPU (ZeRO-3 at 16 ranks: many
# small collectives, each a real gloo op among 16 processes on 2 cores): --full runs them
SLOW = {("zero3", 16)}


def sweep(dims, modes, ranks, intra="NVLink", inter="100Gb-IB", full=False, repeats=1,
          steps=2, progress=print, preset=None) -> tuple[list[dict], list[dict]]:
    """(rows, spreads): every point of the sweep beside the model; with repeats > 1 the spread of
    each point's step time over its runs ((max − min) / min: 0 on virtual time)."""
    rows, spreads = [], []
    for mode in modes:
        base = None
        for dim in dims:
            for n in bar(ranks, desc=f"{mode} {dim}"):
                if (dim, n) in SLOW and not full:
                    continue
                if points.point_config(dim, n, mode, preset=preset) is None:
                    continue
                if n == 1 and base is not None:  # every dimension shares one 1-rank run
                    rows.append({**base, "dim": dim})
                    continue
                runs = []
                t0 = time.perf_counter()
                for _ in range(repeats):
                    runs.append(points.measure_point(dim, n, mode, intra=intra, inter=inter,
                                                      steps=steps, preset=preset))
                row = runs[0]
                if repeats > 1:
                    times = [r["step_us"] for r in runs]
                    spreads.append({"dim": dim, "mode": mode, "n": n, "times": times,
                                    "spread": (max(times) - min(times)) / min(times)})
                rows.append(row)
                if n == 1:
                    base = row
                if progress:
                    progress(f"  {mode} {dim} n={n}: {row['step_us']:.1f} µs/step measured, "
                             f"{row['pred_us']:.1f} model ({time.perf_counter() - t0:.0f} s)")
    return points.with_efficiency(rows), spreads


def report(rows, spreads, tolerance=0.10) -> list[str]:
    """The verdict lines: prediction errors and spreads against their goals, from this run."""
    errs = [abs(r["error"]) for r in rows if r["n"] > 1]
    worst = max((r for r in rows if r["n"] > 1), key=lambda r: abs(r["error"]), default=None)
    lines = []
    if worst is not None:
        within = sum(e <= tolerance for e in errs)
        lines.append(f"model vs measured step time: {within}/{len(errs)} points within "
                     f"{tolerance:.0%}; worst {worst['error']:+.1%} ({worst['dim']} {worst['mode']} "
                     f"n={worst['n']}, {worst['model']}) -> "
                     + ("goal met" if within == len(errs) else "goal NOT met at the points above"))
    if spreads:
        bad = [s for s in spreads if s["spread"] != 0]
        lines.append(f"repeated runs: {len(spreads) - len(bad)}/{len(spreads)} points gave identical "
                     "step times -> " + ("bit-reproducible" if not bad else "NOT reproducible at "
                                         + ", ".join(f"{s['dim']} {s['mode']} n={s['n']}"
                                                     for s in bad)))
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench scale",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--dims", nargs="+", default=list(points.DIMENSIONS),
                        choices=points.DIMENSIONS)
    parser.add_argument("--modes", nargs="+", default=["strong", "weak"], choices=["strong", "weak"])
    parser.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--intra", default="NVLink", help="the link inside a node of 8")
    parser.add_argument("--inter", default="100Gb-IB", help="the link between the two nodes")
    parser.add_argument("--repeats", type=int, default=1, help="runs per point (2: the spread)")
    parser.add_argument("--preset", default=None,
                        help="a real model's shapes (parlab.models.presets), run shapes-only: "
                             "ranks up to 64")
    parser.add_argument("--full", action="store_true", help="also the slow points " + str(sorted(SLOW)))
    parser.add_argument("--launch", action="store_true", help="launch time and RSS of 16 ranks")
    parser.add_argument("--exact", action="store_true", help="every scheme at 8 and 16 ranks")
    parser.add_argument("--no-sweep", action="store_true", help="skip the scaling sweep")
    parser.add_argument("--megatron", action="store_true",
                        help="Megatron-LM's Table 1 rows that fit in --max-ranks, shapes-only")
    parser.add_argument("--max-ranks", type=int, default=64, help="the largest row --megatron runs")
    parser.add_argument("--roofline", metavar="PRESET", nargs="?", const="megatron-1.7b",
                        help="price one forward+backward of PRESET's first 2 blocks per operator: "
                             "the clock, a roofline, PyTorch's RuntimeEstimator")
    parser.add_argument("--big", action="store_true",
                        help="one shapes-only step of a 7.5B GPT as dp2·tp8·pp4 on 64 ranks")
    parser.add_argument("--real", metavar="PRESET", nargs="?", const="megatron-1.7b",
                        help="PRESET shapes-only on nodes of 8: strong and weak scaling of "
                             "--real-dims over --real-ranks, then the planner's model scored "
                             "against runs at --planner-ranks (parlab.planner.scaling.real_scale)")
    parser.add_argument("--real-ranks", nargs="*", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--real-dims", nargs="+", default=["dp", "tp", "pp", "3d"],
                        choices=points.DIMENSIONS)
    parser.add_argument("--planner-ranks", nargs="*", type=int, default=[8, 16, 32, 64])
    parser.add_argument("--planner-runs", type=int, default=3,
                        help="plans run per world size: the pick and a spread of others")
    parser.add_argument("--planner-batch", type=int, default=16, help="global batch (sequences)")
    args = parser.parse_args(argv)
    if args.real is not None:  # every bad value named before any process starts
        from parlab.planner.scaling import real_scale
        real_scale.check_preset(args.real)
        bad = [n for n in args.real_ranks + args.planner_ranks if not 1 <= n <= 64]
        if bad or args.planner_runs < 1 or args.planner_batch < 1:
            raise SystemExit(f"--real-ranks/--planner-ranks {bad} must be in [1, 64]; "
                             f"--planner-runs={args.planner_runs} and --planner-batch="
                             f"{args.planner_batch} must be >= 1")
    most = 64 if args.preset else 32
    bad = [n for n in args.ranks if n < 1 or n > most]
    if bad or args.repeats < 1:
        raise SystemExit(f"--ranks {bad} must be in [1, {most}] (64 with --preset); "
                         f"--repeats={args.repeats} must be >= 1")
    if args.preset is not None:
        points.point_config("dp", 1, preset=args.preset)  # an unknown preset: named, at once
    t0 = time.perf_counter()
    if args.launch:
        print(many_ranks.format_launch(many_ranks.launch_cost(16)))
    if args.exact:
        print("every scheme at 8 and 16 ranks (batch_size=16, 2 steps, wall clock: results are the "
              "same on every clock)")
        many_ranks.exactness((8, 16))
    if not args.no_sweep:
        print(f"scaling on A100 time: {args.intra} inside a node of {points.NODE}, {args.inter} "
              f"between nodes; strong: global batch {points.STRONG_BATCH}, weak: "
              f"{points.WEAK_ROWS} rows per data-parallel rank; "
              + (f"{args.preset}, shapes-only" if args.preset else "tiny GPT (4 layers, 4 heads)"))
        rows, spreads = sweep(args.dims, args.modes, sorted(set(args.ranks)), args.intra,
                              args.inter, args.full, args.repeats, preset=args.preset)
        print(points.format_table(rows))
        print("model (parlab.planner.scaling.step_model.predict_step): counted compute + α-β of the ledger's "
              "bytes and rounds on each op's link; WFBP overlap for DP; the run's pipeline schedule "
              "simulated for PP")
        for line in points.stops_paying(rows):
            print(line)
        for line in report(rows, spreads):
            print(line)
    if args.megatron:
        from parlab.planner.scaling import megatron_runs
        print("Megatron-LM's Table 1 (Narayanan et al., SC 2021) on paced A100s, shapes-only: nodes "
              "of 8, NVLink inside, HDR InfiniBand between; activation recomputation on")
        megatron_runs.table(args.max_ranks)
    if args.roofline:
        from parlab.core import roofline
        from parlab.planner.scaling import megatron_runs
        setup, step = megatron_runs.preset_step(args.roofline, batch=1, layers=2)
        print(f"{args.roofline}, 2 blocks, one sequence, fp32 (parlab.core.roofline):")
        print(roofline.format_comparison(roofline.compare(step, setup=setup), top=10))
    if args.big:
        from parlab.planner.scaling import megatron_runs
        print(megatron_runs.big_run())
    if args.real is not None:
        from parlab.planner.scaling import real_scale
        real_scale.show(args.real, args.real_ranks, args.real_dims, args.modes, args.planner_ranks,
                        args.planner_runs, args.planner_batch, progress=print)
    print(f"({time.perf_counter() - t0:.0f} s, this CPU, raw)")
    return 0


# ----------------------------------------------------------------------------- for a notebook
def explore_point(dim: str = "dp", ranks: int = 8, inter: str = "100Gb-IB",
                  mode: str = "strong") -> dict | None:
    """The widget's callback: one point on paced A100 time beside the model, with its verdict."""
    row = points.measure_point(dim, ranks, mode, inter=inter)
    if row is None:
        print(f"{dim} cannot be cut {ranks} ways on the tiny GPT (4 heads, 4 layers)")
        return None
    ok = abs(row["error"]) <= 0.10
    print(f"{dim} ({row['scheme']}, dp·tp·pp = {'·'.join(map(str, row['degrees']))}) on {ranks} "
          f"ranks, {mode} scaling, batch {row['batch']}, {row['clock']}:")
    print(f"  step {row['step_us']:.1f} µs on the A100 (model {row['pred_us']:.1f} µs, "
          f"{row['error']:+.1%}: {'agrees within 10%' if ok else 'does NOT agree within 10%'}; "
          f"{row['model']})")
    print(f"  waiting {row['wait_us']:.1f} µs of it (model {row['pred_wait_us']:.1f}); model state "
          f"{row['state_B'] / 1024:.0f} KiB per rank (closed form {row['pred_state_B'] / 1024:.0f})")
    return row
