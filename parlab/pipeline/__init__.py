"""Chapter 04 — pipeline parallelism, built from data: schedules are per-rank action lists that are validated,
executed with `parlab.core.comm.Comm` send/recv, drawn, and costed by the same code.

- `schedules`: generators for naive model parallelism, GPipe (Huang et al. 2019), 1F1B
  (PipeDream-Flush, Narayanan et al. 2019/2021), interleaved 1F1B (Narayanan et al., SC 2021) and
  zero-bubble ZB-H1 (Qi et al., ICLR 2024).
- `validate`: the checker and list-scheduling simulator (dependencies, matched messages, deadlock).
- `cost`: ideal timelines and bubble fractions; the closed forms of the bytes a pipeline sends.
- `stages`: a stage of the reference model (its embed / blocks / head), so exactness follows.
- `partition`: per-layer profiling and dynamic-programming balancing of stages.
- `executor`: runs one rank's action list for one training step.
- `draw`: Gantt charts of ideal and measured timelines.
- `schemes`, `torch_pp`: the registered schemes; `explore` and `bench`: notebook 04 and
  `python -m parlab bench pipeline`.
"""
