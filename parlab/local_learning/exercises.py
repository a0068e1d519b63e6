"""Notebook 05's exercises (`parlab.exercises`): interlocking backpropagation's bytes and depth
(Gomez et al., JMLR 2022), PipeDream's stashed versions (Narayanan et al., SOSP 2019), decoupled
greedy learning's idle time (Belilovsky et al., ICML 2020), PipeDream's stash at GPU scale, and the
boundary bytes merging layer-wise partitions saves (Akintoye et al., FGCS 2023); each check says
right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.engine.runner import make_config
from parlab.exercises import Exercise, find, numeric
from parlab.local_learning import cost
from parlab.local_learning.routes import Route


def _gpt_mc():
    return make_config("single").model_config


def _merged_boundary_bytes() -> int:
    """Boundary bytes per step after the merge of the `merge-bytes` exercise: dp = 2 replicas of
    k = 2 stages, each replica's 8 rows crossing its one boundary up and down."""
    dp, k, rows = 2, 2, 16 // 2
    return dp * (k - 1) * 2 * cost.activation_bytes(_gpt_mc(), rows)


EXERCISES = [
    Exercise("interlock-bytes",
             "Interlocking at depth 2 on p = 4 stages, aux_weight 1, default GPT (T = 32, C = 32), "
             "12 rows per step. How many bytes per step go *down* across boundary 0?",
             expect=numeric(cost.gradient_bytes(Route.of(4, 2, 1.0), 0, _gpt_mc(), 12), rtol=0),
             hint_text="Count the losses whose gradient may cross boundary 0 at depth 2; each is one "
                  "activation-shaped tensor.",
             solution_text="losses 1 and 2 cross it: 2 × 12·32·32·4 B = 98,304 B"),
    Exercise("global-depth",
             "On p = 6 stages, which depth with aux_weight = 0 makes interlocking equal global "
             "backprop? (An integer.)",
             expect=numeric(5, rtol=0),
             hint_text="The true loss sits on the last stage; how many boundaries lie between it and "
                  "the first stage?",
             solution_text="p − 1 = 5"),
    Exercise("pipedream-versions",
             "PipeDream on p = 8 stages with m = 16 micro-batches in flight: how many weight "
             "versions does the first stage hold at its peak?",
             expect=numeric(cost.pipedream_versions(8, 16, 0), rtol=0),
             hint_text="One version per micro-batch in flight; 1F1B admits p − s on stage s.",
             solution_text="min(p − 0, m) = 8"),
    Exercise("decoupled-idle",
             "Local learning never flushes: p = 4 stages, m = 4 micro-batches per step, 100 steps, "
             "equal stages. What fraction of the run does a stage idle? (A fraction.)",
             expect=numeric(cost.decoupled_idle(4, 4, 100), rtol=0.02),
             hint_text="The pipeline fills once per run, not once per step.",
             solution_text="(p−1)/(steps·m + p−1) = 3/403 ≈ 0.0074"),
    Exercise("merge-bytes",
             "Layer-wise partitioning and merging on 4 devices, default GPT (T = 32, C = 32), 16 rows "
             "per step. Un-merged, the 4 layers are k = 4 stages of one pipeline; the merge keeps "
             "k = 2 stages and makes the freed devices a second replica (dp = 2, 8 rows each). How "
             "many bytes of activations and gradients cross stage boundaries per step after the "
             "merge, summed over both replicas?",
             expect=numeric(_merged_boundary_bytes(), rtol=0),
             hint_text="Each boundary carries a replica's rows once up (activations) and once down "
                  "(gradients), r·T·C·4 bytes each way; count the boundaries each replica keeps.",
             solution_text="2 replicas × 1 boundary × 2 directions × 8·32·32·4 B = 131,072 B — a third of "
                      "the un-merged pipeline's 3 × 2 × 16·32·32·4 B (the flat dp ring it adds is "
                      "priced by the merge's model)"),
    Exercise("stash-gpu",
             "PipeDream at GPU scale: a 70B-parameter model split evenly over p = 16 stages, bf16 "
             "weights (2 bytes each), m = 32 micro-batches in flight. How many GB (10^9 B) of "
             "stashed weight versions does the first stage hold beyond its one live copy?",
             expect=numeric((cost.pipedream_versions(16, 32, 0) - 1) * 70e9 / 16 * 2 / 1e9,
                            rtol=0.01),
             hint_text="Count the first stage's versions at its peak first; each is one stage's "
                  "weights.",
             solution_text="(min(p, m) − 1) · Ψ/p · 2 B"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
