"""Notebook 08's exercises: each `check_*(answer, ...)` says correct or not quite, with a hint,
never the answer — top-k's bytes (Lin et al., DGC, 2018), PowerSGD's floats (Vogels et al.,
2019), signSGD's payload (Bernstein et al., 2018) and where top-k's all-gather overtakes the
all-reduce (`parlab.compression.cost`).
"""

from __future__ import annotations

from parlab.compression import cost
from parlab.compression.compressors import Sign
from parlab.compression.explore import param_shapes
from parlab.exercises import Exercise, find, numeric


def _verdict(ok: bool, hint: str) -> bool:
    print("correct" if ok else f"not quite (hint: {hint})")
    return ok


def check_topk_bytes(answer: int, world_size: int, ratio: float = 0.01) -> bool:
    """Bytes rank 0 sends per step with `topk` at `ratio` on the gpt model."""
    expect = cost.bytes_per_step("topk", param_shapes(), world_size, ratio=ratio)["all_gather"]
    return _verdict(answer == expect, "k = ⌈ratio·n⌉ per tensor, 8 bytes a pair, and an all-gather "
                    "sends every other rank's message on")


def check_powersgd_floats(answer: int, rows: int, cols: int, rank: int) -> bool:
    """Floats one rank contributes to PowerSGD's two all-reduces for one rows×cols matrix."""
    return _verdict(answer == sum(cost.powersgd_elements([(rows, cols)], rank)),
                    "P is rows×r, Q is cols×r")


def check_sign_payload(answer: int, numel: int) -> bool:
    """Bytes of one signSGD message for a tensor of `numel` elements."""
    return _verdict(answer == Sign().payload_bytes(numel), "one bit per element, rounded up to "
                    "whole bytes, plus the scale")


def check_crossover(answer: int, ratio: float = 0.01) -> bool:
    """The smallest world size at which `topk` at `ratio` sends more bytes per rank than ddp-naive."""
    shapes = param_shapes()
    n = 2
    while cost.compression_ratio("topk", shapes, n, ratio=ratio) >= 1:
        n += 1
    return _verdict(answer == n, "all-gather: (N-1)·P per rank; all-reduce: 2(N-1)/N·Ψ·4 — "
                    "set them equal")


# ----------------------------------------------------------------------------- Exercise form
# (`parlab.exercises`): Kwon et al. (AISTATS 2024), the compressed deep linear network at GPU scale
EXERCISES = [
    Exercise("lowdim-bytes-gpu",
             "A depth-4 deep linear network of width d = 8192 is compressed to width r̂ = 64 (Kwon "
             "et al.: W_1 r̂×d, two r̂×r̂ inner layers, W_4 d×r̂) and trained data-parallel on "
             "N = 8 GPUs in fp32. How many MB (10^6 bytes) does each GPU send per step in the ring "
             "all-reduce of its gradients?",
             numeric(2 * 7 / 8 * cost.dln_params(8192, 64, 4) * 4 / 1e6, rtol=0.01),
             "Count the parameters first: 2·d·r̂ + (L−2)·r̂². A ring all-reduce sends 2(N−1)/N of "
             "the buffer, 4 bytes a float.",
             "Ψ = 2·8192·64 + 2·64² = 1,056,768 floats; 2·7/8·Ψ·4 B = 7.40 MB per GPU per step — the "
             "original network (4·8192² floats) would send 1,879 MB."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
