"""Chapter 05 — breaking backprop locking: local learning, interlocking backpropagation, and
pipelines that train on stale weights.

Backpropagation locks every stage three ways (forward, backward and update locking): stage k
cannot go on until every stage after it is done. Pipelines (chapter 04) hide part of the wait;
this chapter removes the locks themselves.

Papers: Belilovsky, Eickenberg, Oyallon, "Decoupled Greedy Learning of CNNs" (ICML 2020);
Gomez, Key, Perlin, Gou, Frosst, Dean, Gal, "Interlocking Backpropagation: Improving depthwise
model-parallelism" (JMLR 2022); Narayanan et al., "PipeDream: Generalized Pipeline
Parallelism for DNN Training" (SOSP 2019: 1F1B with weight stashing); Narayanan et al.,
"Memory-Efficient Pipeline-Parallel DNN Training" (PipeDream-2BW, ICML 2021); Akintoye, Han,
Lloyd, Zhang, Dancey, Chen, Zhang, "Layer-wise partitioning and merging for efficient and scalable
deep learning" (Future Generation Computer Systems 149, 2023).

Reading order: `layout` (dp × pp, stages cut from the reference model); `heads` (auxiliary
heads); `routes` (which losses' gradients cross which boundary); `local_boundary` (the autograd
Function of a decoupled boundary); `interlock` (one rank's step of `local` / `interlocking`);
`stash` (PipeDream's weight stashing, 2BW's double buffer); `emulate` (the one-process
reference); `cost` (closed forms); `schemes`, `explore`, `exercises`, `bench` (notebook 05);
`partition_merge`, `schemes_merge`, `explore.merge` (layer-wise merge). Each module in a line:
docs/local_learning.md, `parlab.local_learning`.
"""
