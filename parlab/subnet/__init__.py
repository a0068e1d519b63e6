"""Chapter 10 — Subnetwork Data Parallelism (SDP).

Paper: Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data Parallelism",
2025 (arXiv 2507.09029). Each rank trains a structured subnetwork of the model on its own rows of
the batch; no activation ever crosses ranks; each parameter is owned by k of the N ranks and its
gradient is averaged among its owners only. Backward masking runs the full model forward and
masks the gradient (an unbiased estimate from fewer rows); forward masking runs the subnetwork
alone (less compute and memory, a biased gradient). Subnetworks are cut per neuron (the hidden
units of each feed-forward layer) or per block (whole residual blocks, which the paper finds
better and explains by gradient alignment).

Reading order:
  ownership.py  which ranks own which parameter slices (units, k of N, neuron or block level)
  masking.py    a rank's model: only its slices (forward masking) or all, frozen where not owned
  sync.py       owner-group gradient averaging, the parameter refresh, the Strategy
  emulate.py    the same training in one process by masked sum ÷ owner count; gradient alignment
  cost.py       memory per rank and bytes per rank, closed forms
  schemes.py    `sdp` (owners=, mask=, granularity=)
  explore.py    what notebooks/10_subnet.ipynb runs; exercises.py: its exercises
  bench.py      `python -m parlab bench subnet`
"""
