"""Chapter 01's exercises (`parlab.exercises`): GPU-scale worked problems (ring bytes, the
communication-to-compute ratio with each bucket's latency), DeAR's bytes on the chapter's GPT, two
design problems at GPU scale (WFBP's exposed communication as lost step time on 8 H100s; the tokens
per GPU at which WFBP hides it all: Zhang et al., Poseidon, USENIX ATC 2017) and one
predict-then-run (ddp-bucketed's messages, counted from a run's ledger); each check says right or
wrong, never the answer.
"""

from __future__ import annotations

from parlab.data_parallel import cost as dp_cost
from parlab.data_parallel.bucket_packing import plan_buckets
from parlab.data_parallel.explore.measure import param_numels
from parlab.exercises import Exercise, find, numeric

PREDICT_BUCKET_MB = 0.02  # the predict-then-run exercise's bucket cap (MiB)


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    psi, n, tokens, flops, beta, alpha, bucket = 1.3e9, 64, 2048, 150e12, 12.5e9, 5e-6, 25e6
    grad_bytes = 2 * (n - 1) / n * psi * 4
    compute = 6 * psi * tokens / flops
    latency = psi * 4 / bucket * 2 * (n - 1) * alpha  # 208 buckets × 2(N−1) rounds × α
    # 8 H100s (400 TFLOP/s sustained), NVLink 4 (450 GB/s), gpt2-xl 1.56e9 fp32 gradients, 1,024
    # tokens per GPU; WFBP hides communication behind backward only: exposed = max(0, ring − bwd)
    h_psi, h_n, h_t, h_f, h_b = 1.56e9, 8, 1024, 400e12, 450e9
    ring = 2 * (h_n - 1) / h_n * h_psi * 4 / h_b
    fwd, bwd = 2 * h_psi * h_t / h_f, 4 * h_psi * h_t / h_f
    exposed = max(0.0, ring - bwd)
    return {"dp-bytes-gpu": grad_bytes / 4,  # accumulation over 4 micro-batches: one all-reduce
            "dp-ratio-gpu": (grad_bytes / beta + latency) / compute,
            "dear-bytes": sum(dp_cost.bytes_per_step("dear", param_numels(), 3, 0,
                                                     bucket_mb=0.05).values()),
            "bucket-messages": len(plan_buckets(param_numels(), PREDICT_BUCKET_MB)),
            "wfbp-exposed-share": exposed / (fwd + bwd + exposed),
            # 4Ψt/F = 2(N−1)/N·4Ψ/β  ⇒  t = 2(N−1)/N·F/β (Ψ cancels)
            "wfbp-hide-tokens": 2 * (h_n - 1) / h_n * h_f / h_b}


def exercises() -> list:
    """Chapter 01's exercises (parlab.exercises): check says right or wrong, never the answer."""
    a = answers()
    return [
        Exercise("dp-bytes-gpu", "Data parallelism on 64 GPUs, a 1.3B-parameter model, fp32 "
                 "gradients, ring all-reduce, gradient accumulation over 4 micro-batches per step "
                 "(no_sync on all but the last): how many bytes does each GPU send per "
                 "micro-batch, on average over the step?",
                 numeric(a["dp-bytes-gpu"], rtol=0.02),
                 "How many all-reduces does one step hold, and how many bytes does each send?",
                 "One all-reduce per step, after the last micro-batch: 2·63/64 · 1.3e9 · 4 B ≈ "
                 "10.2 GB, over 4 micro-batches ≈ 2.56 GB each. Accumulation divides "
                 "communication ÷ compute by the number of micro-batches."),
        Exercise("dp-ratio-gpu", "Same run, 2,048 tokens per GPU per step (its 4 micro-batches "
                 "together), A100s at 150 TFLOP/s, 100 Gb/s InfiniBand (12.5 GB/s, α = 5 µs "
                 "per message round), the gradients "
                 "all-reduced in buckets of 25 MB (25e6 bytes), one ring all-reduce each: "
                 "communication time ÷ compute time per step, latency included?",
                 numeric(a["dp-ratio-gpu"], rtol=0.04),
                 "Compute is 6·Ψ·tokens FLOPs; the step's one all-reduce sends its bytes over β; each "
                 "bucket's ring pays α for every one of its rounds.",
                 "bandwidth 10.2 GB / 12.5 GB/s = 0.819 s; latency 208 buckets · 2·63 rounds · 5 µs "
                 "= 0.131 s; compute 6·1.3e9·2048 / 150e12 = 0.106 s: (0.819 + 0.131) / 0.106 ≈ 8.9 "
                 "(the bandwidth-only ratio, 7.7, misses the latency). No overlap can hide that; "
                 "only more tokens per GPU, fewer bytes or fewer, larger buckets help."),
        Exercise("dear-bytes", "How many bytes does rank 0 send per step in dear at N=3 (default "
                 "bucket_mb=0.05)?", numeric(a["dear-bytes"], rtol=0),
                 "Buckets are padded to a multiple of N; reduce-scatter and all-gather each send "
                 "(N−1)/N of a padded bucket.",
                 "sum over buckets of 2·(N−1)/N·padded(bucket, 3)·4 B: "
                 "dp_cost.bytes_per_step('dear', ex.param_numels(), 3)."),
        Exercise("bucket-messages", "Predict, then run the next cell: how many all-reduce messages "
                 "does rank 0 send per step with ddp-bucketed at bucket_mb=0.02 on this chapter's "
                 "default GPT? (ex.param_numels() has the sizes.)",
                 numeric(a["bucket-messages"], rtol=0),
                 "Pack from the last parameter; close a bucket before it would exceed the cap (MiB "
                 "of float32); a tensor larger than the cap is a bucket alone. One message per bucket.",
                 "len(parlab.data_parallel.bucket_packing.plan_buckets(ex.param_numels(), 0.02)); "
                 "the run's ledger counts the same.", kind="predict"),
        Exercise("wfbp-exposed-share", "Design: gpt2-xl (1.56e9 parameters, fp32 gradients) on 8 "
                 "H100s (400 TFLOP/s sustained) over NVLink 4 (450 GB/s per direction), 1,024 "
                 "tokens per GPU, WFBP (buckets all-reduced from the backward hooks). Latency and "
                 "the optimizer ignored, WFBP hides communication behind backward only: what "
                 "fraction of the step is exposed communication (lost MFU)?",
                 numeric(a["wfbp-exposed-share"], rtol=0.05),
                 "Forward 2Ψt/F, backward 4Ψt/F, ring 2(N−1)/N·4Ψ/β; exposed = max(0, ring − "
                 "backward); step = forward + backward + exposed.",
                 "ring 1.75·6.24 GB / 450 GB/s ≈ 24.3 ms, backward ≈ 16.0 ms, forward ≈ 8.0 ms: "
                 "exposed ≈ 8.3 ms of a ≈ 32.2 ms step ≈ 26%. DeAR moves the all-gathers behind the "
                 "next forward and wins most of it back (the gpt2-xl section prices it).", kind="design"),
        Exercise("wfbp-hide-tokens", "Design: same cluster and model. Choose the smallest number of "
                 "tokens per GPU at which WFBP's backward lasts as long as the ring all-reduce, so "
                 "(latency ignored) nothing is exposed.",
                 numeric(a["wfbp-hide-tokens"], rtol=0.05),
                 "Set 4Ψt/F equal to 2(N−1)/N·4Ψ/β; Ψ cancels.",
                 "t = 2(N−1)/N·F/β = 1.75 · 400e12 / 450e9 ≈ 1,556 tokens: two sequences of "
                 "1,024 per GPU.", kind="design"),
    ]


def exercise(name: str):
    return find(exercises(), name)
