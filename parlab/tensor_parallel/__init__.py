"""Chapter 03 — tensor and sequence parallelism, and resharding between meshes.

Papers: Shoeybi et al., "Megatron-LM" (2019: f and g); Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models" (MLSys 2023: sequence parallelism); Zhuang et al.,
"On Optimizing the Communication of Model Parallelism" (AlpaComm, MLSys 2023: cross-mesh
resharding).

Reading order: `ops` (the named autograd Functions), `layers` (column/row-parallel layers and
the parallel GPT), `vocab` (vocabulary-parallel embedding and cross-entropy), `cost`,
`reshard`, `schemes`, `torch_tp`; `explore`, `explore_figures` and `bench`.
"""
