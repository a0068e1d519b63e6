"""Chapter 07 — expert parallelism: mixture-of-experts layers whose experts live on different ranks.

Papers: Shazeer et al., "Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts
Layer" (ICLR 2017: top-k routing); Lepikhin et al., "GShard" (2020: experts sharded over devices,
capacity and dropping, tokens moved by all-to-all); Fedus et al., "Switch Transformers" (JMLR
2022: top-1, capacity factor, the load-balancing loss); Dai et al., "DeepSeek-MoE" (2024: shared
experts) and DeepSeek-AI, "DeepSeek-V3 Technical Report" (2024: balancing by a per-expert bias,
without an auxiliary loss).

Reading order: the model `parlab.models.gpt_moe` (router, routing rule, capacity, the MoE layer),
then `ops` (dispatch / combine all-to-all and the all-gather alternative as autograd Functions),
`layer` (the MoE with its experts sharded over the ep group), `cost` (bytes from the routing
counts, memory), `schemes` (`ep`, `ep-allgather`); `explore`, `exercises` and `bench`.
"""
