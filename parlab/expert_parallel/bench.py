"""`python -m parlab bench expert_parallel`: step time of `ep` (all-to-all) vs `ep-allgather` vs a
dense model of equal active parameters, on loopback and an emulated link, and load balance over
training with no balancing, Switch's auxiliary loss and DeepSeek-V3's bias — measured in one run.

Dense of equal active parameters: gpt-moe with one expert of width k·hidden, no capacity, trained
data parallel (`ep` at ep=1) — the same FLOPs per token as the MoE's k experts (Shazeer et al.
2017: the MoE adds parameters, not FLOPs). Each row prints ratios within this run: the machine is
shared and noisy, compare within a run only.
"""

from __future__ import annotations

import argparse

import parlab


def dense_equivalent(overrides: dict | None = None) -> dict:
    """Model overrides of a dense gpt-moe with the active parameters of `overrides`' MoE."""
    m = parlab.models.model_config("gpt-moe", overrides)
    return {"n_experts": 1, "top_k": 1, "capacity_factor": None, "aux_loss": 0.0,
            "expert_hidden": m.top_k * m.hidden, "shared_expert": m.shared_expert,
            "moe_every": m.moe_every}


def step_times(world_size: int, link: str, steps: int, top_k: int) -> dict:
    link_arg = None if link == "loopback" else link
    overrides = {"top_k": top_k, "n_experts": max(4, world_size)}
    runs = {"ep": ("ep", overrides, {}), "ep-allgather": ("ep-allgather", overrides, {}),
            "dense": ("ep", dense_equivalent(overrides), {"ep": 1})}
    out = {}
    for name, (scheme, mc, options) in runs.items():
        result = parlab.run(scheme, world_size=world_size, model="gpt-moe", steps=steps,
                            model_config=mc, link=link_arg, **options)
        out[name] = {"ms": 1e3 * result.step_time(), "bytes": result.bytes_per_rank()[0] // steps}
    return out


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
    parser.add_argument("--links", nargs="+", default=["loopback", "1GbE"])
    parser.add_argument("--top-k", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--balance-steps", type=int, default=100)
    args = parser.parse_args(argv)
    print(f"{'N':>2} {'link':<9} {'k':>2} {'ep ms':>7} {'gather ms':>9} {'dense ms':>8} "
          f"{'gather/ep':>9} {'ep/dense':>8} {'ep B/step':>10} {'gather B/step':>13}")
    for world_size in args.world_sizes:
        for link in args.links:
            for k in args.top_k:
                t = step_times(world_size, link, args.steps, k)
                print(f"{world_size:>2} {link:<9} {k:>2} {t['ep']['ms']:>7.1f} "
                      f"{t['ep-allgather']['ms']:>9.1f} {t['dense']['ms']:>8.1f} "
                      f"{t['ep-allgather']['ms'] / t['ep']['ms']:>8.2f}× "
                      f"{t['ep']['ms'] / t['dense']['ms']:>7.2f}× {t['ep']['bytes']:>10,} "
                      f"{t['ep-allgather']['bytes']:>13,}")
    if args.balance_steps:
        print(f"\nload balance, ep on 1 rank, {args.balance_steps} steps (means of the last 10)")
        for mode, row in balance(args.balance_steps, 1).items():
            print(f"{mode:<5} max/mean load {row['imbalance']:.2f}  dropped "
                  f"{100 * row['dropped']:.1f}%  loss {row['loss']:.4f}")
    return 0
