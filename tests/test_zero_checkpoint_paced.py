"""Chapter 02 §7 on the paced A100 clock: activation checkpointing's time cost is
bit-reproducible, the forward is unchanged, and the recompute is at most one forward
(Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016)."""

import pytest

from parlab.zero import explore as ex


@pytest.fixture(scope="module")
def trade():
    return ex.checkpointing_tradeoff("zero3", world_size=2, steps=3, clock="A100")


def test_checkpointing_time_is_paced_and_reproducible(trade):
    assert trade["clock"] == "A100"
    assert trade["forward_ms_ckpt"] == trade["forward_ms"]  # the forward is priced identically
    assert trade["backward_ms_ckpt"] == pytest.approx(trade["backward_ms"] + trade["recompute_ms"])
    again = ex.checkpointing_tradeoff("single", world_size=1, steps=3, clock="A100")
    assert (again["forward_ms"], again["backward_ms"], again["backward_ms_ckpt"]) == \
        (trade["forward_ms"], trade["backward_ms"], trade["backward_ms_ckpt"])


def test_recompute_is_at_most_one_forward(trade):
    assert 0 < trade["recompute_ms"] <= trade["forward_ms"]
    assert 1 < trade["time_ratio"] <= trade["expected_ratio"]
    assert trade["activations_ckpt"] < trade["activations"]
