"""Chapter 05 — breaking backprop locking: local learning, interlocking backpropagation, and
pipelines that train on stale weights.

Backpropagation locks every stage three ways (Jaderberg et al.'s forward, backward and update
locking, as Gomez et al. and Belilovsky et al. name them): stage k cannot run the next batch's
forward, its backward, or its update until every stage after it is done. Pipelines (chapter 04)
hide part of the wait with micro-batches; this chapter removes the locks themselves.

Papers: Belilovsky, Eickenberg, Oyallon, "Decoupled Greedy Learning of CNNs" (ICML 2020);
Gomez, Key, Perlin, Gou, Frosst, Dean, Gal, "Interlocking Backpropagation: Improving depthwise
model-parallelism" (JMLR 2022); Harlap et al. / Narayanan et al., "PipeDream: Generalized Pipeline
Parallelism for DNN Training" (SOSP 2019: 1F1B with weight stashing); Narayanan et al.,
"Memory-Efficient Pipeline-Parallel DNN Training" (PipeDream-2BW, ICML 2021); Akintoye, Han,
Lloyd, Zhang, Dancey, Chen, Zhang, "Layer-wise partitioning and merging for efficient and scalable
deep learning" (Future Generation Computer Systems 149, 2023: a layer-wise partition-and-merge
model that cuts inter-device communication without the memory of weight stashing, and
forward/backward parallelisation against update locking).

Reading order:

- `layout`: a configuration resolved into dp × pp, micro-batches and stages cut from the reference
  model (chapter 04's `stages`), so every stage starts from the reference's weights.
- `heads`: the auxiliary head each non-last stage trains through (its local loss).
- `routes`: which losses' gradients cross which boundary at a given `depth`, the order of a
  stage's forwards and backwards, and when the tied embedding may stay tied.
- `local_boundary`: the named autograd Function of a decoupled boundary, and the backward of a stage
  whose gradient arrives in components (one per loss still within reach).
- `interlock`: one rank's step of `local` / `interlocking`: activations up, gradient components
  down, nothing beyond `depth` boundaries.
- `stash`: PipeDream's weight stashing and PipeDream-2BW's double buffer, with the version each
  backward used recorded.
- `emulate`: the same objectives in one process, the reference the distributed runs equal.
- `cost`: bytes per boundary, stashed versions, idle fractions, in closed form.
- `schemes`: `local`, `interlocking`, `pipedream`, `pipedream-2bw`; `explore` (with
  `explore.timing`: the paced timing sweep, idle fractions, loss curves), `exercises` and `bench`:
  notebook 05 and `python -m parlab bench local_learning`.
- `partition_merge`: layer-wise partitions merged into k stages × dp replicas by a counted
  step-time model (Akintoye et al.; what is ours is stated there); `schemes_merge`: the scheme
  `layerwise-merge` (synchronous 1F1B, no stash, exact); `explore.merge`: its notebook section
  beside PipeDream and 2BW.
"""
