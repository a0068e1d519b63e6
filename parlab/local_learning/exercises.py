"""Notebook 05's exercises (`parlab.exercises`): interlocking backpropagation's bytes, predicted
then measured by a run (Gomez et al., JMLR 2022; `explore.predict`), PipeDream's stash at GPU scale
(Narayanan et al., SOSP 2019), the boundary bytes merging layer-wise partitions saves (Akintoye et
al., FGCS 2023), and three design problems at GPU scale: when a flushed 1F1B pipeline catches up
with decoupled greedy learning (Belilovsky et al., ICML 2020), the most micro-batches PipeDream may
keep in flight on an 80 GB GPU, and the scheme (PipeDream, 2BW, 1F1B) with the least idle that
fits. Each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.engine.runner import make_config
from parlab.exercises import Exercise, find, numeric, one_of
from parlab.local_learning import cost
from parlab.local_learning.routes import Route


def _gpt_mc():
    return make_config("single").model_config


def _merged_boundary_bytes() -> int:
    """Boundary bytes per step after the merge of the `merge-bytes` exercise: dp = 2 replicas of
    k = 2 stages, each replica's 8 rows crossing its one boundary up and down."""
    dp, k, rows = 2, 2, 16 // 2
    return dp * (k - 1) * 2 * cost.activation_bytes(_gpt_mc(), rows)


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
            "stash-gpu": (cost.pipedream_versions(16, 32, 0) - 1) * 70e9 / 16 * 2 / 1e9,
            "merge-bytes": _merged_boundary_bytes()}


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
             "Layer-wise partitioning and merging on 4 devices, default GPT (T = 32, C = 32), 16 rows "
             "per step. Un-merged, the 4 layers are k = 4 stages of one pipeline; the merge keeps "
             "k = 2 stages and makes the freed devices a second replica (dp = 2, 8 rows each). How "
             "many bytes of activations and gradients cross stage boundaries per step after the "
             "merge, summed over both replicas?",
             expect=numeric(_A["merge-bytes"], rtol=0),
             hint_text="Each boundary carries a replica's rows once up (activations) and once down "
                  "(gradients), r·T·C·4 bytes each way; count the boundaries each replica keeps.",
             solution_text="2 replicas × 1 boundary × 2 directions × 8·32·32·4 B = 131,072 B — a third of "
                      "the un-merged pipeline's 3 × 2 × 16·32·32·4 B (the flat dp ring it adds is "
                      "priced by the merge's model)"),
    Exercise("stash-gpu",
             "PipeDream at GPU scale: a 70B-parameter model split evenly over p = 16 stages, bf16 "
             "weights (2 bytes each), m = 32 micro-batches in flight. How many GB (10^9 B) of "
             "stashed weight versions does the first stage hold beyond its one live copy?",
             expect=numeric(_A["stash-gpu"], rtol=0.01),
             hint_text="Count the first stage's versions at its peak first; each is one stage's "
                  "weights.",
             solution_text="(min(p, m) − 1) · Ψ/p · 2 B"),
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
