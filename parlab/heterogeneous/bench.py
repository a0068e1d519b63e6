"""`python -m parlab bench heterogeneous`: step time of `hetero-dp` with even, proportional and LP
shares on a cluster with one slow device, on one node and on two; backup workers vs b.

The issue's goal (Zhang et al., "HAP", EuroSys 2024, report up to 2.41× on heterogeneous
clusters): at speeds 1:1:1:0.25 the LP's shares step ≥ 1.5× faster than even shares. Runs on the
paced clock by default (`--clock A100`; `--clock wall` scales each device to `--scale` of a
core). Each row: rows per rank, measured and modelled step (`cost.step_time`), the LP's bound T*,
speedups over even, time blocked in communication. `hetero-tp` (`--tp-ratios`) and the uneven
collectives, padded vs exact, follow; `--part dp|tp|all` picks what runs. In full:
docs/heterogeneous.md, `parlab.heterogeneous.bench`.
"""

from __future__ import annotations

import argparse
import json

from parlab.core import topology
from parlab.heterogeneous import explore
from parlab.heterogeneous.explore import tp as ex_tp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench heterogeneous", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ratios", type=float, nargs="+", default=[1, 1, 1, 0.25],
                        help="relative speeds, one per rank (the world size is their count)")
    parser.add_argument("--scale", type=float, default=explore.SCALE,
                        help="speed of a ratio-1 device as a fraction of one core here")
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--inter", default="1GbE", help="the link between the two nodes")
    parser.add_argument("--tp-ratios", type=float, nargs="+", default=[1, 1, 1, 0.5],
                        help="relative speeds for hetero-tp, one per rank")
    parser.add_argument("--tp-model", default="{'n_embd': 384, 'n_head': 8}",
                        help="GPT config for hetero-tp as a dict literal: wide enough that the matmuls, "
                        "not per-op overhead, are most of a rank's work ('{}': the default tiny GPT)")
    parser.add_argument("--tp-scale", type=float, default=1 / 16,
                        help="hetero-tp: speed of a ratio-1 device as a fraction of one core here")
    parser.add_argument("--repeats", type=int, default=3,
                        help="hetero-tp: interleaved rounds of one run per sharding (median)")
    parser.add_argument("--part", choices=("all", "dp", "tp"), default="all")
    parser.add_argument("--clock", default="A100", help="hetero-dp and backup workers: paced clock "
                        "(A100, H100, V100: virtual time, speeds are the ratios, links the real ones) "
                        "or wall (this CPU, raw: speeds × --scale)")
    parser.add_argument("--json", default=None, help="save the rows here")
    args = parser.parse_args(argv)
    out = {}
    if args.part in ("all", "dp"):
        out.update(_data_parallel(args))
    if args.part in ("all", "tp"):
        out.update(_tensor_parallel(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


def _data_parallel(args) -> dict:
    n = len(args.ratios)
    paced = args.clock != "wall"
    scale = 1.0 if paced else args.scale
    speeds = [r * scale for r in args.ratios]
    inter = args.inter  # paced: the real link, priced in virtual time (no wall time spent on it)
    out = {}
    for name, link in (("one node", None), ("two nodes", topology.two_nodes(n, "NVLink", inter))):
        rows = explore.measure_shardings(n, speeds, args.steps, link=link, batch_size=args.batch_size,
                                         clock=args.clock)
        explore.print_measurement(rows, f"\n{name}: N={n}, speeds {args.ratios} × {scale}, "
                                  f"B={args.batch_size}, {link or 'loopback'}")
        lp = explore.headline(rows)
        print(f"LP vs even: {lp:.2f}× (goal ≥ 1.5×: {'met' if lp >= 1.5 else 'NOT met'})")
        explore.verdict(rows)
        out[name] = rows
    print("\nbackup workers (even shares; the step uses the first N−b gradients):")
    out["backup"] = explore.backup_sweep(n, args.steps, backups=(0, 1, 2), speeds=speeds, clock=args.clock)
    print("median step after the first, ratios within one run; " + (
        f"virtual time ({out['one node'][0]['clock']}): bit-reproducible" if paced else
        "this CPU, raw: shared and noisy"))
    return out


def _tensor_parallel(args) -> dict:
    import ast

    from parlab.engine.runner import make_config
    from parlab.heterogeneous import cost

    n = len(args.tp_ratios)
    model_config = ast.literal_eval(args.tp_model) or None
    print(f"\nhetero-tp: N={n}, speeds {args.tp_ratios} × {args.tp_scale:g}, GPT {model_config or 'default'}")
    rows = ex_tp.measure_tp_shardings(n, args.tp_ratios, args.steps, args.tp_scale,
                                           model_config=model_config, repeats=args.repeats)
    ex_tp.print_tp_measurement(rows)
    out = {"tp": rows, "collectives": []}
    cfg = make_config("hetero-tp", world_size=n, speeds=list(args.tp_ratios), shard="lp")
    lp_tokens = cost.tp_split(cfg)["tokens"]
    print("\nuneven collectives (hetero-tp's all-gather / reduce-scatter; B·C = 4096 fp32 per position)")
    for sizes in (lp_tokens, [3 * (n - 1)] + [1] * (n - 1)):
        for link in (None, "1GbE"):
            coll = ex_tp.measure_collectives(sizes, inner=4096, repeats=5, link=link)
            if link is None:
                ex_tp.print_collective_bytes(coll)
            ex_tp.print_collective_times(coll)
            out["collectives"].append(coll)
    return out
