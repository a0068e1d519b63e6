"""Chapter 08 — fewer bytes: gradient compression, low-rank updates, local SGD and DiLoCo.

Data parallelism sends every gradient element every step. This chapter sends fewer bytes per step
or communicates less often. Each is one more strategy on the data-parallel loop; each is lossy,
with its own tested bound, and each moves its bytes through `Comm` at their true compressed size.

Papers: Ouyang et al., "Communication optimization strategies for distributed deep neural network
training: A survey" (2020, the taxonomy); Lin et al., "Deep Gradient Compression" (ICLR 2018,
top-k); Stich, Cordonnier & Jaggi, "Sparsified SGD with Memory" (NeurIPS 2018, random-k, error
feedback); Alistarh et al., "QSGD" (NeurIPS 2017); Bernstein et al., "signSGD" (ICML 2018);
Karimireddy et al., "Error Feedback Fixes SignSGD" (ICML 2019); Vogels, Karimireddy & Jaggi,
"PowerSGD" (NeurIPS 2019); Stich, "Local SGD Converges Fast and Communicates Little" (ICLR 2019);
Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models" (2023).

Reading order: `packing` (bits and raw bytes on the wire), `compressors` (top-k, random-k, QSGD,
sign: encode/decode at a fixed message size), `sync` (error feedback, the all-gather reducer and
its strategy), `powersgd` (rank-r factors, all-reduced), `local_sgd` (Local SGD, DiLoCo); `cost`
(closed forms), `compressed_reducers` (a compressor's reducer by its scheme's name, for
`data_parallel.apply_dp`), `schemes`; `explore`, `exercises` and `bench` (what notebook 08 and
`python -m parlab bench compression` run).
"""
