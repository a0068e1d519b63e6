"""Chapter 12 — sharing and serving: two training jobs on one cluster, and a grouped network split
over edge devices for inference.

Papers: Luo et al., "CrossoverScheduler: Overlapping Multiple Distributed Training Applications in
a Crossover Manner" (2021): two data-parallel jobs time-share the same devices, each computing
while the other communicates. Lin & Wang, "Communication-Efficient Separable Neural Network for
Distributed Inference on Edge Devices" (2021): a grouped network split across edge devices, its
transmission policy found by architecture search with latency in the objective (ours: a saliency
baseline and a relaxed-gate search priced by the link's α-β time). Xie et al., "Aggregated
Residual Transformations for Deep Neural Networks" (ResNeXt, CVPR 2017).

Reading order: `jobs`, `schedules`, `sharing` (the two jobs); `images`, `grouped`, `edge`,
`masks`, `sensors`, `edge_search` (the edge split); `cost` (closed forms); `explore` and its
parts, `exercises`, `bench` (notebook 12). Each module in a line: docs/serving.md, `parlab.serving`.
"""
