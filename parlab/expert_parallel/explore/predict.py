"""Notebook 07's predict-then-run cell: the all-gather method's forward bytes over the
all-to-all's, measured by two runs of this chapter's schemes (`ep`, `ep-allgather`) at the
exercise's setting (`exercises.PREDICT`), beside the reader's prediction and the closed form
ep·(2C+3k)/(2kC) (this chapter's section 2; GShard, Lepikhin et al. 2021, for the all-to-all).
"""

from __future__ import annotations

import parlab
from parlab.expert_parallel.exercises import PREDICT

# each scheme run, with the ledger phases of its forward exchange (data: the two runs, in order)
FORWARD = (("ep", ("dispatch", "combine")), ("ep-allgather", ("gather", "routing", "scatter")))


def gather_ratio(predicted=None) -> float:
    """Run `ep` and `ep-allgather` (one step, even routing, no capacity) on ep ranks; print rank
    0's forward bytes of each from the ledger, their ratio, the closed form and the reader's `predicted`."""
    ep, C, k = PREDICT["ep"], PREDICT["n_embd"], PREDICT["top_k"]
    config = {"n_embd": C, "top_k": k, "routing": "even", "capacity_factor": None}
    sent = {}
    for scheme, phases in FORWARD:
        run = parlab.run(scheme, world_size=ep, steps=1, model="gpt-moe", model_config=config)
        sent[scheme] = sum(run.bytes_per_rank(phase=p)[0] for p in phases)
        assert all(run.bytes_per_rank(phase=p)[0] for p in phases), (scheme, "a phase sent nothing")
    measured = sent["ep-allgather"] / sent["ep"]
    formula = ep * (2 * C + 3 * k) / (2 * k * C)
    print(f"rank 0's forward bytes (ledger, one step, ep = {ep}, C = {C}, k = {k}): all-to-all "
          f"{sent['ep']:,} B (dispatch + combine), all-gather {sent['ep-allgather']:,} B "
          f"({' + '.join(dict(FORWARD)['ep-allgather'])})")
    print(f"measured ratio {measured:.4f}; closed form ep·(2C+3k)/(2kC) = {formula:.4f}; "
          f"your answer: {predicted if predicted is not None else '(none yet)'}")
    agree = abs(measured - formula) <= 1e-9 * formula
    print("the ledger equals the closed form: " + ("holds" if agree else "does NOT hold"))
    return measured
