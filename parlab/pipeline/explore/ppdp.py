"""PP × DP: a pipeline replicated over data parallelism (Narayanan et al., SC 2021, §2.1: the
pipeline's stages replicated dp ways, each replica a 1/dp share of the batch). After the pipeline's
step each rank all-reduces only its own stage's gradients over its dp group: a ring moves
2(dp−1)/dp of them per rank (Thakur et al., IJHPCA 2005), so pipelining divides what each rank
syncs by about p against plain data parallelism of the whole model.
"""

from __future__ import annotations

import parlab


def pp_dp_sync(world_size: int = 4, pp: int = 2, microbatches: int = 2, steps: int = 2,
               clock: str = "A100", link: str = "NVLink") -> dict:
    """Run pp-1f1b at dp = world_size / pp; print each rank's gradient-sync bytes per step (ledger,
    phase "grad-sync") beside the ring's closed form over its stage's parameters, and beside what a
    dp-only all-reduce of the whole model would move per rank."""
    r = parlab.run("pp-1f1b", world_size=world_size, pp=pp, microbatches=microbatches,
                   steps=steps, clock=clock, link=link)
    dp = world_size // pp
    whole = sum(r.state[name].numel() for name in r.state)  # the model's parameters (tie once)
    per_rank = r.bytes_per_rank(phase="grad-sync")
    rows, ok = [], True
    print(f"pp-1f1b, pp={pp} × dp={dp} on {world_size} ranks, {r.clock.label} over {link}: "
          "gradient sync per step")
    for rank, out in enumerate(r.outputs):
        numel = sum(out.extras["param_numels"])
        closed = 2 * (dp - 1) / dp * numel * 4  # ring all-reduce: 2(dp−1)/dp × fp32 gradients
        measured = per_rank[rank] / steps
        ok &= abs(measured - closed) <= 0.01 * closed
        rows.append({"rank": rank, "stages": out.extras["stages"], "measured": measured,
                     "closed": closed})
        print(f"  rank {rank} (stage {out.extras['stages']}): {measured:>10,.0f} B measured, "
              f"{closed:>10,.0f} B closed form 2(dp−1)/dp × {numel:,} × 4 B")
    dp_only = 2 * (world_size - 1) / world_size * whole * 4
    most = max(row["measured"] for row in rows)
    print(f"closed form within 1% on every rank: {'holds' if ok else 'DOES NOT HOLD'}; the busiest "
          f"rank syncs {most:,.0f} B where data parallelism of the whole model over {world_size} "
          f"ranks would move {dp_only:,.0f} B per rank ({dp_only / most:.2f}×)")
    return {"rows": rows, "holds": ok, "dp_only": dp_only, "result": r}
