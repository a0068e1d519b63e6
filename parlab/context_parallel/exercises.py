"""Chapter 06's exercises (`parlab.exercises`): causal balance, four design problems (the ring
that fits a 1M-token sequence's K/V; how far a ring can be cut and still hide its transfers under
GQA; USP's bytes over InfiniBand, Fang & Zhao 2024; the halo for latent parallelism's blended
reconstruction, Wu et al. 2025, arXiv 2512.07350) and a predict-then-run of Llama 3's all-gather
(Dubey et al. 2024, §3.3.2); each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.context_parallel import cost
from parlab.context_parallel.latent_parallel import blend_weights
from parlab.context_parallel.video_denoiser import VideoConfig
from parlab.core.link import ACCELERATORS, REAL
from parlab.exercises import Exercise, find, numeric

PREDICT = {"world_size": 2, "block_size": 128}  # the predict-then-run: cp-allgather, one step


def _blend_halo(width: int = 256, cp: int = 8, share: float = 0.08) -> int:
    """The smallest halo at which the last patch of a region (rank 3's, along the width) gets at
    most `share` of the blend (`blend_weights`)."""
    halo = 1
    while blend_weights(VideoConfig(width=width), 2, 3, cp, halo)[-1].item() > share:
        halo += 1
    return halo


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


def _kv_fit_cp(T: int = 1048576, n_kv: int = 8, hs: int = 128, n_layer: int = 32,
               budget: float = 20e9) -> int:
    """The smallest power-of-two cp whose K/V (every layer's shard kept, plus two blocks in
    flight) fits `budget` bytes per GPU, bf16, batch 1."""
    layer_kv = 2 * n_kv * T * hs * 2  # (K, V) × (B, n_kv, T, hs) × 2 B
    cp = 1
    while (n_layer + 2) * layer_kv / cp > budget:
        cp *= 2
    return cp


_A = {"ring-bytes-gpu": cost.ring_bytes(1, 8, 1048576, 128, _kv_fit_cp(), 1,
                                        itemsize=2)["cp-forward"] / 1e6,
      "blend-halo": _blend_halo()}


EXERCISES = [
    Exercise("ring-bytes-gpu",
             "Design: ring attention on a 1,048,576-token sequence (1M), Llama 3 8B shapes (32 "
             "layers, 8 key/value heads of size 128, bf16, batch 1), on H100s. Each GPU keeps its "
             "own K and V shard of every layer for the backward pass and, during a layer's "
             "forward, holds two more blocks of that size in flight (the one it computes with and "
             "the one arriving). With 20 GB (10^9 B) per GPU set aside for K and V, take the "
             "smallest power-of-two cp that fits: how many MB (10^6 B) of K and V does one GPU "
             "then send per layer in the forward pass?",
             numeric(_A["ring-bytes-gpu"], rtol=0.01),
             "First the memory: one layer's K and V for the whole sequence, divided over cp, "
             "times (layers + 2), must fit in the budget. Then the ring: what does a rank pass on, "
             "and how many times?",
             "One layer's K and V: 2·B·n_kv·T·h_s·2 B = 2·8·1,048,576·128·2 B = 4.29 GB; held: "
             "(32 + 2)·4.29 GB/cp ≤ 20 GB ⇔ cp ≥ 7.3: cp = 8 (18.3 GB; cp = 4 would need 36.5). "
             "Sent: (cp − 1)·4.29 GB/cp = 7/8·4.29 GB = 3,758 MB per layer — nearly the whole "
             "layer's K/V, whatever cp: a wider ring saves memory, not bytes per GPU.",
             kind="design"),
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
    Exercise("blend-halo",
             "Design: latent parallelism with reconstruction='blend' on a video latent 256 patches "
             "wide, cut along the width over cp = 8 GPUs (slabs of 32 patches). The patch at the "
             "far edge of a rank's region is the one it computed with the least context; you want "
             "that rank's value there to carry at most 8% of the blended result. What is the "
             "smallest halo (in patches) that does it?",
             numeric(_A["blend-halo"], rtol=0, atol=0.5),
             "Write both ranks' raw weights at the last patch of a region as functions of the halo "
             "h (which ranks hold that patch while h is under half a slab?), then the share.",
             "The last patch of rank r's region lies h − 1 patches into rank r+1's slab: rank r's "
             "raw weight there is 1 (one patch from its cut border), rank r+1's is h+1 (inside its "
             "slab). Share 1/(h+2) ≤ 0.08 ⇔ h ≥ 10.5: h = 11 (1/13 = 7.7%; h = 10 gives 8.3%). "
             "Compute and bytes grow with h, the seam's weight falls only as 1/(h+2)."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
