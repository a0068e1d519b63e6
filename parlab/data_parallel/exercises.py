"""Chapter 01's exercises (`parlab.exercises`): GPU-scale worked problems (ring bytes, the
communication-to-compute ratio, where they balance) and runs on this machine (buckets, DeAR's
bytes, gradient accumulation); each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.data_parallel import cost as dp_cost
from parlab.data_parallel.bucket_packing import plan_buckets
from parlab.data_parallel.explore.measure import param_numels
from parlab.exercises import Exercise, find, numeric


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    psi, n, tokens, flops, beta = 1.3e9, 64, 2048, 150e12, 12.5e9
    grad_bytes = 2 * (n - 1) / n * psi * 4
    compute = 6 * psi * tokens / flops
    return {"dp-bytes-gpu": grad_bytes,
            "dp-ratio-gpu": grad_bytes / beta / compute,
            "dp-balance-tokens": 2 * (n - 1) / n * 4 * flops / (6 * beta),
            "bucket-count": len(plan_buckets(param_numels(), 0.02)),
            "dear-bytes": sum(dp_cost.bytes_per_step("dear", param_numels(), 3, 0,
                                                     bucket_mb=0.05).values()),
            "accum-largest": 3}


def exercises() -> list:
    """Chapter 01's exercises (parlab.exercises): check says right or wrong, never the answer."""
    a = answers()
    return [
        Exercise("dp-bytes-gpu", "Data parallelism on 64 GPUs, a 1.3B-parameter model, fp32 "
                 "gradients, ring all-reduce: how many bytes does each GPU send per step?",
                 numeric(a["dp-bytes-gpu"], rtol=0.02),
                 "2(N−1)/N · Ψ · 4 bytes.", "2·63/64 · 1.3e9 · 4 B ≈ 10.2 GB."),
        Exercise("dp-ratio-gpu", "Same run, 2,048 tokens per GPU per step, A100s at 150 TFLOP/s, "
                 "100 Gb/s InfiniBand (12.5 GB/s), latency ignored: communication time ÷ compute time?",
                 numeric(a["dp-ratio-gpu"], rtol=0.05),
                 "Compute is 6·Ψ·tokens FLOPs (forward 2, backward 4 per parameter and token).",
                 "10.2 GB / 12.5 GB/s = 0.82 s against 6·1.3e9·2048 / 150e12 = 0.107 s: ≈ 7.7. "
                 "No overlap can hide that; only more tokens per GPU (or fewer bytes) can."),
        Exercise("dp-balance-tokens", "How many tokens per GPU make that run's communication equal "
                 "its compute?", numeric(a["dp-balance-tokens"], rtol=0.05),
                 "Write the ratio with Ψ in both: it cancels.",
                 "2(N−1)/N·4·F/(6·β) = 2·63/64·4·150e12/(6·12.5e9) ≈ 15,750 tokens: the ratio is "
                 "independent of the model size."),
        Exercise("bucket-count", "How many buckets does bucket_mb=0.02 give for this chapter's "
                 "default GPT? (ex.param_numels() has the sizes.)", numeric(a["bucket-count"], rtol=0),
                 "Pack from the last parameter; close a bucket before it would exceed the cap; a "
                 "tensor larger than the cap is a bucket alone.",
                 "Run parlab.data_parallel.bucket_packing.plan_buckets(ex.param_numels(), 0.02) and count."),
        Exercise("dear-bytes", "How many bytes does rank 0 send per step in dear at N=3 (default "
                 "bucket_mb=0.05)?", numeric(a["dear-bytes"], rtol=0),
                 "Buckets are padded to a multiple of N; reduce-scatter and all-gather each send "
                 "(N−1)/N of a padded bucket.",
                 "sum over buckets of 2·(N−1)/N·padded(bucket, 3)·4 B: "
                 "dp_cost.bytes_per_step('dear', ex.param_numels(), 3)."),
        Exercise("accum-largest", "With the global batch of 12 at world_size=4, what is the largest "
                 "valid accum_steps?", numeric(a["accum-largest"], rtol=0),
                 "12 rows must split into N × accum_steps equal micro-batches.",
                 "12 / 4 = 3 rows per rank: accum_steps ∈ {1, 3}; the largest is 3."),
    ]


def exercise(name: str):
    return find(exercises(), name)
