"""Chapter 07 at real scale (parlab.expert_parallel.explore.scale_run): `ep`'s all-to-all at
gpt2-xl width, shapes-only in paced A100 time, priced as its closed forms say — inside a node
(NVLink 3) and across nodes (the paced topology's slowest link, HDR InfiniBand) — and the α-β
estimate's two forms (links at once vs slowest link) agree inside a node and part across."""

import pytest

from parlab.core.link import REAL
from parlab.expert_parallel.explore import at_scale, scale_run


def test_the_two_estimates_agree_inside_a_node_and_part_across():
    inside = at_scale.dispatch_seconds(8, 8192, 2, 1600, row_bytes=4)["seconds"]
    assert inside == pytest.approx(scale_run.slowest_link_seconds(8, 8192, 2, 1600), rel=1e-12)
    across = at_scale.dispatch_seconds(16, 8192, 2, 1600, row_bytes=4)["seconds"]
    slowest = scale_run.slowest_link_seconds(16, 8192, 2, 1600)
    alpha, beta = REAL["HDR-IB"]
    assert slowest == pytest.approx(15 * alpha + 16384 * 15 / 16 * 1600 * 4 / beta, rel=1e-12)
    assert slowest > 1.5 * across  # NVLink's peers share InfiniBand's β in the slowest-link form


@pytest.fixture(scope="module")
def two_nodes_of_one():
    """ep = 2 on two nodes of one rank (every pair over HDR InfiniBand), one MoE block, C = 100
    (25 heads of 4)."""
    return scale_run.measure(2, layers=1, sequences=1, width=100, per_node=1)


def test_a_shapes_only_dispatch_costs_the_slowest_link_closed_form(two_nodes_of_one):
    row = two_nodes_of_one
    assert row["nodes"] == 2 and row["tokens"] == scale_run.SEQUENCE
    assert row["bytes"] == scale_run.SEQUENCE * 2 // 2 * 100 * 4  # N_r·k·(ep−1)/ep rows, fp32
    assert row["measured_s"] == pytest.approx(row["slowest_s"], rel=1e-9)  # paced: no noise
    assert row["exchange_s"] == pytest.approx(4 * row["measured_s"], rel=1e-9)  # balanced: 4 alike
    assert 0 < row["exchange_s"] < row["step_s"]


# ----------------------------------------------------------------------------- what MoE buys
def test_the_loss_comparison_trains_as_a_single_run_does():
    """explore.quality trains in this process; its dense losses are parlab.run("single")'s."""
    import parlab
    from parlab.expert_parallel.explore import quality

    mine = quality.train_losses("gpt", {}, seed=0, steps=3)
    theirs = parlab.run("single", model="gpt", steps=3).losses
    assert mine == pytest.approx(theirs, rel=1e-6)


def test_the_moe_twin_has_the_dense_models_active_parameters_and_the_verdict_reads_the_spread():
    from parlab.expert_parallel.explore import dense, quality

    counts = dense.active_parameters(quality.moe_overrides(8, 1))
    assert counts["moe_active"] == counts["dense"] < counts["moe_total"]
    base = {"dense": [3.0, 3.1, 3.2]}  # spread 0.2
    assert quality.verdict({**base, "moe": [2.7, 2.8, 2.9]})["verdict"] == "MoE better beyond the spread"
    assert quality.verdict({**base, "moe": [3.0, 3.05, 3.1]})["verdict"] == "no gain beyond the spread"
    assert quality.verdict({**base, "moe": [3.4, 3.4, 3.5]})["verdict"] == "MoE worse beyond the spread"
    with pytest.raises(ValueError, match="steps=30 must be at least"):
        quality.compare(steps=30)


def test_the_lookup_task_scores_only_the_values_its_table_gives():
    import torch

    from parlab.expert_parallel import lookup

    facts = lookup.table(seed=3)
    assert facts.shape == (lookup.KEYS, lookup.KEYS) and torch.equal(facts, lookup.table(seed=3))
    x, y = lookup.batch(step=5, batch_size=4, seed=3, facts=facts)
    scored = y != lookup.IGNORE
    assert x.shape == y.shape == (4, 32)
    assert torch.equal(y[:, :-1][scored[:, :-1]], x[:, 1:][scored[:, :-1]])  # y is x shifted
    assert scored.sum() == 4 * len(range(1, 32, 3)) and scored[:, 1::3].all()
    assert torch.equal(y[:, 1::3], facts[x[:, 0::3], x[:, 1::3]])  # v = table[a, b]
    assert x[:, 0::3].max() < lookup.KEYS and x[:, 1::3].max() < lookup.KEYS


def test_the_loss_comparison_refuses_a_task_it_lacks_and_a_spread_of_one_seed():
    from parlab.expert_parallel.explore import quality

    with pytest.raises(ValueError, match="task='tables' is not one of"):
        quality.compare(steps=40, task="tables")
    with pytest.raises(ValueError, match="needs at least 2 seeds"):
        quality.compare(steps=40, seeds=(0,))


def test_the_loss_figure_draws_each_model_and_chance():
    import matplotlib

    matplotlib.use("Agg")
    from parlab.expert_parallel.explore import quality

    curves = [[4.5 - 0.01 * i for i in range(30)] for _ in range(3)]
    fig = quality.draw({"task": "lookup", "seeds": (0, 1, 2), "dense_curves": curves,
                        "moe_curves": curves})
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == ["dense", "moe", "chance"]
