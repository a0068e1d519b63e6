"""Chapter 10 — Subnetwork Data Parallelism (SDP).

Paper: Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data Parallelism",
2025 (arXiv 2507.09029). Each rank trains a structured subnetwork of the model on its own rows of
the batch; no activation ever crosses ranks; each parameter is owned by k of the N ranks and its
gradient is averaged among its owners only. Backward masking runs the full model forward and
masks the gradient (an unbiased estimate from fewer rows); forward masking runs the subnetwork
alone (less compute and memory, a biased gradient). Subnetworks are cut per neuron or per block
(the paper finds blocks better and explains it by gradient alignment).

Reading order: `ownership` (who owns which slices), `masking` (a rank's model), `sync`
(owner-group averaging, the Strategy), `emulate` (one process; gradient alignment), `cost`,
`schemes` (`sdp`), `explore`, `exercises`, `bench` (notebook 10). Each module in a line:
docs/subnet.md, `parlab.subnet`.
"""
