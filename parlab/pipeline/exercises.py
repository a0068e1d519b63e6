"""Chapter 04's exercises (`parlab.exercises`), at GPU scale so that the chapter's formulas, not
its printed numbers, answer them: 1F1B's activations in flight; four design problems — the
fewest interleaved chunks (Narayanan et al., Megatron-LM, SC 2021, §2.2.2) under a bubble target,
the chunk count that trades bubble against an interleaved rank's bytes over InfiniBand, the MFU a
pipeline keeps after its bubble and exposed transfers, and the schedule with the least bubble that
fits an 80 GB GPU (GPipe, 1F1B, interleaved, ZB-H1: Qi et al., ICLR 2024) — and one
predict-then-run (1F1B's bubble, measured by `explore.predict` on the paced A100).
Every accepted answer is computed here from `cost`, the closed forms the tests hold equal to the
simulator and the ledger; each check says right or not yet, never the answer.
"""

from __future__ import annotations

from parlab.core.link import REAL
from parlab.exercises import Exercise, find, numeric, one_of
from parlab.pipeline import cost
from parlab.pipeline.schedules import make_schedule

# 70B-class model: hidden C = 8192; one micro-batch of one 4,096-token sequence, bf16 activations
HIDDEN, TOKENS, BF16 = 8192, 4096, 2
# lost-mfu: p = 8, m = 24, a micro-batch's forward 40 ms and backward 80 ms per stage at 55% MFU,
# 150 ms per step waiting on transfers 1F1B cannot hide
MFU_P, MFU_M, MFU_F, MFU_B, MFU_PEAK, MFU_EXPOSED = 8, 24, 0.040, 0.080, 0.55, 0.150
# schedule-fits: p = 8, m = 32, 80 GB GPU, 57 GB of weights, gradients and optimizer state per
# rank, 2.5 GB of activations per micro-batch on a whole stage (a chunk of v holds 1/v of it)
FIT_P, FIT_M, FIT_GB, FIT_STATIC, FIT_ACT = 8, 32, 80.0, 57.0, 2.5
FIT_CHOICES = (("gpipe", 1), ("1f1b", 1), ("interleaved", 4), ("zb", 1))
# interleaved-bubble and p2p-bytes: 80 layers on p = 8 ranks, m = 16; v must divide the 10 layers
# of a rank; a micro-batch's forward + backward on a whole stage 120 ms, rank 0's sends over NDR
# InfiniBand not overlapped
V_P, V_M, V_LAYERS, V_CHOICES, V_STAGE_S = 8, 16, 80, (1, 2, 5, 10), 0.120
# bubble-measured: 1F1B on p = 2, m = 6, run by explore.predict
PREDICT_P, PREDICT_M = 2, 6


def lost_mfu() -> float:
    """MFU of the step: the stage's MFU × its compute ÷ the step (bubble slots and exposed waits)."""
    compute = MFU_M * (MFU_F + MFU_B)
    step = compute / (1 - cost.theory_bubble("1f1b", MFU_P, MFU_M)) + MFU_EXPOSED
    return MFU_PEAK * compute / step


def fitting_schedule() -> str:
    """Of `FIT_CHOICES`, the one with the least bubble whose rank-0 peak (`cost.held_peak` on the
    schedule data) fits beside the static memory."""
    fits = []
    for name, v in FIT_CHOICES:
        schedule = make_schedule(name, FIT_P, FIT_M, v)
        held = cost.held_peak(schedule, 0, {s: FIT_ACT / v for s in range(FIT_P * v)})
        if FIT_STATIC + held <= FIT_GB:
            fits.append((cost.ideal_bubble(schedule, forward=1.0 / v), name))
    return min(fits)[1]


def interleaved_bubble(v: int) -> float:
    return cost.ideal_bubble(make_schedule("interleaved", V_P, V_M, v), forward=1.0 / v)


def smallest_v_under(bubble: float = 0.10) -> int:
    """The fewest chunks per rank, dividing its layers, whose bubble is under `bubble`."""
    return min(v for v in range(1, V_LAYERS // V_P + 1)
               if (V_LAYERS // V_P) % v == 0 and interleaved_bubble(v) < bubble)


def interleaved_step_s(v: int) -> float:
    """Step seconds: the compute stretched by the bubble, plus rank 0's exposed sends over NDR."""
    sent = cost.p2p_bytes_per_step(V_P, v, V_M, 0, TOKENS * HIDDEN, itemsize=BF16)
    return V_M * V_STAGE_S / (1 - interleaved_bubble(v)) + sent / REAL["NDR-IB"][1]


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    return {
        "lost-mfu": lost_mfu(),
        "schedule-fits": fitting_schedule(),
        "bubble-measured": cost.theory_bubble("1f1b", PREDICT_P, PREDICT_M),
        "interleaved-bubble": smallest_v_under(0.10),
        "1f1b-memory-gpu": cost.in_flight_peak("1f1b", 16, 64, 3) * (96 // 16) * 0.4,
        "p2p-bytes": min(interleaved_step_s(v) for v in V_CHOICES) * 1e3,  # ms
    }


_A = answers()

EXERCISES = [
    Exercise("interleaved-bubble",
             "Design: a 70B-class model of 80 layers in interleaved 1F1B over p = 8 pipeline "
             "ranks, m = 16 micro-batches per step; each rank's 10 layers are cut into v chunks of "
             "equal layers (so v divides 10), a chunk's forward and backward taking 1/v of the "
             "whole stage's. What is the smallest v whose bubble is under 10% of the step? This "
             "chapter's simulator (cost.ideal_bubble) is the judge.",
             numeric(_A["interleaved-bubble"], rtol=0, atol=0.5),
             "Each fill / drain slot is v times shorter; find the v where the bubble crosses 10%, "
             "then look at which v the layers allow.",
             "(p−1)/(v·m+p−1) < 0.10 ⇔ 16v + 7 > 70 ⇔ v ≥ 4 (7/71 = 9.9%); but 4 chunks do not "
             "cut 10 layers evenly: v = 5 (7/87 = 8.0%).",
             kind="design"),
    Exercise("1f1b-memory-gpu",
             "A 96-layer model trains in 1F1B with m = 64 micro-batches, its layers split evenly "
             "over p = 16 stages; one micro-batch's activations take 0.4 GB per layer. How many GB "
             "of activations does stage 3 (counting from 0) hold at its peak? (Then work out the "
             "first stage's at p = 8 and at p = 32.)",
             numeric(_A["1f1b-memory-gpu"], rtol=0.01),
             "1F1B's warm-up on stage s runs p − s − 1 forwards, then one more before its first "
             "backward, and keeps that many in flight.",
             "min(p − s, m) micro-batches × 96/p layers × 0.4 GB; the first stage holds "
             "p · (96/p) · 0.4 GB = 38.4 GB whatever p: a deeper pipeline does not shrink it."),
    Exercise("p2p-bytes",
             "Design: the same model (hidden C = 8,192) with one pipeline rank per node, so "
             "activations and gradients cross NDR InfiniBand (50 GB/s per direction, ignore α); "
             "p = 8, m = 16 micro-batches of one 4,096-token sequence each, bf16. A micro-batch's "
             "forward plus backward on a whole stage takes 120 ms (a chunk's, 1/v of it), and "
             "pipeline rank 0's sends are not overlapped: they add to the step. Of v = 1, 2, 5 "
             "and 10 chunks per rank, take the one with the shortest step: how many milliseconds "
             "is that step?",
             numeric(_A["p2p-bytes"], rtol=0.01),
             "Step = the compute stretched by the bubble + the seconds rank 0 sends. Rank 0 owns "
             "stages 0, p, 2p, …: count the activations it sends onward and the gradients it sends "
             "back (stage 0 has no predecessor).",
             "step(v) = m(f+b)/(1 − (p−1)/(v·m+p−1)) + (2v − 1)·m·T·C·2 B/β = 1.92 s + 0.84 s/v + "
             "(2v − 1)·21.5 ms: v = 1 2,781 ms, 2 2,404, 5 2,281, 10 2,412. v = 5 wins; past it "
             "the extra bytes cost more than the bubble saves.",
             kind="design"),
    Exercise("lost-mfu",
             "Design: GPT-3 175B in a 1F1B pipeline of p = 8 A100s with m = 24 micro-batches per "
             "step. On one stage a micro-batch's forward takes 40 ms and its backward 80 ms, at 55% "
             "MFU while computing; each step also waits 150 ms on point-to-point transfers the "
             "schedule cannot hide. What MFU does the whole step reach? (A fraction, e.g. 0.42.)",
             numeric(_A["lost-mfu"], rtol=0.01),
             "The step is the bubble's slots plus the stages' compute, plus the exposed wait; MFU "
             "scales with compute ÷ step.",
             "0.55 · m(f+b) ÷ [(m+p−1)(f+b) + 0.150 s]",
             kind="design"),
    Exercise("schedule-fits",
             "Design: p = 8 pipeline ranks on 80 GB GPUs, m = 32 micro-batches per step, equal "
             "stages. Weights, gradients and optimizer state take 57 GB per rank; one micro-batch's "
             "activations on a whole stage take 2.5 GB (a chunk of an interleaved rank holds 1/v of "
             "that). Of gpipe, 1f1b, interleaved with v = 4 and zb (ZB-H1), which schedule has the "
             "least bubble and still fits on rank 0?",
             one_of(_A["schedule-fits"]),
             "Rank 0 holds the most: count the micro-batches (or chunks) whose activations it keeps "
             "before its first backward frees one, then compare the bubbles of those that fit.",
             "GPipe holds m, 1F1B and ZB-H1 p, interleaved (p−1)·2 + (v−1)·p + 1 chunks of 1/v; "
             "of those that fit, the least bubble wins (cost.held_peak on the schedule data).",
             kind="design"),
    Exercise("bubble-measured",
             "Predict, then run the next cell: 1F1B on p = 2 equal stages with m = 6 micro-batches, "
             "paced on the A100. What fraction of the step will each stage idle? (A fraction.)",
             numeric(_A["bubble-measured"], rtol=0, atol=0.02),
             "Count the slots of the step and those in which a stage waits for the pipe to fill or "
             "drain.",
             "(p−1)/(m+p−1); the measured bubble sits within a few points of it (the run also pays "
             "its messages and the optimizer).",
             kind="predict"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
