"""`python -m parlab bench allreduce`: latency / bandwidth sweep of every all-reduce algorithm.

On this CPU's loopback, raw (`parlab.core.explore.loopback`): for world sizes (default 2 and 4)
and message sizes 1 KB .. 64 MB, times the hand-written ring, tree and naive all-reduce and gloo's
own (the fastest repeat of the slowest rank, stalls reported beside), prints algbw and busbw
(nccl-tests' definitions), the ring/gloo busbw ratio at each size, and the α-β fit of each
algorithm on every other size with its error on the sizes left out.

`--paced` instead runs, on paced A100 time (no wall clock), the two-level all-reduce, one flat
ring, one binary tree and NCCL's pipelined double binary tree on `--nodes` × `--per-node` ranks
(NVLink 3 inside a node, HDR InfiniBand between; `parlab.core.explore.two_level_run`), sizes
shapes-only, beside their closed forms (`parlab.core.explore.double_tree_show.bench_rows`).
"""

from __future__ import annotations

import argparse
import csv


def main(argv: list[str]) -> int:
    from parlab.core.explore.loopback import ALGOS, print_fits, sweep

    parser = argparse.ArgumentParser(prog="python -m parlab bench allreduce")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--min-kb", type=int, default=1)
    parser.add_argument("--max-mb", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    parser.add_argument("--csv", default=None, help="write every measurement here")
    parser.add_argument("--plot", default=None, help="save a busbw-vs-size plot here (PNG)")
    parser.add_argument("--paced", action="store_true",
                        help="paced A100 time on nodes × per-node ranks: two-level, flat ring, "
                             "binary tree and double tree, shapes-only, beside their closed forms")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--per-node", type=int, default=4)
    args = parser.parse_args(argv)

    sizes, size = [], args.min_kb * 1024
    while size <= args.max_mb * 1024 * 1024:
        sizes.append(size)
        size *= 4
    if args.paced:
        from parlab.core.explore.double_tree_show import bench_rows

        table = bench_rows(args.nodes, args.per_node, sizes)
        if args.csv:
            with open(args.csv, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(table[0]))
                writer.writeheader()
                writer.writerows(table)
        return 0
    rows = sweep(args.world_sizes, sizes, args.algos, args.repeats,
                 progress=lambda n: print(f"  world size {n} done", flush=True))
    print(f"\n{'N':>2} {'bytes':>10} " + " ".join(f"{a + ' busbw':>13}" for a in args.algos)
          + "   ring/gloo")
    for n in args.world_sizes:
        for nbytes in sizes:
            cells = {r["algo"]: r for r in rows if r["world_size"] == n and r["bytes"] == nbytes}
            line = f"{n:>2} {nbytes:>10,} " + " ".join(
                f"{cells[a]['busbw_GBps']:>10.3f} GB/s"[-13:] for a in args.algos)
            if "ring" in cells and "gloo" in cells:
                line += f"   {cells['ring']['busbw_GBps'] / cells['gloo']['busbw_GBps']:.2f}×"
            print(line)
    print("\nα-β fit (Thakur et al. 2005 forms) on every other size, judged on the rest; a fit "
          "typically off by > 2× there is flagged:")
    if len(sizes) >= 4:
        print_fits(rows, args.world_sizes, args.algos)
    stalls = [f"N={r['world_size']} {r['algo']} {r['bytes']:,} B {r['stalled']:.0%}" for r in rows
              if r["stalled"] >= 0.5]
    if stalls:
        print("repeats stalled > 2× the fastest (a descheduled peer or a delayed ACK on this shared "
              "machine; the fit uses the fastest repeat): " + "; ".join(stalls))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(args.world_sizes), figsize=(6 * len(args.world_sizes), 4),
                                 squeeze=False)
        for ax, n in zip(axes[0], args.world_sizes):
            for algo in args.algos:
                pts = sorted((r["bytes"], r["busbw_GBps"]) for r in rows
                             if r["world_size"] == n and r["algo"] == algo)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=algo)
            ax.set_xscale("log")
            ax.set_xlabel("message bytes")
            ax.set_ylabel("bus bandwidth (GB/s)")
            ax.set_title(f"all-reduce, {n} ranks")
            ax.legend()
        fig.savefig(args.plot, dpi=120, bbox_inches="tight")
    return 0
