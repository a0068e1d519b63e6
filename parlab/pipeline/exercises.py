"""Chapter 04's exercises (`parlab.exercises`), at GPU scale so that the chapter's formulas, not
its printed numbers, answer them: the bubble of interleaved 1F1B (Narayanan et al., Megatron-LM,
SC 2021, §2.2.2), 1F1B's activations in flight, the bytes an interleaved rank sends; two design
problems — the MFU a pipeline keeps after its bubble and exposed transfers, and the schedule with
the least bubble that fits an 80 GB GPU (GPipe, 1F1B, interleaved, ZB-H1: Qi et al., ICLR 2024)
— and one predict-then-run (1F1B's bubble, measured by `explore.predict` on the paced A100).
Every accepted answer is computed here from `cost`, the closed forms the tests hold equal to the
simulator and the ledger; each check says right or not yet, never the answer.
"""

from __future__ import annotations

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


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    return {
        "lost-mfu": lost_mfu(),
        "schedule-fits": fitting_schedule(),
        "bubble-measured": cost.theory_bubble("1f1b", PREDICT_P, PREDICT_M),
        "interleaved-bubble": cost.ideal_bubble(make_schedule("interleaved", 8, 32, 2),
                                                forward=1.0 / 2),
        "1f1b-memory-gpu": cost.in_flight_peak("1f1b", 16, 64, 3) * (96 // 16) * 0.4,
        "p2p-bytes": cost.p2p_bytes_per_step(8, 2, 16, 0, TOKENS * HIDDEN, itemsize=BF16) / 1e9,
    }


_A = answers()

EXERCISES = [
    Exercise("interleaved-bubble",
             "Interleaved 1F1B at p = 8, m = 32, v = 2 chunks per rank (forward = 1/v unit per "
             "chunk, backward twice that). What fraction of the step is bubble? This chapter's "
             "simulator (cost.ideal_bubble) is the judge.",
             numeric(_A["interleaved-bubble"], rtol=0.02),
             "Each fill / drain slot is v times shorter.",
             "(p−1)/(v·m+p−1); the simulated schedule agrees."),
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
             "A 70B-class model (hidden C = 8,192) in interleaved 1F1B: p = 8 pipeline ranks, "
             "v = 2 chunks per rank, m = 16 micro-batches of one 4,096-token sequence each, bf16 "
             "activations and gradients. How many GB (1e9 B) does pipeline rank 0 send per step?",
             numeric(_A["p2p-bytes"], rtol=0.01),
             "Rank 0 owns stages 0 and p: it sends activations onward from both and gradients back "
             "from stage p only (stage 0 has no predecessor).",
             "(2v − [first] − [last])·m messages of T·C·2 B — cost.p2p_bytes_per_step."),
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
