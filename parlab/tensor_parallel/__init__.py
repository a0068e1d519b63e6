"""Chapter 03 — tensor and sequence parallelism, and resharding between meshes.

Papers: Shoeybi et al., "Megatron-LM" (2019: f and g); Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models" (MLSys 2023: sequence parallelism); Zhuang et al.,
"On Optimizing the Communication of Model Parallelism" (AlpaComm, MLSys 2023: cross-mesh
resharding); Wang et al., "Overlap Communication with Dependent Computation via Decomposition in
Large Deep Learning Models" (ASPLOS 2023: async TP).

Reading order: `ops` (the named autograd Functions), `async_ops` (the same, overlapped ring
steps), `layers` (column/row-parallel linears, the attention and MLP they plug into), `vocab`
(vocabulary-parallel embedding and cross-entropy), `apply` (`apply_tp`: the one GPT cut over a
mesh's tp dimension, even or uneven shares), `cost`, `reshard` (with `alpacomm`: the paper's
whole-tile sender choice and send-order search), `schemes`, `torch_tp`; `explore` (parts 4-8,
11), `explore.reshard_paced` and `explore.reshard_paced_show` (part 9, paced; `explore.reshard`:
the same on the wall clock, for the bench), `explore.figures`, `explore.summary` (when to use it,
from the run), `exercises` and `bench`.
"""
