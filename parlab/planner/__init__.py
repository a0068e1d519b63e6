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
"Automatic Operator-level Parallelism Planning for Distributed Deep Learning — A Mixed-Integer
Programming Approach" (2025: operators placed and ordered by a MIP under memory capacity, solved
bi-level, compared with DualPipe at equal memory); Go et al., "Characterizing the Efficiency of
Distributed Training: A Power, Performance, and Thermal Perspective" (2025: throughput, power and
temperature of TP/PP/DP/EP training on H100/H200/MI250 clusters — its performance half is the
sweep here; power and thermals are not measured, energy only where RAPL is readable).

Reading order:

- `plan`: a `Plan` (degrees and knobs), its problems named up front, every valid plan.
- `compose`: `apply_tp`, `apply_cp`, `apply_ep`, `split_pp`, `apply_dp` / `apply_zero` over one
  `Mesh`; `cost`: every dimension's closed-form bytes composed (the chapters' `cost.py`).
- `schemes`: the scheme `nd` (dp=, tp=, pp=, cp=, ep=, zero=, microbatches=, schedule=).
- `profile`, `paced`, `costmodel`, `plan_memory`, `search`: the compute profile (timed on the
  wall clock, counted in virtual time), the predicted step time (a blocking α-β model, A100
  seconds on `clock="A100"`) and peak memory of any plan, the planner, and its judge
  (calibrated leave one out).
- `graph`, `placement`, `placement_milp`, `placement_bilevel`, `placement_1f1b`: operator-level
  placement of a branchy graph (the model `parlab.models.op_graph`) under memory per rank, solved
  exactly (MILP, checked by exhaustive search) and by the paper's merge-then-place decomposition,
  beside a 1F1B pipeline of the same graph; a plan runs through `parlab.run("placed", plan=...)`
  (the executor: `parlab.planner.placed`) and equals `parlab.run("single", model="op-graph")`
  (`placement_costs`: what the planner knows of a graph, memory included);
  `placement_dualpipe`, `placement_compare`: the planner against DualPipe and 1F1B at equal memory;
  `placed`, `placed_cost`, `schemes_placed`: the placed runtime (chapter 04's executor, op by op)
  and its scheme `placed`; `layer_graph`, `placement_layers`: the same question on real gpt2-xl
  layers (attention and MLP, backward split into B and W) against DualPipe at its memory.
- `trace_replay`, `whatif`: MAD-Max's replay (Hsia et al. 2024) — a run's trace replayed with
  compute and communication on their own streams, and each plan of a real-size model traced once
  (shapes-only) and replayed under what-ifs (2× FLOP/s, 2× bandwidth, ½ α, an H100 system),
  checked against shapes-only runs under the same change (`python -m parlab bench whatif`).
- `energy`: the RAPL energy counter, where the machine exposes one.
- `extrapolate`: the same model on real hardware and 1B–70B models.
- `explore` (with `explore.guide`: the mesh drawn and which scheme when, `explore.placement`
  and `explore.placement_run` (a plan run, and what the run says),
  `explore.energy`: Go et al.'s characterization, what is measured here and what is not),
  `exercises` and `bench`: notebook 13 and `python -m parlab bench planner`.
"""
