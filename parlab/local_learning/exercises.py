"""Notebook 05's exercises (`parlab.exercises`): interlocking backpropagation's bytes, predicted
then measured by a run (Gomez et al., JMLR 2022; `explore.predict`), and five design problems at
GPU scale: the merge of layer-wise partitions (Akintoye et al., FGCS 2023) that sends the fewest
bytes, the largest model PipeDream's stash lets fit (Narayanan et al., SOSP 2019), when a flushed
1F1B pipeline catches up with decoupled greedy learning (Belilovsky et al., ICML 2020), the most
micro-batches PipeDream may keep in flight on an 80 GB GPU, and the scheme (PipeDream, 2BW, 1F1B)
with the least idle that fits. Each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.core import cost as core_cost
from parlab.engine.runner import make_config
from parlab.exercises import Exercise, find, numeric, one_of
from parlab.local_learning import cost
from parlab.local_learning.routes import Route


def _gpt_mc():
    return make_config("single").model_config


# merge-bytes: Ψ = 1.3B parameters (bf16 gradients) on 8 GPUs, k stages × 8/k replicas, 128
# sequences of 2,048 tokens per step, hidden 2,048, bf16 activations
MERGE_PARAMS, MERGE_GPUS, MERGE_ROWS, MERGE_T, MERGE_C, BF16 = 1_300_000_000, 8, 128, 2048, 2048, 2


def merge_step_bytes(k: int) -> int:
    """Bytes all GPUs send per step with k stages and 8/k replicas: each boundary's activations up
    and gradients down (all rows), plus every stage's flat dp ring all-reduce of its gradients."""
    dp = MERGE_GPUS // k
    boundaries = (k - 1) * 2 * MERGE_ROWS * MERGE_T * MERGE_C * BF16  # (R, T, C) up and down
    ring = sum(core_cost.ring_all_reduce(MERGE_PARAMS // k, dp, d)[0] for d in range(dp)) * k
    return boundaries + ring * BF16


def _best_merge_gb() -> float:
    return min(merge_step_bytes(k) for k in (1, 2, 4, 8)) / 1e9


# predict: interlocking at depth 2 on p = 3 stages, aux_weight 1, the default GPT's 12 rows per step
PREDICT_P, PREDICT_DEPTH, PREDICT_ROWS = 3, 2, 12
# design: a 20B model on p = 8 stages of 80 GB; 16 B per parameter live (bf16 weights and
# gradients, fp32 master weights and AdamW moments), 2 B per parameter per stashed bf16 version,
# 3 GB of activations per micro-batch in flight on a stage
GPU_GB, PARAMS, STAGES, LIVE_B, VERSION_B, ACT_GB = 80.0, 20e9, 8, 16, 2, 3.0


def interlock_down_bytes() -> int:
    """Bytes per step down across boundary 0 of the predict exercise (`cost.gradient_bytes`)."""
    return cost.gradient_bytes(Route.of(PREDICT_P, PREDICT_DEPTH, 1.0), 0, _gpt_mc(), PREDICT_ROWS)


def stage0_gb(scheme: str, m: int) -> float:
    """First stage's memory in GB: live state, activations of its micro-batches in flight
    (min(p, m)), and the stashed versions beyond the live one (PipeDream min(p, m) − 1, 2BW one,
    1F1B none)."""
    in_flight = min(STAGES, m)
    extra = {"pipedream": cost.pipedream_versions(STAGES, m, 0) - 1,
             "2bw": cost.twobw_versions(STAGES, m, 0) - 1, "1f1b": 0}[scheme]
    per_stage = PARAMS / STAGES
    return (per_stage * LIVE_B + extra * per_stage * VERSION_B) / 1e9 + in_flight * ACT_GB


def largest_pipedream_model(p: int = 64, act_gb: float = 10.0) -> float:
    """Billions of parameters whose PipeDream first stage fits on the GPU at p stages, m ≥ p:
    live state plus min(p, m) − 1 stashed versions of Ψ/p parameters, plus activations."""
    per_param = LIVE_B + (cost.pipedream_versions(p, p, 0) - 1) * VERSION_B  # bytes per Ψ/p
    return (GPU_GB - act_gb) * 1e9 * p / per_param / 1e9


def most_in_flight() -> int:
    """The largest m whose PipeDream first stage fits on the GPU."""
    return max(m for m in range(1, 64) if stage0_gb("pipedream", m) <= GPU_GB)


def least_idle_fitting(m: int = 8) -> str:
    """At m micro-batches: PipeDream and 2BW never flush (no bubble), 1F1B idles (p−1)/(m+p−1);
    the scheme with the least idle that fits, PipeDream before 2BW when both fit (the freshest
    weights)."""
    for scheme in ("pipedream", "2bw", "1f1b"):
        if stage0_gb(scheme, m) <= GPU_GB:
            return scheme
    raise ValueError("nothing fits")


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    return {"interlock-run": interlock_down_bytes(), "pipedream-fit": most_in_flight(),
            "scheme-fits": least_idle_fitting(),
            "local-catch-up": cost.flushed_catches_up(8, 1000, 1.12),
            "stash-gpu": largest_pipedream_model(), "merge-bytes": _best_merge_gb()}


_A = answers()

EXERCISES = [
    Exercise("local-catch-up",
             "Design: a model on p = 8 equal pipeline stages of GPUs trains for 1,000 steps either "
             "with decoupled greedy (local) learning — each stage's auxiliary head adds 12% to its "
             "compute per step, and the pipeline never flushes — or with 1F1B and global backprop, "
             "which flushes every step. What is the fewest micro-batches m per step at which "
             "1F1B's throughput reaches local learning's? (An integer.)",
             expect=numeric(_A["local-catch-up"], rtol=0, atol=0.5),
             hint_text="Throughput is the work a step does over the time it takes: the share of "
                  "time a stage computes, divided by the compute it must do.",
             solution_text="(1 − (p−1)/(m+p−1)) ≥ (1 − (p−1)/(1000·m+p−1))/1.12, the fewest m",
             kind="design"),
    Exercise("merge-bytes",
             "Design: layer-wise partitioning and merging at GPU scale: a 1.3B-parameter model on "
             "8 GPUs as k equal pipeline stages × 8/k replicas (k = 1, 2, 4 or 8), 128 sequences of "
             "2,048 tokens per step (split over the replicas), hidden C = 2,048, bf16 activations "
             "and gradients. Each stage's replicas sum its gradients with a flat ring all-reduce "
             "every step. Take the k that sends the fewest bytes: how many GB (10^9 B) do all 8 "
             "GPUs send per step, boundaries and rings together?",
             expect=numeric(_A["merge-bytes"], rtol=0.01),
             hint_text="Two costs pull opposite ways: more stages add boundaries, each crossed by "
                  "all the step's rows up and down; more replicas make each ring longer. Count "
                  "both for every k.",
             solution_text="boundaries (k − 1)·2·R·T·C·2 B = (k − 1)·2.15 GB (the rows split over "
                      "replicas, but every row crosses every boundary); rings k·dp·2(dp−1)/dp·"
                      "(Ψ/k)·2 B = 2(dp − 1)·2.6 GB. k = 1: 36.4, 2: 17.7, 4: 6.44 + 5.2 = 11.6, "
                      "8: 15.0 GB — k = 4, dp = 2.",
             kind="design"),
    Exercise("stash-gpu",
             "Design: PipeDream at p = 64 stages on 80 GB GPUs, m = 64 micro-batches in flight, "
             "the model split evenly. A stage's live state takes 16 B per parameter (bf16 weights "
             "and gradients, fp32 master weights and AdamW moments), each stashed weight version "
             "beyond the live one 2 B per parameter (bf16), and the first stage's activations "
             "10 GB. What is the largest model, in billions of parameters, whose first stage "
             "fits?",
             expect=numeric(_A["stash-gpu"], rtol=0.01),
             hint_text="Write the first stage's bytes per parameter of the whole model: the live "
                  "state shrinks as 1/p, but what does the stash do as p grows?",
             solution_text="Ψ/p·(16 + (min(p, m) − 1)·2) B + 10 GB ≤ 80 GB ⇔ Ψ ≤ 70 GB · 64/142 "
                      "= 31.5B. The stash holds (p−1)/p of the model's bf16 weights on the first "
                      "stage, whatever p: a 70B model never fits PipeDream on 80 GB, however deep "
                      "the pipeline; 1F1B's first stage (16 B/p per parameter) fits 280B at p = 64.",
             kind="design"),
    Exercise("pipedream-fit",
             "Design: a 20B-parameter model split evenly over p = 8 PipeDream stages on 80 GB GPUs. "
             "A stage's live state takes 16 B per parameter (bf16 weights and gradients, fp32 "
             "master weights and AdamW moments); each stashed weight version beyond the live one "
             "takes 2 B per parameter (bf16); each micro-batch in flight holds 3 GB of activations "
             "on the stage. What is the largest number m of micro-batches in flight for which the "
             "first stage still fits? (An integer.)",
             expect=numeric(_A["pipedream-fit"], rtol=0, atol=0.5),
             hint_text="On the first stage every micro-batch in flight (up to p) costs its "
                  "activations and one more stashed version.",
             solution_text="Ψ/p·16 B + m·3 GB + (min(p, m) − 1)·Ψ/p·2 B <= 80 GB, the largest m",
             kind="design"),
    Exercise("scheme-fits",
             "Design: the same 20B model, stages and GPUs as pipedream-fit, now with m = 8 "
             "micro-batches in flight. Of pipedream, 2bw and 1f1b (which flushes every step), which "
             "idles least and still fits on the first stage?",
             expect=one_of(_A["scheme-fits"]),
             hint_text="PipeDream and 2BW never flush; count the stashed versions each keeps on the "
                  "first stage at m = 8 and add them to the live state and the activations.",
             solution_text="PipeDream: min(p, m) − 1 extra versions; 2BW: one; 1F1B: none, but "
                      "it idles (p−1)/(m+p−1). The first that fits in that order wins.",
             kind="design"),
    Exercise("interlock-run",
             "Predict, then run the next cell: interlocking at depth 2 on p = 3 stages, aux_weight "
             "1, default GPT (T = 32, C = 32, fp32), 12 rows per step. How many bytes per step "
             "cross boundary 0 downward (gradients)?",
             expect=numeric(_A["interlock-run"], rtol=0),
             hint_text="Count the losses whose gradient may cross boundary 0 at depth 2; each is one "
                  "activation-shaped tensor.",
             solution_text="losses 1 and 2 cross it: 2 × 12·32·32·4 B (the run's ledger agrees)",
             kind="predict"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
