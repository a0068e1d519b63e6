"""Chapter 01 — data parallelism: every rank a whole replica, gradients averaged.

Papers: Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training"
(VLDB 2020: buckets, overlap with backward); Zhang et al., "WFBP" in Poseidon (ATC 2017);
Jayarajan et al., "Priority-based Parameter Propagation" (P3, SysML 2019); Peng et al.,
"ByteScheduler" (SOSP 2019); Zhang et al., "DeAR: Accelerating Distributed Deep Learning with
Fine-Grained All-Reduce Pipelining" (ICDCS 2023); Goyal et al., "Accurate, Large Minibatch SGD"
(2017) for gradient accumulation.

Reading order: `strategy` (GradSync, the loop's strategy), `bucket_packing`, `reducers` (when and
how gradients move, apart from the loop; `flat_all_reduce`: one flat bucket), `sync_after_backward`
(naive and bucketed all-reduce after backward), `sync_in_backward` (WFBP), `layerwise` and
`priority` (P3), `dear`, `apply` (`apply_dp`: every reducer attached by name); `cost` (closed
forms and the α-β step-time model), `schemes`, `torch_ddp`, `api` (the syncs as a library:
`DataParallel(model, optimizer, comm, sync=...)` in your own training loop, rank 0's weights
broadcast at construction); `explore` (with `explore.library`: the library on a user's tied and
frozen model, notebooks 01 and 02), `exercises` and `bench` (what notebook 01 and
`python -m parlab bench data_parallel` run).
"""
