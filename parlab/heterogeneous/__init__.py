"""Chapter 11: heterogeneous clusters — stragglers, shares by speed, backup workers.

Papers: Zhang et al., "HAP: SPMD DNN Training on Heterogeneous GPU Clusters with Automated Program
Synthesis" (EuroSys 2024): sharding ratios by linear programming over device speeds and link
bandwidths. Chen, Pan, Monga, Bengio & Jozefowicz, "Revisiting Distributed Synchronous SGD"
(2016): backup workers, the step uses the first N−b gradients.

Reading order: `parlab.core.speeds` (a slow device, emulated) and `parlab.core.topology` (two nodes,
fast inside, slow between), then `shares.py` (even, proportional, the LP), `weighted.py` (uneven
shares, exact), `backup.py` (drop the stragglers), then tensor parallelism on unequal devices:
`tp_shares.py` (one sharding ratio per device by HAP's LP, cut into heads, columns, positions),
`uneven.py` (uneven all-gather / reduce-scatter, padded or exact), `tp_layers.py` (the uneven
column- and row-parallel linears that chapter 03's `apply_tp` plugs into the GPT); then HAP's
program search: `programs.py` (one sharding choice per operator, the layouts and reshardings),
`hap_time.py` (a program's compute and communication),
`program_search.py` (A* alternating with the ratio LP), `hap_layers.py` (a program, run);
`cost.py` (bytes and step time), `schemes.py`, `schemes_hap.py`, `explore.py`,
`explore/tp.py` and `explore/hap.py` (what the notebook runs), `exercises.py`, `bench.py`.
"""
