"""Chapter 00 and the runtime every chapter stands on.

Reading order:
- `launch`: ranks over gloo from a notebook or a script (forkserver with torch preloaded; the
  parent owns the rendezvous store); runs unchanged under `torchrun`. `rank_process`: inside a
  rank (`current`, `report_progress`, the heartbeat); `stuck`: naming the rank that holds the
  others up.
- `ledger`, `comm`, `sharded`, `handle`: every byte any scheme moves crosses `Comm` and lands in
  the ledger; `sharded` holds its reduce-scatter and all-gather (uneven shards, `out=` buffers),
  `handle` an op in flight.
- `collectives`: ring, tree, naive all-reduce, ring reduce-scatter / all-gather, pairwise
  all-to-all, written from send/recv (Patarasuk & Yuan, "Bandwidth optimal all-reduce
  algorithms for clusters of workstations", JPDC 2009; Thakur, Rabenseifner & Gropp,
  "Optimization of Collective Communication Operations in MPICH", IJHPCA 2005).
- `cost`: the closed forms of the bytes each algorithm moves and the α-β (Hockney) time model.
- `link`: emulated links (latency α, bandwidth β) applied to every `Comm` operation.
- `trace`, `memory`, `mesh`, `checks`: timelines, measured memory, named process meshes,
  shared validators.
- `explore`, `exercises`, `bench`: what notebook 00 and `python -m parlab bench core` run.
"""
