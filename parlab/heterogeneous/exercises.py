"""Notebook 11's exercises (`parlab.exercises`): step time with even, proportional and LP shares
(Zhang et al., "HAP", EuroSys 2024), the loss weight of an uneven shard, backup workers' bias
(Chen et al. 2016), the bytes of hetero-dp, hetero-tp's padded and exact-size all-gathers
and shares, and the collectives of a HAP program; each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.exercises import Exercise, find, numeric, one_of
from parlab.heterogeneous import cost, shares
from parlab.heterogeneous import programs as pg

SKEWED = [6144, 2048, 2048, 2048]  # one fast device's shard, three slow ones

# hetero-tp's (notebook 11, part 2: parlab.heterogeneous.explore.tp)
TP_EXERCISES = [
    Exercise("padded-bytes", "hetero-tp's all-gather of shards of [6144, 2048, 2048, 2048] rows, padded: "
             "how many rows does each rank send (ring)?",
             numeric(3 * max(SKEWED), rtol=0, atol=0),
             "Every shard is padded to the largest; a ring rank forwards N−1 chunks.",
             f"(N−1)·M = 3·{max(SKEWED)} = {3 * max(SKEWED)} rows, though the data is only "
             f"{sum(SKEWED)}."),
    Exercise("exact-bytes", "The same all-gather, exact-size ring: how many rows does rank 3 send? "
             "(it forwards every chunk but rank 0's)", numeric(sum(SKEWED) - SKEWED[0], rtol=0, atol=0),
             "S − S_{r+1} for r = 3: the next rank is 0.",
             f"{sum(SKEWED)} − {SKEWED[0]} = {sum(SKEWED) - SKEWED[0]} rows."),
    Exercise("tp-shares", "hetero-tp puts one ratio per device on heads, columns and positions. For "
             "speeds [1, 0.5] and f = 0, what fraction of the MLP columns does rank 1 get?",
             numeric(1 / 3, rtol=0.01), "f = 0: the LP is proportional to speed.",
             "w = 0.5 / 1.5 = 1/3 (43 of 128 columns)."),
    Exercise("lp-zero", "hetero-tp at speeds [1, 1, 1, 0.05] with f = 0.1: what ratio w_3 does the LP "
             "give the slow rank? (parlab then refuses the run, naming it)", numeric(0, rtol=0, atol=1e-9),
             "Rank 3 alone needs f/s_3 = 2 units of W's time before any share; what do the others need "
             "if they take everything?", "(0.1 + 1/3)/1 ≈ 0.43 < 2: the LP's T* is below f/s_3, so w_3 = 0."),
]


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
    return max(shares.rank_time(b, s, f) for b, s in zip(shares.lp(batch, speeds, f), speeds))


EXERCISES = [
    Exercise("even-step", "Speeds 1:1:1:0.25, B = 12, f = 0: how many row-times does a step take with "
             "even shares?", numeric(12, rtol=0, atol=1e-6),
             "The slow rank has B/N rows and works at a quarter of the speed.",
             "3 rows / 0.25 = 12 row-times; the three fast ranks finish after 3 and wait 9."),
    Exercise("proportional-rows", "Speeds [1, 0.5], B = 3072, proportional shares: how many rows does "
             "rank 1 take?", numeric(3072 * 0.5 / 1.5, rtol=0, atol=0),
             "b_r = B·s_r / Σ s.", f"3072 · 0.5 / 1.5 = {3072 * 0.5 / 1.5:.0f}."),
    Exercise("lp-time", "Speeds [1, 1, 1, 0.25], B = 1024, f = 96 rows: the LP sharding's step in "
             "row-times (whole rows)?", numeric(_lp_time(1024, [1, 1, 1, 0.25], 96), rtol=0, atol=1e-6),
             "The slow rank pays f/s = 384 before any row; balance the rest so everyone ends together, "
             "then hand out whole rows.",
             f"rows {shares.lp(1024, [1, 1, 1, 0.25], 96)}: a step of "
             f"{_lp_time(1024, [1, 1, 1, 0.25], 96):g} row-times."),
    Exercise("weight", "Rank r took b_r of B rows. By what factor must it scale its mean loss before "
             "backward so that one all-reduce(sum) gives the single-process gradient? (answer as a "
             "number for b_r = 3, B = 12)", numeric(0.25, rtol=0, atol=1e-9),
             "The global loss is the mean over all B rows.", "b_r/B = 3/12 = 0.25."),
    Exercise("backup-bias", "Backup workers drop the slowest b gradients every step. With i.i.d. rows in "
             "every step, is the gradient they apply biased or unbiased?", one_of("unbiased"),
             "Which rows a rank holds does not depend on whether it is slow.",
             "Unbiased: it is the mean gradient of B(N−b)/N i.i.d. rows, a smaller batch."),
    Exercise("bytes", "hetero-dp with shares [11, 1] on 2 ranks, Ψ = 53,824: bytes rank 0 sends per step?",
             numeric(cost.grad_sync_bytes(53824, 2, 0), rtol=0, atol=0),
             "The all-reduce moves the gradient, whose size does not depend on the shares.",
             "2(N−1)/N·Ψ·4 = 215,296 bytes, as with even shares."),
] + TP_EXERCISES + HAP_EXERCISES


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
