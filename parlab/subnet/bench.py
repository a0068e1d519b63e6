"""`python -m parlab bench subnet`: Subnetwork Data Parallelism against DDP, measured in one run
(Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data Parallelism", 2025).

For every world size, owner count k and (mask, granularity): model states of the largest rank over
DDP's 16Ψ (measured, checked against the formula), bytes sent per step over ddp-naive's (checked
against the closed form), and the step time on an emulated link over ddp-naive's — each ratio taken
between runs of the same round-robin (`--repeats` rounds, medians), so the shared machine's noise
falls on both. Then the full model's loss after `--curve-steps` steps and the mean cos(ĝ, g), from
the one-process emulation (`parlab.subnet.emulate`), beside DDP's loss.
"""

from __future__ import annotations

import argparse
import statistics

from parlab.core.progress import progress

CONFIGS = [("forward", "block"), ("forward", "neuron"), ("backward", "block"), ("backward", "neuron")]


def measure(world_size: int, args) -> list[dict]:
    import parlab
    from parlab.subnet.explore import bytes_row, memory_row

    configs = [c for c in CONFIGS if args.model == "gpt" or c[1] == "block"]
    plan = [("ddp-naive", None, None, None)] + [("sdp", k, m, g) for k in range(1, world_size + 1)
                                                for m, g in configs if k < world_size]
    samples: dict = {}
    rows: dict = {}
    for _ in range(args.repeats):
        for scheme, k, mask, granularity in plan:
            options = {} if scheme == "ddp-naive" else dict(owners=k, mask=mask,
                                                            granularity=granularity)
            result = parlab.run(scheme, world_size=world_size, model=args.model,
                                steps=args.steps + 1, link=args.link, **options)
            key = (scheme, k, mask, granularity)
            samples.setdefault(key, []).append(1e3 * result.step_time(warmup=1))
            if k is not None and key not in rows:  # an sdp row (owners k)
                row = memory_row(result)
                row.update(bytes_row(result))
                rows[key] = row
    ddp_ms = statistics.median(samples[plan[0]])
    out = []
    for key, row in rows.items():
        row["step_ms"] = statistics.median(samples[key])
        row["time_vs_ddp"] = row["step_ms"] / ddp_ms
        row["ddp_ms"] = ddp_ms
        out.append(row)
    return out


def print_table(rows: list[dict], link: str) -> None:
    print(f"{'N':>2s} {'k':>2s} {'mask':8s} {'level':6s} {'states B':>9s} {'/DDP':>6s} "
          f"{'=formula':>8s} {'B/step':>8s} {'/DDP':>6s} {'=closed':>7s} {'ms ' + link:>10s} {'/DDP':>6s}")
    for r in rows:
        print(f"{r['N']:>2d} {r['k']:>2d} {r['mask']:8s} {r['granularity']:6s} {r['states']:>9,} "
              f"{r['states'] / r['ddp']:>6.3f} {str(r['match']):>8s} {r['sent_per_step']:>8,} "
              f"{r['vs_ddp']:>6.3f} {str(r['exact']):>7s} {r['step_ms']:>10.1f} "
              f"{r['time_vs_ddp']:>6.2f}")


def print_curves(world_size: int, args) -> None:
    from parlab.subnet.explore import curve_summary, curves

    configs = [c for c in CONFIGS if args.model == "gpt" or c[1] == "block"]
    summary = curve_summary(curves(world_size, 1, args.curve_steps, args.model, configs))
    print(f"full model's loss, mean of the last 5 of {args.curve_steps} steps, k=1 of N={world_size}:")
    for r in summary.itertuples():
        print(f"  {r.mask:8s} {r.granularity:6s} loss {r.loss:.4f} vs DDP {r.ddp_loss:.4f} "
              f"({100 * r.loss_gap:+.1f}%), mean cos(ĝ, g) {r.cos_whole:.3f} (owned units' own "
              f"{r.cos_owned_units:.3f}, shared {r.cos_shared:.3f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench subnet", description=__doc__)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--steps", type=int, default=3, help="measured steps (after 1 warm-up)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--model", default="gpt", choices=["gpt", "mlp"])
    parser.add_argument("--link", default="1GbE", help="emulated link preset (or 'none')")
    parser.add_argument("--curve-steps", type=int, default=30)
    args = parser.parse_args(argv)
    args.link = None if args.link == "none" else args.link
    for n in progress(args.world_sizes, desc="world sizes"):
        print_table(measure(n, args), args.link or "loopback")
        print_curves(n, args)
        print()
    return 0
