"""What notebook 09's sharded-server part runs: the parameters cut over k server ranks (Li et al.,
"Scaling Distributed Machine Learning with the Parameter Server", OSDI 2014), exactness against
`single`, and every server's bytes in and out per update (ledger) beside the closed forms of
`parlab.asynchrony.cost`: under BSP server i carries W·(16 + 4Ψ_i) each way per update, so k
servers cut the busiest link by about k *at equal worker count*. On a fixed set of ranks k − 1
workers also become servers (W = N − 1 → N − k): `sharding_effects` separates that role change from
the sharding proper, measured (a one-server run with the sharded run's W) and in closed form.
"""

from __future__ import annotations

import parlab
from parlab.asynchrony import cost


def sharded_table(world_size: int, steps: int = 3, model: str = "gpt") -> dict:
    """ps-sync with k = 1 and k = 2 servers (where a worker is left): match with single, and each
    server's measured bytes per update beside the closed form; then the drop split into its two
    causes (`sharding_effects`). Returns the busiest server's bytes in per update by (k, W), and the
    two factors (None where world_size leaves no worker at k = 2)."""
    ref = parlab.run("single", steps=steps, model=model)
    busiest: dict = {}
    matches: list[bool] = []
    print(f"{'servers':>7} {'workers':>7} {'server':>6} {'in/update':>10} {'formula':>10} "
          f"{'out/update':>10} {'formula':>10}  equal")
    for k in (1, 2):
        if world_size - k < 1:
            print(f"{k:>7} (world_size={world_size} leaves no worker)")
            continue
        run = parlab.run("ps-sync", world_size=world_size, steps=steps, model=model, servers=k)
        numel = sum(v.numel() for v in run.state.values())
        pairs = cost.server_bytes_per_update(numel, world_size - k, "ssp", k)
        pairs = [pairs] if k == 1 else pairs
        into = run.bytes_per_rank("bytes_recv", phase="push")
        out = run.bytes_per_rank(phase="pull")
        for i, (f_in, f_out) in enumerate(pairs):
            m_in, m_out = into[i] // steps, out[i] // steps
            print(f"{k:>7} {world_size - k:>7} {i:>6} {m_in:>10,} {f_in:>10,} {m_out:>10,} {f_out:>10,}  "
                  f"{(m_in, m_out) == (f_in, f_out) and into[i] % steps == 0}")
        busiest[(k, world_size - k)] = max(into[:k]) // steps
        closed = parlab.schemes()["ps-sync"].cost(run.config).bytes_sent
        matches.append(run.compare(ref).match)
        print(f"{'':>7} ps-sync with servers={k} vs single: match: {matches[-1]}; every rank's "
              f"bytes = closed form: {run.bytes_per_rank() == closed}")
    effects = sharding_effects(world_size, busiest, steps, model) if (2, world_size - 2) in busiest else None
    return {"busiest": busiest, "effects": effects, "match": all(matches)}


def sharding_effects(world_size: int, busiest: dict, steps: int = 3, model: str = "gpt") -> dict:
    """The busiest server's drop from 1 to 2 servers on `world_size` ranks, split: one server with
    the sharded run's W (measured: one rank fewer) isolates the role change from the sharding."""
    w1, w2 = world_size - 1, world_size - 2
    run = parlab.run("ps-sync", world_size=world_size - 1, steps=steps, model=model)  # 1 server, W = w2
    busiest[(1, w2)] = run.bytes_per_rank("bytes_recv", phase="push")[0] // steps
    before, equal, after = busiest[(1, w1)], busiest[(1, w2)], busiest[(2, w2)]
    numel = sum(v.numel() for v in run.state.values())
    closed = cost.sharding_effects(numel, world_size, 2)
    print(f"busiest server's bytes in per update (ledger): 1 server, W={w1}: {before:,}; 1 server, W={w2}: "
          f"{equal:,}; 2 servers, W={w2}: {after:,}")
    role, shard = before / equal, equal / after
    same = (before, equal, after) == (closed["one server"], closed["one server, same W"], closed["sharded"])
    print(f"the {before / after:.2f}× drop = {role:.2f}× from the role change (a worker became a server: "
          f"W {w1}→{w2}) × {shard:.2f}× from sharding at equal W; closed form (cost.sharding_effects) "
          f"agrees: {same}")
    verdict = ("sharding, not the role change, is most of the drop" if shard > role else
               "the role change is as large as the sharding: at this W, counting workers matters")
    print(f"verdict: {verdict}")
    return {"role": role, "shard": shard, "total": before / after}
