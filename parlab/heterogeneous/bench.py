"""`python -m parlab bench heterogeneous`: step time of `hetero-dp` with even, proportional and LP
shares on a cluster with one slow device, on one node and on two; backup workers vs b.

The issue's goal (Zhang et al., "HAP", EuroSys 2024, report up to 2.41× on heterogeneous clusters):
at speeds 1:1:1:0.25 the LP's shares step ≥ 1.5× faster than even shares. Every device runs at
`--scale` of one core here (parlab.heterogeneous.explore.SCALE: the ranks share 2 cores), so the
emulated speeds, not the neighbours' compute, set the pace. Each row: the rows per rank, the median
step after the first (measured), the model's step (`parlab.heterogeneous.cost.step_time`), the LP's
bound T*, the speedup over even (measured and modelled, in one run each), and each rank's time
blocked in communication per step (the straggler's victims).
"""

from __future__ import annotations

import argparse
import json

from parlab.core import topology
from parlab.heterogeneous import explore


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
    parser.add_argument("--json", default=None, help="save the rows here")
    args = parser.parse_args(argv)
    n = len(args.ratios)
    speeds = [r * args.scale for r in args.ratios]
    out = {}
    for name, link in (("one node", None), ("two nodes", topology.two_nodes(n, "NVLink", args.inter))):
        rows = explore.measure_shardings(n, speeds, args.steps, link=link, batch_size=args.batch_size)
        explore.print_measurement(rows, f"\n{name}: N={n}, speeds {args.ratios} × {args.scale}, "
                                  f"B={args.batch_size}, {link or 'loopback'}")
        lp = explore.headline(rows)
        print(f"LP vs even: {lp:.2f}× (goal ≥ 1.5×: {'met' if lp >= 1.5 else 'NOT met'})")
        out[name] = rows
    print("\nbackup workers (even shares; the step uses the first N−b gradients):")
    out["backup"] = explore.backup_sweep(n, args.steps, backups=(0, 1, 2), speeds=speeds)
    print("median step after the first; the machine is shared and noisy — compare within a run")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0
