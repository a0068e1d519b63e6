"""Chapter 02 — memory: ZeRO-1/2/3 (FSDP), activation checkpointing, distributed checkpoints.

Papers: Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models" (SC 2020); Zhao et al., "PyTorch FSDP" (VLDB 2023); Chen et al., "Training Deep Nets with
Sublinear Memory Cost" (2016).

Reading order: `shard` (flat units padded to N, the memory and byte closed forms), `zero_engine`
(what each stage keeps, gathers and frees), `checkpoint` (sharded, resharding on resume),
`checkpoint_integrity` (the manifest's checks before a resume), `run_lock` (one run per save_dir),
`schemes`, `torch_sharded` (ZeroRedundancyOptimizer, FSDP2), `torch_hybrid` (FSDP2's HSDP),
`api` (the stages as a library: `ZeRO(model_or_params, optimizer, comm, stage=1|2|3)` in your own
training loop); `real_scale` (the closed forms at gpt2-xl and llama3-8b shapes); `explore`
(with `explore.precision`: the mixed-precision column, `explore.prefetch`: FSDP's prefetch where
it pays), `exercises` and `bench`.
"""
