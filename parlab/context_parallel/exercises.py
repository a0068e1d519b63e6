"""Chapter 06's exercises (`parlab.exercises`): GPU-scale worked problems (ring attention,
causal balance), two design problems (how far a ring can be cut and still hide its transfers
under GQA; USP's bytes over InfiniBand, Fang & Zhao 2024), a predict-then-run of Llama 3's
all-gather (Dubey et al. 2024, §3.3.2) and latent parallelism's blended reconstruction (Wu et
al. 2025, arXiv 2512.07350); each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.context_parallel import cost
from parlab.context_parallel.latent_parallel import blend_weights
from parlab.context_parallel.video_denoiser import VideoConfig
from parlab.core.link import ACCELERATORS, REAL
from parlab.exercises import Exercise, find, numeric

PREDICT = {"world_size": 2, "block_size": 128}  # the predict-then-run: cp-allgather, one step


def _blend_weight() -> float:
    """Rank 0's blend weight of patch 8 on a 12-patch axis, cp = 2, halo 3 (`blend_weights`)."""
    return blend_weights(VideoConfig(width=12), 2, 0, 2, 3)[8].item()


def _hiding_cp(T: int = 131072, n_head: int = 64, n_kv: int = 8) -> int:
    """The largest power-of-two cp whose causal zig-zag ring step (half a block: 2·B·t²·nh·hs
    flops) outlasts its K/V transfer (2·B·t·n_kv·hs values, 2 bytes) over NDR InfiniBand, the
    slowest hop of a ring across nodes of 8 H100s."""
    F, beta = ACCELERATORS["H100"].flops, REAL["NDR-IB"][1]
    t_min = 2 * n_kv * 2 * F / (2 * n_head * beta)  # tokens per rank where compute = transfer
    cp = 1
    while T / (2 * cp) >= t_min:
        cp *= 2
    return cp


def _predict_bytes() -> int:
    """cp-allgather's forward bytes per rank per step on the tiny GPT (`PREDICT`)."""
    return cost.allgather_bytes(12, 4, PREDICT["block_size"], 8, PREDICT["world_size"], 4)["cp-forward"]


def _contiguous_efficiency(cp: int = 8) -> float:
    return cost.critical_path("contiguous", cp)["efficiency"]


EXERCISES = [
    Exercise("ring-bytes-gpu",
             "Ring attention with cp = 16 on a 128k-token sequence, batch 1, 8 key/value heads of "
             "size 128, bf16. How many MB (10^6 B) of K and V does one GPU send per layer in the "
             "forward pass?",
             numeric(cost.ring_bytes(1, 8, 131072, 128, 16, 1, itemsize=2)["cp-forward"] / 1e6,
                     rtol=0.01),
             "Every rank passes on a K and a V block of T/cp tokens cp − 1 times.",
             "(cp − 1) · 2 · B·n_kv·(T/cp)·h_s · 2 B = 15 · 2 · 8 · 8,192 · 128 · 2 B = 503 MB."),
    Exercise("contiguous-efficiency",
             "Causal ring attention with a contiguous split into 2cp chunks (rank r holds chunks "
             "2r and 2r+1) at cp = 8: what is the efficiency, useful score blocks / (cp × critical "
             "path), the critical path summing the busiest rank's blocks at each ring step?",
             numeric(_contiguous_efficiency(8), rtol=0.01),
             "There are cp(2cp+1) useful blocks; after the first step the busiest rank computes 4 "
             "blocks every step.",
             "critical path 3 + 4(cp−1) = 4cp − 1 = 31 blocks; efficiency cp(2cp+1) / (cp(4cp−1)) "
             "= 17/31 = 0.548 (zig-zag: 1.0)."),
    Exercise("hiding-cp",
             "Design: Llama 3 70B shapes (64 query heads, 8 key/value heads, grouped-query "
             "attention: only the 8 K/V heads travel), T = 131,072 tokens, batch 1, bf16, ring "
             "attention with the zig-zag split on nodes of 8 H100s (400 TFLOP/s sustained bf16); "
             "the ring spans nodes, so every ring step waits for its InfiniBand hop (NDR, 50 GB/s "
             "per direction per GPU; ignore α). A causal zig-zag ring step computes half a full "
             "block. What is the largest cp, a power of two, at which each ring step's attention "
             "still outlasts its K/V transfer?",
             numeric(_hiding_cp(), rtol=0, atol=0.5),
             "Per rank t = T/cp tokens: half of a full block's 4·B·t²·n_h·h_s flops, ÷ F, against "
             "2·B·t·n_kv·h_s values × 2 B ÷ β; solve for the smallest t, then the largest cp.",
             "compute 4·B·t²·n_h·h_s/2 ÷ F ≥ 2·B·t·n_kv·h_s·2 ÷ β ⇔ t ≥ 2·n_kv·F/(n_h·β) = "
             "2·8·400e12/(64·50e9) = 2,000 tokens; T/cp ≥ 2,000 ⇔ cp ≤ 65.5: cp = 64 (8 nodes). "
             "GQA's 8× fewer K/V heads lets the ring go 8× wider than a multi-head model's would.",
             kind="design"),
    Exercise("usp-ib-bytes",
             "Design: USP (Fang & Zhao 2024), Ulysses × ring, for Llama 3 8B shapes at T = 131,072 "
             "on 2 nodes of 8 H100s: Ulysses of degree 8 inside each node (NVLink), a ring of "
             "degree 2 across the nodes (InfiniBand). After the all-to-all each GPU holds 1 of the "
             "8 key/value heads (size 128) for T/2 tokens; batch 1, bf16. How many MB (10^6 B) of "
             "K and V does one GPU send over InfiniBand per layer in the forward pass?",
             numeric(cost.usp_bytes(1, 8, 131072, 128, ulysses=8, ring=2)["ring"] / 1e6, rtol=0.01),
             "The ring of degree r passes a K and a V block of (n_kv/u) heads × T/r tokens r − 1 "
             "times.",
             "(r − 1) · 2 · B · (n_kv/u) · (T/r) · h_s · 2 B = 1 · 2 · 1 · 1 · 65,536 · 128 · 2 B "
             "= 33.6 MB; a plain ring of 16 would send 15 · 2 · 8 · 8,192 · 128 · 2 B = 503 MB per "
             "GPU, two of its 16 hops over InfiniBand.",
             kind="design"),
    Exercise("allgather-bytes",
             "Predict, then run the next cell: Llama 3's all-gather context parallelism "
             "(`cp-allgather`) on this chapter's tiny GPT — world_size 2, cp = 2, T = 128 tokens, "
             "batch 12, 4 heads of size 8, 4 layers, fp32 (4 B), one step. How many bytes does one "
             "rank send in the forward pass (the K/V all-gathers)?",
             numeric(_predict_bytes(), rtol=0.001),
             "Each layer all-gathers the stacked K and V: every rank sends its own shard, of "
             "2·B·n_h·(T/cp)·h_s values, to the cp − 1 others (a ring all-gather: cp − 1 rounds).",
             "4 layers · (cp − 1) · 2 · 12 · 4 · 64 · 8 · 4 B = 786,432 B — exactly the ring's "
             "forward bytes: the same K/V cross the same links, in one collective instead of cp − 1 "
             "exchanges, and with nothing to overlap them with.",
             kind="predict"),
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
