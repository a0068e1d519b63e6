"""Notebook 11's predict-then-run cell: the reader predicts the bytes a slow rank sends in
`hetero-dp` with the LP's shares (Zhang et al., "HAP", EuroSys 2024), then this runs it and
prints the ledger beside the reader's prediction and the closed form 2(N−1)/N·Ψ·4 (a ring
all-reduce of the gradient: its bytes follow the model, never the rows).
"""

from __future__ import annotations

import parlab
from parlab.heterogeneous import cost


def slow_rank_bytes(prediction, world_size: int = 4, clock: str = "A100", batch_size: int = 12) -> dict:
    """Run `hetero-dp` one step on `world_size` ranks, the last at a quarter of the others' speed,
    LP shares with f priced on `clock`; print each rank's rows and ledger bytes, the closed form and
    `prediction` beside them. Returns {"rows", "bytes", "closed_form"}."""
    from parlab.heterogeneous.explore import fixed_rows_for

    speeds = [1.0] * (world_size - 1) + [0.25]
    f = fixed_rows_for(world_size, clock, batch_size)
    result = parlab.run("hetero-dp", world_size=world_size, steps=1, speeds=speeds, shard="lp",
                        batch_size=batch_size, fixed_rows=f, clock=clock)
    rows = result.outputs[0].extras["rows"]
    sent = result.bytes_per_rank()  # one step: each rank's bytes in the gradient's ring all-reduce
    numel = sum(p.numel() for p in result.state.values())
    closed = [cost.grad_sync_bytes(numel, world_size, r) for r in range(world_size)]
    slow = world_size - 1
    print(f"hetero-dp, {world_size} ranks at speeds {speeds}, LP shares with f = {f:.1f} rows "
          f"({result.config.clock.label}): rows {rows}")
    print(f"bytes sent in the step (ledger): {sent}")
    print(f"closed form 2(N−1)/N·Ψ·4, Ψ = {numel:,}: {closed}")
    verdict = "equal" if sent == closed else "NOT equal"
    print(f"rank {slow} ({rows[slow]} rows): ledger {sent[slow]:,} B, closed form {closed[slow]:,} B "
          f"({verdict}); your prediction: "
          + ("none yet" if not isinstance(prediction, (int, float)) else f"{prediction:,} B — "
             + ("right" if prediction == closed[slow] else "off: the all-reduce moves the gradient, "
                "whose size does not depend on the rows")))
    return {"rows": rows, "bytes": sent, "closed_form": closed}
