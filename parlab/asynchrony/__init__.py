"""Chapter 09 — asynchrony: parameter servers, bounded staleness, asynchronous iterations.

A synchronous step waits for the slowest worker. A parameter server lets workers pull the
parameters, compute a gradient and push it back at their own pace: the server applies what
arrives, so a fast worker never waits, and the price is staleness (a gradient computed on a
version of the parameters that updates have since moved past). Bounded staleness sits between
the two; the theory of asynchronous iterations says when updating with stale values still
converges.

Papers: Dean et al., "Large Scale Distributed Deep Networks" (NeurIPS 2012, DistBelief and
Downpour SGD); Li et al., "Scaling Distributed Machine Learning with the Parameter Server"
(OSDI 2014); Ho et al., "More Effective Distributed ML via a Stale Synchronous Parallel Parameter
Server" (NeurIPS 2013, SSP); Lu et al., "Hybrid Dual-Batch and Cyclic Progressive Learning for
Efficient Distributed Training" (2025); Chazan & Miranker, "Chaotic relaxation" (1969); Baudet,
"Asynchronous iterative methods for multiprocessors" (JACM 1978); Bertsekas & Tsitsiklis,
"Parallel and Distributed Computation: Numerical Methods" (1989, totally asynchronous
iterations, macroiterations); Miellou, El Baz & Spiteri, "A new class of asynchronous iterative
algorithms with order intervals" (Math. Comp. 1998, flexible communication).

Reading order: `delays` (a seeded delay schedule: reproducible asynchrony), `versions` (the
server's bookkeeping: which version each gradient was computed on, staleness control, job
assignment; pure, no processes), `server` (the server and worker strategies over non-blocking
send/recv through `Comm`, the parameters sharded over `servers` ranks), `dualbatch` (large- and
small-batch workers, cyclic progressive sequence lengths), `jacobi` (block-Jacobi for a 2-D
Poisson problem: synchronous, totally asynchronous and flexible communication, macroiterations;
`jacobi_virtual`: its deterministic timetable, `jacobi_solver`: the ranks and `solve`);
`cost` (closed forms), `schemes`; `explore` (part A), `explore.ssp` (SSP: jitter vs a persistent
straggler), `explore.sharded`, `explore.dualbatch` (part B), `explore.jacobi` (part C),
`explore.flexible` (part D), `explore.summary` (each part's "when to use it"), `exercises` and
`bench` (what notebook 09 and `python -m parlab bench asynchrony` run).
"""
