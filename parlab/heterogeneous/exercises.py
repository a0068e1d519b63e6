"""Notebook 11's exercises (`parlab.exercises`): step time with even and LP shares (Zhang et al.,
"HAP", EuroSys 2024), the collectives of a HAP program, two design problems at GPU scale (the LP's
shares of a mixed A100/V100 node; whether slow devices behind a slow link pay at all) and one
predict-then-run (a slow rank's bytes); each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.exercises import Exercise, find, numeric
from parlab.heterogeneous import cost, shares
from parlab.heterogeneous import programs as pg


def _collectives(code: str) -> int:
    """Collectives one block of program `code` runs per step, forward and backward."""
    return sum(sum(1 for step in steps if step[0] != "slice")
               for e in pg.edges(pg.parse(code)) for steps in (e.forward, e.backward))


# HAP's program search (notebook 11, part 7: parlab.heterogeneous.explore.hap)
HAP_EXERCISES = [
    Exercise("hap-collectives", "Program 'dp dp dp dp col col row' (attention data-parallel, the MLP "
             "Megatron's: c_fc by columns, GeLU on its columns, mlp_proj by rows, the stream split by "
             "batch rows) on a GPT of 48 blocks: how many collectives does a step run, forward, "
             "backward and the all-reduce of the partial gradients together?",
             numeric(48 * _collectives("dp dp dp dp col col row") + 1, rtol=0, atol=0),
             "Walk the eight tensors between operators (programs.EDGES): where do producer and "
             "consumer disagree on the layout, and what does each gradient need?",
             "Only around the MLP: all-gather the rows before c_fc (its backward: reduce-scatter) and "
             "reduce-scatter mlp_proj's partial sums back to rows (backward: all-gather), per block "
             "— half of Megatron's with sequence parallelism, which does the same around attention "
             "too — and one flat all-reduce of the stream's and attention's gradients."),
]


def _lp_time(batch, speeds, f):
    return max(shares.busy_time(b, s, f) for b, s in zip(shares.lp(batch, speeds, f), speeds))


# ----------------------------------------------------------------------------- design at GPU scale
ROW_MS = 61.0  # one GPT-2 XL sequence (1,024 tokens), forward + backward, on an A100: 6·1.56e9·1024 / 150e12
GRAD_BYTES = 3.1e9  # GPT-2 XL's bf16 gradient
V100 = 1 / 3  # 50 / 150 TFLOP/s sustained (parlab.core.link.ACCELERATORS)


def _ring_ms(world: int, beta: float) -> float:
    """A ring all-reduce of the gradient, bandwidth term only: 2(N−1)/N · S / β, in ms."""
    return 2 * (world - 1) / world * GRAD_BYTES / beta * 1e3


def _keep_or_drop_ms() -> dict[str, float]:
    """Plan A: 8 A100s alone, even shares of 64, NVLink 3. Plan B: + 8 V100s on a second node, LP
    shares, the ring crossing HDR InfiniBand. Step time of each in ms (f = 1 sequence)."""
    a = shares.busy_time(64 // 8, 1.0, 1.0) * ROW_MS + _ring_ms(8, 300e9)
    speeds = [1.0] * 8 + [V100] * 8
    b = max(shares.busy_time(r, s, 1.0) for r, s in zip(shares.lp(64, speeds, 1.0), speeds)) * ROW_MS \
        + _ring_ms(16, 25e9)
    return {"a100-only": a, "all-16": b}


def _v100_rows() -> int:
    return shares.lp(512, [1.0] * 6 + [V100] * 2, 8.0)[-1]


DESIGN = [
    Exercise("v100-rows", "Design the shares: GPT-2 XL data-parallel on one node of 6 A100s and 2 V100s "
             "(a V100 sustains 50 TFLOP/s, an A100 150), global batch B = 512 sequences, and per step "
             "f = 8 sequences' worth of work that does not shrink with the batch (kernel launches, the "
             "optimizer). The all-reduce costs every rank the same. How many sequences should each "
             "V100 take, in whole sequences (the LP's shares)?", numeric(_v100_rows(), rtol=0, atol=0.5),
             "Every rank ends at the same T: an A100 takes T − f rows, a V100 s·T − f; the rows sum to B.",
             "6(T − 8) + 2(T/3 − 8) = 512 → T = 86.4 A100 row-times; a V100 takes 86.4/3 − 8 ≈ 20.8, "
             f"and whole rows give it {_v100_rows()}.", kind="design"),
    Exercise("keep-or-drop", "Design the cluster: GPT-2 XL, global batch 64 sequences; one sequence's "
             f"forward + backward takes {ROW_MS:g} ms on an A100, 3× that on a V100, plus f = 1 "
             "sequence's worth of fixed work per step on every rank that takes rows. The bf16 gradient "
             "(3.1 GB) is ring all-reduced (count only 2(N−1)/N · S / β). Plan A: one node of 8 A100s, "
             "even shares, NVLink 3 (300 GB/s per direction). Plan B: add a second node of 8 V100s, "
             "LP shares in whole sequences; the ring now crosses HDR InfiniBand (25 GB/s per "
             "direction). Step time of the faster plan, in ms?",
             numeric(min(_keep_or_drop_ms().values()), rtol=0.01),
             "Price both: compute (f + b)·t/s of the busiest rank, then the ring on its slowest link.",
             "A: 9 · 61 + 2·7/8 · 3.1e9/300e9 s ≈ 549 + 18 = 567 ms. B: shares 7 per A100, 1 per V100: "
             "max(8 · 61, 2 · 183) + 2·15/16 · 3.1e9/25e9 s ≈ 488 + 233 = 721 ms. The V100s cut the "
             "compute by 61 ms and the slow link adds 214: keep them off this job (or shrink the "
             "bytes that cross the slow link, chapter 08).", kind="design"),
]

# predict, then run: `parlab.heterogeneous.explore.predict.slow_rank_bytes` measures it
PREDICT = [
    Exercise("slow-rank-bytes", "Predict, then run the next cell: hetero-dp on 4 ranks at speeds 1 : 1 : "
             "1 : 0.25, the LP's shares of B = 12 rows of the default GPT (Ψ = 53,824 fp32 parameters) "
             "with f priced on the paced A100 clock. How many bytes does the slow rank 3 send in one "
             "step?", numeric(cost.grad_sync_bytes(53824, 4, 3), rtol=0, atol=0),
             "What does the all-reduce move: the rows, or the gradient?",
             "2(N−1)/N · Ψ · 4 = 1.5 · 53,824 · 4 bytes — the same as every other rank, whatever its "
             "rows (here none: the LP gives it no rows, yet it holds the model and joins the "
             "all-reduce with a zero gradient).", kind="predict"),
]


EXERCISES = [
    Exercise("even-step", "Speeds 1:1:1:0.25, B = 12, f = 0: how many row-times does a step take with "
             "even shares?", numeric(12, rtol=0, atol=1e-6),
             "The slow rank has B/N rows and works at a quarter of the speed.",
             "3 rows / 0.25 = 12 row-times; the three fast ranks finish after 3 and wait 9."),
    Exercise("lp-time", "Speeds [1, 1, 1, 0.25], B = 1024, f = 96 rows: the LP sharding's step in "
             "row-times (whole rows)?", numeric(_lp_time(1024, [1, 1, 1, 0.25], 96), rtol=0, atol=1e-6),
             "The slow rank pays f/s = 384 before any row; balance the rest so everyone ends together, "
             "then hand out whole rows.",
             f"rows {shares.lp(1024, [1, 1, 1, 0.25], 96)}: a step of "
             f"{_lp_time(1024, [1, 1, 1, 0.25], 96):g} row-times."),
] + HAP_EXERCISES + DESIGN + PREDICT


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
