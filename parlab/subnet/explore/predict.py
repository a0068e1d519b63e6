"""Notebook 10's predict-then-run cell: the bytes one rank sends per step under subnetwork data
parallelism with forward masking at block level (Singh, Khalid, Oyallon, Belilovsky, "Model
Parallelism With Subnetwork Data Parallelism", 2025): each block's gradient is ring all-reduced
among its k owners only (2(k−1)/k of its elements per rank), the shared parameters among all N —
measured on the ledger of a real `sdp` run of the chapter's GPT.
"""

from __future__ import annotations

import parlab
from parlab.engine.runner import make_config
from parlab.subnet import cost as subnet_cost


def sdp_bytes(prediction=None, world_size: int = 4, owners: int = 2, steps: int = 2,
              clock: str = "A100") -> dict:
    """Run `sdp` (forward masking, block level) and print rank 0's bytes per step from the ledger
    beside the reader's `prediction` and the closed form (`parlab.subnet.cost.step_bytes`)."""
    opts = dict(world_size=world_size, steps=steps, owners=owners, mask="forward", granularity="block")
    result = parlab.run("sdp", clock=clock, **opts)
    measured = result.bytes_per_rank()[0] // steps
    closed = sum(subnet_cost.step_bytes(subnet_cost.ownership_of(make_config("sdp", **opts)),
                                        "forward", 0).values())
    print(f"sdp, N = {world_size}, k = {owners}, forward masking, block level, {steps} steps "
          f"({result.config.clock.label}; bytes do not depend on the clock)")
    print(f"rank 0 sends per step: measured (ledger) {measured:,} B; your prediction: {prediction}; "
          f"closed form {closed:,} B; agree: {measured == closed}")
    return {"measured": measured, "closed_form": closed}
