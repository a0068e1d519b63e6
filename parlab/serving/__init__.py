"""Chapter 12 — sharing and serving: two training jobs on one cluster, and a grouped network split
over edge devices for inference.

Papers: Luo et al., "CrossoverScheduler: Overlapping Multiple Distributed Training Applications in
a Crossover Manner" (2021): two data-parallel jobs time-share the same devices, each computing
while the other communicates. Lin & Wang, "Communication-Efficient Separable Neural Network for
Distributed Inference on Edge Devices" (2021): a ResNeXt-style network split by its groups across
edge devices, its transmission policy (which features each device sends) found by neural
architecture search with communication latency in the objective — 86.6% less data, little
accuracy lost. Ours: a saliency ranking (a baseline) and a relaxed-gate search priced by the
link's α-β time. Xie et al., "Aggregated Residual Transformations for Deep Neural Networks"
(ResNeXt, CVPR 2017): the grouped convolutions that make such a split natural.

Reading order:
  jobs.py        one job on a rank: own process group, ledger, timeline; a step in four hooks
  schedules.py   sequential, concurrent, crossover as data, and their validator
  sharing.py     `run_jobs`: the jobs on the same ranks under a schedule (through launch)
  images.py      the synthetic 16×16 shapes (data/shapes.npz, drawn by data/make_images.py)
  grouped.py     the ResNeXt-style grouped network, its masked mixing layers, training
  edge.py        the network split by groups over ranks: all features or selected channels
  masks.py       which channels cross devices: our saliency ranking (a baseline), fine-tuning
  sensors.py     a four-sensor task whose label needs features from two devices
  edge_search.py the transfer search: relaxed gates, the link's α-β time in the loss
  cost.py        closed forms: job bytes, schedule times, edge bytes and latency, break-even
  explore.py     what notebooks/12_serving.ipynb runs on the two jobs (explore/edge.py: the edge
                 split; explore/search.py: the search against the link); exercises.py: its
                 exercises; bench.py: `python -m parlab bench serving`
"""
