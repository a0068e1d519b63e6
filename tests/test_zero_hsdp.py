"""torch-hsdp (parlab.zero.torch_hybrid): FSDP2 hybrid sharding (Zhao et al., VLDB 2023, §3.2.2)
trains as one process at world sizes 1, 2 and 4; each rank holds 16Ψ/G of fp32 model states with
Adam; its ledger's nominal bytes equal `parlab.zero.cost.hsdp_step_bytes` to the byte; a shard
group that does not divide the world is refused before any process starts."""

import pytest

import parlab
from parlab.zero.cost import hsdp_step_bytes


@pytest.fixture(scope="module")
def reference():
    return parlab.run("single", steps=2)


@pytest.mark.parametrize("world,shard", [(1, None), (2, 1), (4, 2)])
def test_hsdp_is_exact_holds_sixteen_psi_over_g_and_sends_the_closed_form(reference, world, shard):
    psi = sum(t.numel() for t in reference.state.values())
    run = parlab.run("torch-hsdp", world_size=world, steps=2, shard=shard)
    assert run.compare(reference).match
    g = shard or world
    for rank, m in enumerate(run.memory):
        assert m["params"] + m["grads"] + m["optimizer"] == 16 * psi // g
        assert run.bytes_per_rank()[rank] == 2 * hsdp_step_bytes(psi, world, g, rank)


def test_hsdp_bytes_by_hand():
    psi = 1000
    # G = 2 of N = 4: gathers 2·500 + reduce-scatter 500 in the group, all-reduce of 500 over 2 replicas
    assert hsdp_step_bytes(psi, 4, 2, 0, bytes_per=1) == 2 * 500 + 500 + 2 * 250
    assert hsdp_step_bytes(psi, 4, 4, 0, bytes_per=1) == 3 * 750  # plain FSDP: no replica
    with pytest.raises(ValueError, match="shard"):
        hsdp_step_bytes(psi, 4, 3)


def test_a_shard_group_must_divide_the_world():
    with pytest.raises(ValueError, match="shard=3"):
        parlab.run("torch-hsdp", world_size=4, shard=3, steps=1)
