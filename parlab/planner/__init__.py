"""Chapter 13 — composing DP × TP × PP × CP (× EP) on one mesh, a calibrated cost model, and an
automatic planner; operator placement and scaling in two subpackages.

Every dimension built in chapters 01–07 composes on one named mesh; the cost model predicts every
composition from a per-layer compute profile, the α-β fit of chapter 00 and each chapter's closed
forms; a planner picks a plan under a memory cap.

Papers: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC 2021: the PTD-P rules); Zheng et al., "Alpa" (OSDI 2022); Hsia et al.,
"MAD-Max Beyond Single-Node" (ISCA 2024: trace replay and what-ifs); She et al., "Automatic
Operator-level Parallelism Planning for Distributed Deep Learning" (2025: `placement`); Go et al.,
"Characterizing the Efficiency of Distributed Training" (2025: `scaling.energy`). Derivations:
docs/planner.md.

Reading order:

- `plan`: a `Plan` (degrees and knobs), its problems named up front, every valid plan.
- `compose`: `apply_tp`, `apply_cp`, `apply_ep`, `split_pp`, `apply_dp` / `apply_zero` over one
  `Mesh`; `cost`: every dimension's closed-form bytes composed; `schemes`: the scheme `nd`.
- `profile`, `counted_profile`, `costmodel`, `plan_memory`, `search`, `calibration`: the compute
  profile (timed on the wall clock, or counted and priced for a paced clock), the predicted step
  time and peak memory of any plan, the planner and its judge (calibrated leave one out).
- `trace_replay`, `whatif`: MAD-Max's replay — a run's trace replayed under what-ifs.
- `placement/` (operator placement: the MILP, the decomposition, DualPipe at equal memory, the
  placed runtime, scheme "placed"; read its `__init__`).
- `scaling/` (strong and weak scaling, Megatron's Table 1 shapes-only, a real preset's scaling,
  extrapolation to real hardware, energy; read its `__init__`).
- `explore` (the notebook's parts, `explore.guide`, `explore.placement_*`, `explore.energy`, ...),
  `exercises` and `bench`: notebook 13 and `python -m parlab bench planner`.
"""
