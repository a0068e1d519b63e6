"""Chapter 06's additions: Llama 3's all-gather context parallelism (`cp-allgather`, Dubey et al.
2024, §3.3.2) equals the single process at world sizes 1, 2 and 4 (and dp × cp), its ledger is
`cost.allgather_bytes` exactly (the ring's bytes, in one collective per layer and direction);
USP's closed form (`cost.usp_bytes`, Fang & Zhao 2024) reduces to the ring and to Ulysses at its
ends; cp-ring in bf16 sends 2 bytes a value and matches `single` in bf16."""

import functools

import pytest
import torch

from parlab.context_parallel import cost
from parlab.context_parallel.allgather_attention import allgather_attention
from parlab.context_parallel.ring_attention import all_positions
from parlab.models.gpt import attention

STEPS = 2


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS, timeout=120)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_allgather_equals_single(runs, world_size):
    comparison = runs("cp-allgather", world_size).compare(runs("single"))
    assert comparison.match, comparison.problems


def test_allgather_dp_times_cp_equals_single(runs):
    comparison = runs("cp-allgather", 4, cp=2, batch_size=12).compare(runs("single", batch_size=12))
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("world_size", [2, 4])
def test_allgather_ledger_is_the_closed_form_and_the_rings_bytes(runs, world_size):
    result = runs("cp-allgather", world_size)
    g = result.config.model_config
    form = cost.allgather_bytes(result.config.batch_size, g.n_head, g.block_size, g.head_dim,
                                world_size, g.n_layer)
    for phase in ("cp-forward", "cp-backward"):
        assert result.bytes_per_rank(phase=phase) == [form[phase] * STEPS] * world_size
    ring = cost.ring_bytes(result.config.batch_size, g.n_head, g.block_size, g.head_dim,
                           world_size, g.n_layer)
    assert form["cp-forward"] == ring["cp-forward"] and form["cp-backward"] == ring["cp-backward"]
    ops = {x["op"] for x in result.ledger if str(x["phase"]).startswith("cp-")}
    assert ops == {"all_gather", "reduce_scatter"}


class _OneRank:
    """A one-rank group: the gather is the identity (allgather_attention skips it)."""
    rank, size = 0, 1


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_allgather_attention_on_one_rank_is_causal_attention(layout):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 16, 8, generator=g) for _ in range(3))
    positions = all_positions(layout, 1, 16)
    torch.testing.assert_close(allgather_attention(q, k, v, _OneRank(), positions),
                               attention(q, k, v, True), atol=1e-5, rtol=1e-5)


def test_usp_reduces_to_ring_and_ulysses_at_its_ends():
    B, nh, T, hs, n = 1, 32, 65536, 128, 8
    ring = cost.ring_bytes(B, nh, T, hs, n, 1, itemsize=2)["cp-forward"]
    ulysses = cost.ulysses_bytes(B, nh, T, hs, n, 1, itemsize=2)["cp-forward"]
    assert cost.usp_bytes(B, nh, T, hs, 1, n)["total"] == ring
    assert cost.usp_bytes(B, nh, T, hs, n, 1)["total"] == ulysses
    mixed = cost.usp_bytes(B, nh, T, hs, 4, 2)
    assert mixed["ring"] == 2 * B * (nh // 4) * (T // 2) * hs * 2  # one K/V pass of nh/u heads
    assert mixed["ulysses"] == 4 * (B * nh * (T // 8) * hs * 3 // 4) * 2


def test_ring_in_bf16_matches_single_and_sends_two_bytes_a_value(runs):
    result = runs("cp-ring", 2, precision="bf16-mixed")
    comparison = result.compare(runs("single", precision="bf16-mixed"))
    assert comparison.match, comparison.problems
    g = result.config.model_config
    form = cost.ring_bytes(result.config.batch_size, g.n_head, g.block_size, g.head_dim, 2,
                           g.n_layer, itemsize=2)
    assert result.bytes_per_rank(phase="cp-forward") == [form["cp-forward"] * STEPS] * 2
