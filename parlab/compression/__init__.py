"""Chapter 08 — fewer bytes: gradient compression, low-rank updates, local SGD and DiLoCo.

Data parallelism sends every gradient element every step. This chapter sends fewer bytes per step
(sparsify: top-k, Lin et al., "Deep Gradient Compression", 2018; quantize: QSGD, Alistarh et al.
2017, signSGD, Bernstein et al. 2018, EF-signSGD, Karimireddy et al. 2019; low rank: PowerSGD,
Vogels et al. 2019) or communicates less often (Local SGD, Stich 2019; DiLoCo, Douillard et al.
2023). Each is one more strategy on the data-parallel loop; each is lossy, with its own tested
bound, and each moves its bytes through `Comm` at their true compressed size.
"""
