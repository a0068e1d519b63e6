"""Notebook 08's predict-then-run cell: PowerSGD's bytes per step on §7's original deep linear
network (Kwon et al., AISTATS 2024), measured by one run of the `lowdim` scheme with
`powersgd_rank` at the exercise's setting (`exercises.PREDICT`), beside the reader's prediction and
the closed form 2(N−1)/N·4·L·(d + d)·r (Vogels et al. 2019: P and Q, each all-reduced).
"""

from __future__ import annotations

import parlab
from parlab.compression.exercises import PREDICT
from parlab.compression.explore.lowdim import LR


def powersgd_bytes(predicted=None) -> float:
    """Run `lowdim` (original network, PowerSGD rank r) for one step; print rank 0's bytes from
    the ledger, the closed form and the reader's `predicted`."""
    n, d, depth, r = (PREDICT[k] for k in ("world_size", "d", "depth", "rank"))
    run = parlab.run("lowdim", world_size=n, steps=1, network="original", powersgd_rank=r, d=d,
                     depth=depth, optimizer="sgd", lr=LR)
    measured = run.bytes_per_rank()[0]
    formula = 2 * (n - 1) / n * 4 * depth * (d + d) * r
    print(f"PowerSGD r = {r} on the original network (L = {depth}, d = {d}) over N = {n} ranks, "
          f"one step: rank 0 sent {measured:,} B (ledger); closed form 2(N−1)/N·4·L·(d+d)·r = "
          f"{formula:,.0f} B; your answer: {predicted if predicted is not None else '(none yet)'}")
    print("the ledger equals the closed form: " + ("holds" if measured == formula else
                                                    "does NOT hold"))
    return measured
