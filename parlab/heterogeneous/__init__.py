"""Chapter 11: heterogeneous clusters — stragglers, shares by speed, backup workers.

Papers: Zhang et al., "HAP: SPMD DNN Training on Heterogeneous GPU Clusters with Automated Program
Synthesis" (EuroSys 2024): sharding ratios by linear programming over device speeds and link
bandwidths. Chen, Pan, Monga, Bengio & Jozefowicz, "Revisiting Distributed Synchronous SGD"
(2016): backup workers, the step uses the first N−b gradients.

Reading order: `parlab.core.speeds`, `parlab.core.topology`; `shares`, `weighted`, `backup`
(data parallelism); `tp_shares`, `uneven`, `tp_layers` (tensor parallelism on unequal devices);
`programs`, `hap_time`, `program_search`, `hap_layers` (HAP's program search); `cost`,
`schemes`, `schemes_hap`, `explore` and its parts, `exercises`, `bench` (notebook 11). Each
module in a line: docs/heterogeneous.md, `parlab.heterogeneous`.
"""
