"""Chapter 13 — composing DP × TP × PP × CP (× EP) on one mesh, a calibrated cost model, and an
automatic planner.

Every dimension built in chapters 01–07 composes on one named mesh; the cost model predicts every
composition from a measured per-layer compute profile, the α-β fit of chapter 00 and each
chapter's closed forms; a planner picks a plan under a memory cap; an operator-level planner
places the operators of a small branchy graph exactly.

Papers: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC 2021: the PTD-P rules); Zheng et al., "Alpa: Automating Inter- and Intra-Operator
Parallelism for Distributed Deep Learning" (OSDI 2022); Hsia et al., "MAD-Max Beyond Single-Node:
Enabling Large Machine Learning Model Acceleration on Distributed Systems" (ISCA 2024); She et al.,
operator-level MIP planning (2025); Go et al., power/performance characterization of distributed
training (2025).

Reading order:

- `plan`: a `Plan` (degrees and knobs), its problems named up front, every valid plan.
- `compose`: `apply_tp`, `apply_cp`, `apply_ep`, `split_pp`, `apply_dp` / `apply_zero` over one
  `Mesh`; `cost`: every dimension's closed-form bytes composed (the chapters' `cost.py`).
- `schemes`: the scheme `nd` (dp=, tp=, pp=, cp=, ep=, zero=, microbatches=, schedule=).
- `profile`, `paced`, `costmodel`, `plan_memory`, `search`: the compute profile (timed on the
  wall clock, counted in paced time), the predicted step time (paced seconds on `clock="A100"`)
  and peak memory of any plan, the planner, and its judge (calibrated leave one out).
- `graph`, `placement`, `placement_milp`, `placement_run`: operator-level placement of a branchy graph, solved
  exactly (MILP, checked by exhaustive search) and run with send/recv beside a 1F1B pipeline.
- `extrapolate`: the same model on real hardware and 1B–70B models.
- `explore` (with `explore_guide`: the mesh drawn and which scheme when, `explore_placement`),
  `exercises` and `bench`: notebook 13 and `python -m parlab bench planner`.
"""
