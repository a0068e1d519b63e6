"""What notebooks/02_zero.ipynb runs of HSDP at this machine's size (`torch-hsdp`, FSDP2 over a
(replicate, shard) mesh; Zhao et al., VLDB 2023, §3.2.2): the same training as one process, each
rank's model states 16Ψ/G (fp32 with Adam, G ranks per shard group, whatever the replicas), and
the ledger's nominal bytes beside `parlab.zero.cost.hsdp_step_bytes`.
"""

from __future__ import annotations

import parlab
from parlab.zero.cost import hsdp_step_bytes


def hsdp_small(reference, world_size: int = 4, shard: int = 2, steps: int = 2) -> dict:
    """Run torch-hsdp and torch-fsdp (one shard group of N) at `world_size`; print exactness,
    states per rank against 16Ψ/G and 16Ψ/N, and bytes per rank per step against the closed form."""
    psi = sum(t.numel() for t in reference.state.values())
    out = {}
    for name, group, options in (("HSDP", shard, {"shard": shard}), ("FSDP", world_size, {})):
        run = parlab.run("torch-hsdp", world_size=world_size, steps=steps, **options)
        states = max(m["params"] + m["grads"] + m["optimizer"] for m in run.memory)
        sent = max(run.bytes_per_rank()) / steps
        formula = max(hsdp_step_bytes(psi, world_size, group, r) for r in range(world_size))
        match = run.compare(reference).match
        print(f"{name} (N = {world_size}, shard groups of {group}): match single: {match}; states "
              f"per rank {states:,} B against 16Ψ/{group} = {16 * psi / group:,.0f} B "
              f"(equal: {states == 16 * psi / group}); sends {sent:,.0f} B per step, closed form "
              f"{formula:,} B (equal: {sent == formula})")
        out[name] = {"match": match, "states": states, "sent": sent}
    h, f = out["HSDP"], out["FSDP"]
    print(f"HSDP holds {h['states'] / f['states']:.2f}× FSDP's states per rank and sends "
          f"{h['sent'] / f['sent']:.2f}× its bytes; of HSDP's, only the all-reduce of each rank's "
          f"Ψ/{shard} shard crosses between shard groups (across nodes on a cluster)")
    return out
