"""Chapter 01's predict-then-run: the reader predicts how many all-reduce messages `ddp-bucketed`
sends per step (`parlab.data_parallel.bucket_packing.plan_buckets`: DDP's reverse-order packing,
Li et al., "PyTorch Distributed", VLDB 2020), then this runs it and counts them in the ledger.
"""

from __future__ import annotations


def count_messages(prediction, world_size: int = 2, bucket_mb: float = 0.02, steps: int = 2) -> int:
    """Run ddp-bucketed at `bucket_mb` on the chapter's default GPT; print rank 0's all-reduce
    messages per step (from the ledger) beside the reader's `prediction` and the packing's count."""
    import parlab
    from parlab.data_parallel.bucket_packing import plan_buckets
    from parlab.data_parallel.explore.measure import param_numels

    run = parlab.run("ddp-bucketed", world_size=world_size, steps=steps, bucket_mb=bucket_mb)
    sent = [r for r in run.ledger if r["rank"] == 0 and r["op"] == "all_reduce"
            and r.get("phase") not in ("start", "end")]
    measured = len(sent) // steps
    planned = len(plan_buckets(param_numels(), bucket_mb))
    print(f"ddp-bucketed, bucket_mb={bucket_mb}, {world_size} ranks (this CPU; the count does not "
          f"depend on a clock): rank 0 sent {measured} all-reduce messages per step (ledger); "
          f"plan_buckets packs {planned} buckets; your answer: {prediction}")
    print("the ledger and the packing agree" if measured == planned
          else "the ledger and the packing DISAGREE")
    return measured
