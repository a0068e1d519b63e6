"""`python -m parlab bench compression`: loss, bytes and step time of every compressor against
`ddp-bucketed`, measured in one run on an emulated link.

The issue's goal (Vogels et al., PowerSGD, 2019): PowerSGD rank 4 reaches `ddp-bucketed`'s loss at
step 50 within 5% while sending ≥ 5× fewer bytes, and steps ≥ 2× faster where communication
dominates (emulated 1GbE, world size 4). Each row: bytes rank 0 sent per step (ledger) and that
÷ ddp-bucketed's, the final loss ÷ ddp-bucketed's, the median step time and the speedup.
"""

from __future__ import annotations

import argparse
import json

import parlab
from parlab.core.progress import progress
from parlab.engine.registry import get_scheme

SCHEMES = ["ddp-bucketed", "topk", "randomk", "qsgd", "signsgd", "powersgd", "torch-powersgd",
           "local-sgd", "diloco"]  # torch-powersgd: PyTorch's hook, its gloo not link-delayed


def measure(world_size: int, link: str, steps: int, schemes: list[str]) -> list[dict]:
    rows = []
    for scheme in progress(schemes, desc=f"compression ×{world_size} {link}"):
        result = parlab.run(scheme, world_size=world_size, steps=steps,
                            link=None if link == "loopback" else link)
        times = sorted(result.step_times[1:] or result.step_times)
        rows.append({"scheme": scheme, "world_size": world_size, "link": link,
                     "bytes_per_step": result.bytes_per_rank()[0] / steps,
                     "final_loss": result.losses[-1], "step_ms": 1e3 * times[len(times) // 2]})
    base = rows[0]
    for row in rows:
        row["bytes_ratio"] = base["bytes_per_step"] / max(row["bytes_per_step"], 1e-9)
        row["loss_ratio"] = row["final_loss"] / base["final_loss"]
        row["speedup"] = base["step_ms"] / row["step_ms"]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench compression", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--link", default="1GbE")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--schemes", nargs="+", default=SCHEMES, help="the first is the baseline")
    parser.add_argument("--json", default=None, help="save the rows here")
    args = parser.parse_args(argv)
    rows = measure(args.world_size, args.link, args.steps, args.schemes)
    print(f"N={args.world_size}, {args.link}, {args.steps} steps; baseline {args.schemes[0]}")
    print(f"{'scheme':<13} {'bytes/step':>11} {'fewer':>7} {'loss':>8} {'loss/base':>9} "
          f"{'step ms':>8} {'speedup':>8}")
    for r in rows:
        print(f"{r['scheme']:<13} {r['bytes_per_step']:>11,.0f} {r['bytes_ratio']:>6.1f}× "
              f"{r['final_loss']:>8.4f} {r['loss_ratio']:>9.3f} {r['step_ms']:>8.1f} {r['speedup']:>7.2f}×")
    print("median step after the first; the machine is shared and noisy — compare within a run")
    for scheme in args.schemes:
        if get_scheme(scheme).torch_collectives and args.link != "loopback":
            print(f"{scheme}'s gloo all-reduces are PyTorch's: {args.link} does not delay them "
                  "(nominal bytes); compare its step time on loopback")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0
