"""Chapter 06 — context parallelism: the sequence split over ranks.

Papers: Liu et al., "Ring Attention with Blockwise Transformers" (ICLR 2024); Jacobs et al.,
"DeepSpeed Ulysses" (2023); Dubey et al., "The Llama 3 Herd of Models" (2024, §3.3.2: zig-zag
context parallelism); the latent-parallelism paper for video diffusion (rotating latent
partitions with a halo).

Reading order: `ring_attention` (online-softmax merge, K/V ring, zig-zag layout),
`ring_recompute`, `ulysses`, `latent_parallel`, `cost` (every closed form), `schemes`; `explore`
(with `explore.regime`: where the ring hides its transfers), `exercises` and `bench`.
"""
