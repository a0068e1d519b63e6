"""Chapter 13, scaling: how each dimension scales from 1 to 64 ranks, a real model's size and
real hardware, and energy where a counter is readable.

Papers: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC 2021: Table 1, eq. 3 FLOPs); Go et al., "Characterizing the Efficiency of
Distributed Training: A Power, Performance, and Thermal Perspective" (2025, arXiv 2509.10371).
Derivations: docs/planner.md.

Reading order: `points` (strong and weak scaling points on paced A100 time, and the state a rank
holds), `step_model` (a point's step time from counted compute, the ledger's α-β, overlap and the
simulated schedule), `bench_scale` (`python -m parlab bench scale`), `extrapolate` (the analytic
model on A100/H100 clusters and 1.7–76 B GPTs), `megatron_runs` (Megatron's Table 1 rows run
shapes-only), `real_scale` (scaling and the planner at a real preset's shapes), `energy` (the RAPL
counter, where readable).
"""
