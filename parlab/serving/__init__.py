"""Chapter 12 — sharing and serving: two training jobs on one cluster, and a grouped network split
over edge devices for inference.

Papers: Luo et al., "CrossoverScheduler: Overlapping Multiple Distributed Training Applications in
a Crossover Manner" (2021): two data-parallel jobs time-share the same devices, each computing
while the other communicates. Lin & Wang, "Communication-Efficient Separable Neural Network for
Distributed Inference on Edge Devices" (2021): a network split into groups across devices, where a
search keeps only the feature transfers that matter. Xie et al., "Aggregated Residual
Transformations for Deep Neural Networks" (ResNeXt, CVPR 2017): the grouped convolutions that
make such a split natural.

Reading order:
  jobs.py        one job on a rank: own process group, ledger, timeline; a step in four hooks
  schedules.py   sequential, concurrent, crossover as data, and their validator
  sharing.py     `run_jobs`: the jobs on the same ranks under a schedule (through launch)
  images.py      the synthetic 16×16 shapes (data/shapes.npz, drawn by data/make_images.py)
  grouped.py     the ResNeXt-style grouped network, its masked mixing layers, training
  edge.py        the network split by groups over ranks: all features or selected channels
  masks.py       which channels cross devices: a saliency search, then fine-tuning
  cost.py        closed forms: job bytes, schedule times, edge bytes and latency, break-even
  explore.py     what notebooks/12_serving.ipynb runs on the two jobs (explore_edge.py: the edge
                 split); exercises.py: its exercises; bench.py: `python -m parlab bench serving`
"""
