"""pp-looped-bfs (Lamy-Poirier, MLSys 2023) sends what the closed form says: its chunks loop over
the ranks as Megatron's interleaved ones do, so every rank sends (2v − [rank 0] − [rank p−1])·m
boundaries per step (Narayanan et al., SC 2021, §2.2.2: `cost.p2p_bytes_per_step`), and receives
(v − [rank 0])·m activations."""

import pytest

from parlab.pipeline import cost


@pytest.mark.parametrize("world_size,m", [(2, 4)])
def test_looped_bfs_ledger_bytes_are_the_closed_form(run_cached, world_size, m):
    v = 2
    r = run_cached("pp-looped-bfs", world_size, steps=2, microbatches=m, chunks=v)
    mc, steps = r.config.model_config, r.config.steps
    boundary = (r.config.batch_size // m) * mc.block_size * mc.n_embd  # (mb, T, C)
    for rank in range(world_size):
        sent = sum(r.bytes_per_rank(op="send", phase=ph)[rank] for ph in ("pp-fwd", "pp-bwd"))
        assert sent == steps * cost.p2p_bytes_per_step(world_size, v, m, rank, boundary)
        assert r.bytes_per_rank(op="recv", phase="pp-fwd", key="bytes_recv")[rank] == \
            steps * m * (v - (rank == 0)) * boundary * 4
