"""Chapter 09 — asynchrony: parameter servers, bounded staleness, asynchronous iterations.

A parameter server lets workers push gradients at their own pace, at the price of staleness;
bounded staleness sits between that and a synchronous step; the theory of asynchronous
iterations says when updating with stale values still converges.

Papers: Dean et al., "Large Scale Distributed Deep Networks" (NeurIPS 2012, DistBelief and
Downpour SGD); Li et al., "Scaling Distributed Machine Learning with the Parameter Server"
(OSDI 2014); Ho et al., "More Effective Distributed ML via a Stale Synchronous Parallel Parameter
Server" (NeurIPS 2013, SSP); Lu et al., "Hybrid Dual-Batch and Cyclic Progressive Learning for
Efficient Distributed Training" (2025); Chazan & Miranker, "Chaotic relaxation" (1969); Baudet,
"Asynchronous iterative methods for multiprocessors" (JACM 1978); Bertsekas & Tsitsiklis,
"Parallel and Distributed Computation: Numerical Methods" (1989, totally asynchronous
iterations, macroiterations); Miellou, El Baz & Spiteri, "A new class of asynchronous iterative
algorithms with order intervals" (Math. Comp. 1998, flexible communication).

Reading order: `delays`, `versions`, `server`, `dualbatch`, `jacobi` (with `jacobi_virtual`,
`jacobi_solver`), `cost`, `schemes`; `explore` and its parts, `exercises` and `bench` (notebook
09). Each module in a line: docs/asynchrony.md, `parlab.asynchrony`.
"""
