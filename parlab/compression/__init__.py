"""Chapter 08 — fewer bytes: gradient compression, low-rank updates, local SGD and DiLoCo.

Each is one more strategy on the data-parallel loop, lossy with its own tested bound, moving its
bytes through `Comm` at their true compressed size.

Papers: Ouyang et al., "Communication optimization strategies for distributed deep neural network
training: A survey" (2020, the taxonomy); Lin et al., "Deep Gradient Compression" (ICLR 2018,
top-k); Stich, Cordonnier & Jaggi, "Sparsified SGD with Memory" (NeurIPS 2018, random-k, error
feedback); Alistarh et al., "QSGD" (NeurIPS 2017); Bernstein et al., "signSGD" (ICML 2018);
Karimireddy et al., "Error Feedback Fixes SignSGD" (ICML 2019); Vogels, Karimireddy & Jaggi,
"PowerSGD" (NeurIPS 2019); Stich, "Local SGD Converges Fast and Communicates Little" (ICLR 2019);
Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models" (2023).

Reading order: `packing`, `compressors`, `sync`, `powersgd`, `local_sgd`, `cost`,
`compressed_reducers`, `schemes`; `explore`, `exercises`, `bench` (notebook 08). Each module in
a line: docs/compression.md, `parlab.compression`.
"""
