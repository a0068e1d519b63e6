"""`python -m parlab bench memory`: per-rank memory and step time of DDP, ZeRO-1/2/3 and PyTorch's
ZeroRedundancyOptimizer and FSDP2, side by side (Rajbhandari et al., ZeRO, SC 2020; Zhao et al.,
PyTorch FSDP, VLDB 2023).

Memory is measured from the tensors each rank holds (largest rank shown), beside the ZeRO paper's
formula for fp32 + Adam. Step time is the median, over the steps after one warm-up step and over
`--repeats` interleaved rounds, of the gap between consecutive forward starts on the slowest rank.
Every ratio (to DDP, ours to PyTorch's) is taken between runs of the same round-robin, so the
shared machine's noise falls on all alike; it is still noise-prone on 2 shared cores.

`--precision`: instead, mixed precision (`parlab.zero.explore.precision`): model states per rank
in fp32 and bf16-mixed beside the ZeRO paper's formulas, bytes sent per step, and the tiny GPT
trained `--curve-steps` steps in fp32, bf16-mixed and fp16-mixed: how close the loss curves are,
the step-time ratio, the steps fp16 skipped on overflow.
"""

from __future__ import annotations

import argparse
import json
import statistics

from parlab.core.progress import progress

SCHEMES = ["ddp-naive", "zero1", "zero2", "zero3", "zero3+ckpt", "torch-zero", "torch-fsdp"]
PAIRS = [("zero1", "torch-zero"), ("zero3", "torch-fsdp")]


def measure(world_size: int, args) -> list[dict]:
    import parlab
    from parlab.zero.explore import memory_row

    model_config = json.loads(args.model_config) if args.model_config else None
    rows: dict = {}
    for _ in range(args.repeats):
        for name in SCHEMES:
            scheme, _, ckpt = name.partition("+")
            result = parlab.run(scheme, world_size=world_size, model=args.model,
                                steps=args.steps + 2, model_config=model_config,
                                checkpoint=bool(ckpt))
            row = memory_row(result, warmup=1)
            row["scheme"] = name
            if name in rows:
                rows[name]["step_samples"].append(row["step_ms"])
            else:
                rows[name] = {**row, "step_samples": [row["step_ms"]]}
    for row in rows.values():
        row["step_ms"] = statistics.median(row["step_samples"])
    ddp = rows["ddp-naive"]
    for row in rows.values():
        row["states_vs_ddp"] = row["states"] / ddp["states"]
        row["time_vs_ddp"] = row["step_ms"] / ddp["step_ms"]
    return list(rows.values())


def print_table(rows: list[dict]) -> None:
    head = (f"{'scheme':12s} {'N':>2s} {'params':>9s} {'grads':>9s} {'optim':>9s} {'activ':>9s} "
            f"{'states':>9s} {'/formula':>8s} {'/DDP':>6s} {'step ms':>8s} {'/DDP':>6s}")
    print(head)
    for r in rows:
        print(f"{r['scheme']:12s} {r['world_size']:>2d} {r['params']:>9,} {r['grads']:>9,} "
              f"{r['optimizer']:>9,} {r['activations']:>9,} {r['states']:>9,} "
              f"{r['vs_formula']:>8.3f} {r['states_vs_ddp']:>6.3f} {r['step_ms']:>8.1f} "
              f"{r['time_vs_ddp']:>6.2f}")
    by = {r["scheme"]: r for r in rows}
    for ours, theirs in PAIRS:
        a, b = by[ours], by[theirs]
        print(f"  {ours} / {theirs}: model states {a['states'] / b['states']:.3f}, step time "
              f"{a['step_ms'] / b['step_ms']:.2f}")
    a, b = by["zero3+ckpt"], by["zero3"]
    print(f"  activation checkpointing (zero3): activations {a['activations'] / b['activations']:.3f}"
          f"×, step time {a['step_ms'] / b['step_ms']:.2f}×")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench memory", description=__doc__)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=4, help="measured steps (after 1 warm-up)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--model", default="gpt", choices=["gpt", "mlp"])
    parser.add_argument("--model-config", default='{"n_embd": 64, "n_head": 4, "n_layer": 4}',
                        help="JSON overrides of the model config")
    parser.add_argument("--json", default=None, help="save the raw rows here")
    parser.add_argument("--precision", action="store_true",
                        help="mixed precision: memory in both precisions, loss curves, step time")
    parser.add_argument("--curve-steps", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the loss curves")
    args = parser.parse_args(argv)
    if args.precision:
        return precision_main(args)
    rows = []
    for n in progress(args.world_sizes, desc="world sizes"):
        measured = measure(n, args)
        print_table(measured)
        print()
        rows += measured
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def precision_main(args) -> int:
    from parlab.zero.explore import precision as ep

    model_config = json.loads(args.model_config) if args.model_config else None
    out = {}
    for n in args.world_sizes:
        rows = ep.precision_memory(world_size=n, model=args.model, model_config=model_config)
        ep.print_precision_memory(rows)
        print()
        out[f"memory_{n}"] = rows
    curves = ep.precision_curves(steps=args.curve_steps, seeds=range(args.seeds))  # tiny GPT
    for line in ep.curve_summary(curves):
        print(line)
    out["curves"] = curves
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0
