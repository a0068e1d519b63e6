"""Chapter 13, operator placement: put every operator of a graph on a rank and order each rank's
work so that a training step ends earliest, under memory per rank.

Papers: She et al., "Automatic Operator-level Parallelism Planning for Distributed Deep Learning —
A Mixed-Integer Programming Approach" (2025, arXiv 2503.09357: the MILP and its bi-level
decomposition, compared with DualPipe at equal memory); DeepSeek-AI, "DeepSeek-V3 Technical
Report" (2024, §3.2.1: DualPipe); Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024: B/W).
Derivations: docs/planner.md.

Reading order: `measured_graph` (the branchy model `parlab.models.op_graph` with measured op
times), `op_costs` (what the planner knows of a graph: costs, memory), `tasks` (F/B/W tasks,
precedences, a `PlacementPlan` and its timing `evaluate`), `exhaustive` (enumeration, greedy),
`milp` (the mixed-integer program), `bilevel` (merge-then-place), `pipeline_1f1b` (a 1F1B pipeline
of the same graph as a plan); `placed`, `placed_cost`, `schemes` (the placed runtime, its ledger's
closed form and the scheme "placed"); `schedule_mip`, `compare` (the planner against DualPipe and
1F1B on chapter 04's schedules); `layer_graph`, `real_layers` (the same on gpt2-xl's layers).
"""
