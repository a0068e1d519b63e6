"""`python -m parlab bench expert_parallel`: step time of `ep` (all-to-all) vs `ep-allgather` vs a
dense model of equal active parameters, on loopback and a link (the real 10GbE by default,
`explore.dense.TIMING_LINK`) in virtual time (`--clock A100`, parlab.core.clock, A100 ms;
`--clock wall` is this CPU, raw), and load balance over training with no balancing, Switch's
auxiliary loss and DeepSeek-V3's bias — measured in one run. The batch (`--batch`, 256 sequences)
puts thousands of tokens on each rank, so that a dispatch message outweighs the link's α·β and
bytes decide (the regime of GShard and Switch).

Dense of equal active parameters: the tiny GPT itself against a gpt-moe whose experts are
h = (8C − E)/(2k) wide, so that router + k experts hold exactly the dense MLP's parameters
(`parlab.expert_parallel.explore.dense`; Shazeer et al. 2017: the MoE adds parameters, not FLOPs).
Each row prints the measured step time beside the α-β prediction (equal compute + the link's cost
of the run's own ledger) and ratios within this run, then the verdict: all-to-all beats all-gather.
"""

from __future__ import annotations

import argparse

import parlab
from parlab.core.progress import progress
from parlab.expert_parallel.explore import dense as ex_dense


def balance(steps: int, world_size: int) -> dict:
    modes = {"none": {"aux_loss": 0.0}, "aux": {"aux_loss": 0.01},
             "bias": {"aux_loss": 0.0, "bias_update": 0.01}}
    out = {}
    for mode, mc in modes.items():
        result = parlab.run("ep", world_size=world_size, model="gpt-moe", steps=steps,
                            model_config=mc)
        logs = result.outputs[0].extras["routing"]
        tail = [s for layer in logs for s in layer[-10:]]
        out[mode] = {"imbalance": sum(max(s["load"]) * len(s["load"]) / sum(s["load"])
                                      for s in tail) / len(tail),
                     "dropped": sum(s["dropped"] for s in tail) / sum(sum(s["load"]) for s in tail),
                     "loss": sum(result.losses[-10:]) / len(result.losses[-10:])}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parlab bench expert_parallel",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--links", nargs="+", default=["loopback", ex_dense.TIMING_LINK])
    parser.add_argument("--clock", default="A100", help="A100, H100, V100 (paced) or wall")
    parser.add_argument("--batch", type=int, default=ex_dense.TIMING_BATCH)
    parser.add_argument("--top-k", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--balance-steps", type=int, default=100)
    args = parser.parse_args(argv)
    for k in args.top_k:
        counts = ex_dense.active_parameters(ex_dense.moe_overrides(k))
        print(f"k={k}: gpt-moe active {counts['moe_active']:,} of {counts['moe_total']:,} "
              f"parameters; dense gpt {counts['dense']:,}")
    print(f"clock {args.clock}, batch {args.batch}")
    print(f"{'N':>2} {'link':<9} {'k':>2} {'ep ms':>13} {'gather ms':>13} {'dense ms':>13} "
          f"{'gather/ep':>9} {'ep/dense':>8} {'ep B/step':>10} {'gather B/step':>13}  "
          "(measured/predicted)")
    for world_size in progress(args.world_sizes, desc="world sizes"):
        links = [link for link in args.links if link != "loopback"] or [ex_dense.TIMING_LINK]
        for k in args.top_k:
            for link in links:  # loopback and this link in one run: ratios comparable
                out = ex_dense.compare(world_size, link, args.steps, k, args.clock,
                                            args.batch)
                for name_link, t in out.items():
                    if name_link == "loopback" and "loopback" not in args.links:
                        continue
                    cell = {n: f"{1e3 * r['seconds']:.3g}/{1e3 * r['predicted']:.3g}"
                            for n, r in t.items()}
                    print(f"{world_size:>2} {name_link:<9} {k:>2} {cell['ep']:>13} "
                          f"{cell['ep-allgather']:>13} {cell['dense']:>13} "
                          f"{t['ep-allgather']['seconds'] / t['ep']['seconds']:>8.2f}× "
                          f"{t['ep']['seconds'] / t['dense']['seconds']:>7.2f}× "
                          f"{t['ep']['bytes']:>10,} {t['ep-allgather']['bytes']:>13,}")
                    for line in ex_dense.diagnose(t, out["loopback"]) \
                            if name_link != "loopback" else []:
                        print("   diagnosis:", line)
                ex_dense.verdict(out, link, world_size, k)
    if args.balance_steps:
        print(f"\nload balance, ep on 1 rank, {args.balance_steps} steps (means of the last 10)")
        for mode, row in balance(args.balance_steps, 1).items():
            print(f"{mode:<5} max/mean load {row['imbalance']:.2f}  dropped "
                  f"{100 * row['dropped']:.1f}%  loss {row['loss']:.4f}")
    return 0
