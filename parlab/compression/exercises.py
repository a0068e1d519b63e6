"""Notebook 08's exercises (`parlab.exercises`), at GPU scale so that the chapter's closed forms
(`parlab.compression.cost`, held equal to the ledger by the tests), not its printed numbers, answer
them: top-k's bytes (top-k with error feedback; DGC, Lin et al. 2018, adds momentum correction and
more), PowerSGD's floats (Vogels et al., 2019), signSGD's payload (Bernstein et al., 2018), where
top-k's all-gather overtakes the all-reduce, and Kwon et al.'s (AISTATS 2024) compressed network;
each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.compression import cost
from parlab.compression.compressors import Sign
from parlab.exercises import Exercise, find, numeric

GPT7B = [(7_000_000_000,)]  # a 7B model's gradients as one flat tensor


def _crossover(ratio: float = 0.01, shapes=GPT7B) -> int:
    """The smallest world size at which `topk` at `ratio` sends more bytes per rank than ddp-naive."""
    n = 2
    while cost.compression_ratio("topk", shapes, n, ratio=ratio) >= 1:
        n += 1
    return n


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    return {"topk-bytes-gpu": cost.bytes_per_step("topk", GPT7B, 64, ratio=0.01)["all_gather"],
            "powersgd-floats-gpu": sum(cost.powersgd_elements([(12288, 49152)], 4)),
            "sign-payload-gpu": Sign().payload_bytes(7_000_000_000),
            "topk-crossover": _crossover(),
            "lowdim-bytes-gpu": 2 * 7 / 8 * cost.dln_params(8192, 64, 4) * 4 / 1e6}


_A = answers()

# ----------------------------------------------------------------------------- Exercise form
# (`parlab.exercises`): Kwon et al. (AISTATS 2024), the compressed deep linear network at GPU scale
EXERCISES = [
    Exercise("topk-bytes-gpu", "Top-k at ratio 0.01 on a 7B-parameter model's gradients taken as one "
             "flat tensor (k = ⌈0.01·n⌉ pairs of int32 index and fp32 value), all-gathered over "
             "N = 64 GPUs. Bytes each GPU sends per step?", numeric(_A["topk-bytes-gpu"], rtol=0.005),
             "A message is 8 bytes per kept entry; a ring all-gather forwards the other N−1 ranks' "
             "messages.", "(N−1) · 8 · ⌈ratio · n⌉"),
    Exercise("powersgd-floats-gpu", "PowerSGD at rank r = 4 on one 12,288 × 49,152 weight matrix (a "
             "GPT-3 MLP projection). Floats one GPU contributes to its two all-reduces?",
             numeric(_A["powersgd-floats-gpu"], rtol=0, atol=0.5),
             "P = M Q is rows × r, then Q = Mᵀ P is cols × r.", "(rows + cols) · r"),
    Exercise("sign-payload-gpu", "One signSGD message for a 7·10⁹-element gradient: how many bytes?",
             numeric(_A["sign-payload-gpu"], rtol=0, atol=0.5),
             "One bit per element, rounded up to whole bytes, plus one fp32 scale.", "⌈n/8⌉ + 4"),
    Exercise("topk-crossover", "From which world size N on does top-k at ratio 0.01 (8 bytes per kept "
             "entry, all-gathered) send more bytes per GPU than a ring all-reduce of the same fp32 "
             "gradients (a 7B model, one flat tensor)?", numeric(_A["topk-crossover"], rtol=0, atol=0.5),
             "All-gather: (N−1)·8·ratio·Ψ per rank; all-reduce: 2(N−1)/N·4Ψ. Set them equal.",
             "8·ratio·N > 8 ⇔ N > 1/ratio, so the first N past it"),
    Exercise("lowdim-bytes-gpu",
             "A depth-4 deep linear network of width d = 8192 is compressed to width r̂ = 64 (Kwon "
             "et al.: W_1 r̂×d, two r̂×r̂ inner layers, W_4 d×r̂) and trained data-parallel on "
             "N = 8 GPUs in fp32. How many MB (10^6 bytes) does each GPU send per step in the ring "
             "all-reduce of its gradients?",
             numeric(_A["lowdim-bytes-gpu"], rtol=0.01),
             "Count the parameters first: 2·d·r̂ + (L−2)·r̂². A ring all-reduce sends 2(N−1)/N of "
             "the buffer, 4 bytes a float.",
             "Ψ = 2·8192·64 + 2·64² = 1,056,768 floats; 2·7/8·Ψ·4 B = 7.40 MB per GPU per step — the "
             "original network (4·8192² floats) would send 1,879 MB."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
