"""Chapter 06's exercises (`parlab.exercises`): GPU-scale worked problems (ring attention,
Ulysses, causal balance), closed forms of this chapter, and latent parallelism's blended
reconstruction (Wu et al. 2025, arXiv 2512.07350); each check says right or wrong, never the
answer.
"""

from __future__ import annotations

from parlab.context_parallel import cost
from parlab.context_parallel.cost import ulysses_bytes
from parlab.context_parallel.latent_parallel import blend_weights
from parlab.context_parallel.video_denoiser import VideoConfig
from parlab.exercises import Exercise, find, numeric


def _blend_weight() -> float:
    """Rank 0's blend weight of patch 8 on a 12-patch axis, cp = 2, halo 3 (`blend_weights`)."""
    return blend_weights(VideoConfig(width=12), 2, 0, 2, 3)[8].item()


def _contiguous_efficiency(cp: int = 8) -> float:
    return cost.critical_path("contiguous", cp)["efficiency"]


EXERCISES = [
    Exercise("score-bytes-gpu",
             "A 128k-token sequence (T = 131,072): how many GB (10^9 B) would one head's score "
             "matrix take in bf16 if it were materialised, as plain attention does for backward?",
             numeric(2 * 131072 ** 2 / 1e9, rtol=0.01),
             "T × T scores, 2 bytes each. (FlashAttention never materialises it: it keeps O(T) "
             "per head and recomputes the blocks in backward.)",
             "2 · 131,072² B = 34.4 GB for one head of one layer: why long context needs "
             "FlashAttention and context parallelism."),
    Exercise("ring-bytes-gpu",
             "Ring attention with cp = 16 on a 128k-token sequence, batch 1, 8 key/value heads of "
             "size 128, bf16. How many MB (10^6 B) of K and V does one GPU send per layer in the "
             "forward pass?",
             numeric(cost.ring_bytes(1, 8, 131072, 128, 16, 1, itemsize=2)["cp-forward"] / 1e6,
                     rtol=0.01),
             "Every rank passes on a K and a V block of T/cp tokens cp − 1 times.",
             "(cp − 1) · 2 · B·n_kv·(T/cp)·h_s · 2 B = 15 · 2 · 8 · 8,192 · 128 · 2 B = 503 MB."),
    Exercise("ulysses-vs-ring",
             "From the two closed forms (ulysses_bytes, ring_bytes), what is Ulysses' forward bytes "
             "per rank divided by ring attention's at cp = 8?",
             numeric(ulysses_bytes(1, 8, 1024, 64, 8, 1)["cp-forward"]
                     / cost.ring_bytes(1, 8, 1024, 64, 8, 1)["cp-forward"], rtol=0.01),
             "Ulysses: 4 all-to-alls of (cp−1)/cp of the rank's q/k/v/out slice; ring: cp − 1 "
             "sends of K and V.",
             "4(cp−1)/cp · S / (2(cp−1) · S) = 2/cp = 0.25 at cp = 8 (equal at cp = 2)."),
    Exercise("contiguous-efficiency",
             "Causal ring attention with a contiguous split into 2cp chunks (rank r holds chunks "
             "2r and 2r+1) at cp = 8: what is the efficiency, useful score blocks / (cp × critical "
             "path), the critical path summing the busiest rank's blocks at each ring step?",
             numeric(_contiguous_efficiency(8), rtol=0.01),
             "There are cp(2cp+1) useful blocks; after the first step the busiest rank computes 4 "
             "blocks every step.",
             "critical path 3 + 4(cp−1) = 4cp − 1 = 31 blocks; efficiency cp(2cp+1) / (cp(4cp−1)) "
             "= 17/31 = 0.548 (zig-zag: 1.0)."),
    Exercise("striped-owner",
             "Striped Attention (Brandon et al. 2023) balances the causal mask differently from "
             "zig-zag: it stripes tokens round-robin over the ranks. On cp = 4 ranks, which rank "
             "holds token 6 (counting tokens and ranks from 0)?",
             numeric(2, rtol=0, atol=0.1),
             "Token i goes to rank i mod cp.",
             "6 mod 4 = 2. (Zig-zag, from Llama 3 and ring-flash-attention, gives rank r the "
             "contiguous chunks r and 2cp−1−r instead.)"),
    Exercise("blend-weight",
             "Latent parallelism with reconstruction='blend': 2 ranks cut an axis of 12 patches "
             "into slabs [0, 6) and [6, 12), halo 3, so the regions are [0, 9) and [3, 12). A "
             "rank's raw weight for patch p of its region [lo, hi) is min(halo+1, p−lo+1, hi−p), "
             "the last two counted only at a border that is a cut (not the latent's edge); the "
             "weights are then divided by their sum over the ranks whose region holds p. What "
             "weight does rank 0 give patch 8?",
             numeric(_blend_weight(), rtol=0.01),
             "Patch 8 is the last patch of rank 0's region, and 3 patches into rank 1's slab.",
             "Rank 0: min(4, 9−8) = 1 (its edge at 0 is the latent's, not a cut). Rank 1: "
             "min(4, 8−3+1, 12−8 ignored) = 4. Rank 0's share: 1/(1+4) = 0.2 — the value "
             "computed at the edge of a region, with the least context, counts least."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
