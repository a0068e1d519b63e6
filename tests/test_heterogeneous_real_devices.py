"""Chapter 11 on its one clock (parlab.heterogeneous.explore.tp_real): hetero-tp's shapes-only run
is its real paced run without the numbers (what `shapes=True` promises), the uneven collectives in
paced time equal their model (all-gather at its busiest sender, the hand-written exact
reduce-scatter as a chain of ring steps), and hetero-tp's W is priced at the paced clock's FLOP/s."""

import pytest

import parlab
from parlab.core.link import ACCELERATORS, real
from parlab.engine.runner import make_config
from parlab.heterogeneous import cost
from parlab.heterogeneous.explore import tp_real

PACED = dict(world_size=2, speeds=[1, 1 / 3], clock="A100", link="100Gb-IB", steps=2, shard="lp")


def test_a_shapes_only_hetero_tp_run_is_the_real_run_without_its_numbers():
    real_run = parlab.run("hetero-tp", **PACED)
    shapes = parlab.run("hetero-tp", shapes_only=True, **PACED)
    assert shapes.step_times == real_run.step_times  # virtual time: equal, not within 1%
    assert shapes.ledger == real_run.ledger
    assert shapes.losses is None and shapes.state is None


@pytest.fixture(scope="module")
def skewed():
    return tp_real.measure_collectives([5, 1, 1, 1], inner=64)


def test_paced_uneven_collectives_equal_their_model_and_closed_form_bytes(skewed):
    for row in skewed:
        assert row["ok"] and row["sent"] == row["closed"]
        assert row["ms"] == pytest.approx(row["model_ms"], rel=1e-9)
    padded, exact = skewed
    assert exact["ms"] < padded["ms"]  # one large shard: the exact ring sends less from the busiest
    assert exact["busiest_ms"] < exact["model_ms"]  # the chain, not the busiest sender, sets its time


def test_the_ring_chain_with_one_large_chunk_carries_it_every_step():
    wire, inner = real("10GbE"), 16
    big = 6 * inner * 4
    assert tp_real.ring_chain_seconds([6, 2, 2, 2], inner, "10GbE") == pytest.approx(3 * wire.cost(big, 1))
    assert tp_real.ring_chain_seconds([2, 2], inner, "10GbE") == pytest.approx(wire.cost(2 * inner * 4, 1))


def test_hetero_tp_work_is_priced_at_the_paced_clocks_flops():
    paced = make_config("hetero-tp", world_size=2, clock="H100")
    wall = make_config("hetero-tp", world_size=2)
    assert cost.tp_work_seconds(paced) == pytest.approx(
        cost.tp_work_seconds(wall) * cost.CPU_FLOPS / ACCELERATORS["H100"].flops)


def test_the_timed_slow_device_is_a_real_v100():
    from parlab.heterogeneous import explore

    assert explore.speeds_for(2) == [1.0, 0.333]  # V100 ÷ A100 sustained FLOP/s, 50 / 150
    assert explore.speeds_for(2, "H100") == [1.0, 0.125]  # 50 / 400
    assert explore.speeds_for(4, "A100", "half V100s") == [1.0, 1.0, 0.333, 0.333]
