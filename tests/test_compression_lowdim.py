"""Kwon et al. (AISTATS 2024): the compressed deep linear network and its data-parallel scheme.

`parlab.run("single")` trains the lab's GPT and MLP, not this network, so `lowdim` is held against
the in-process reference of the same network (`lowdim.fit`): losses and final parameters within
1e-4 at world sizes 1, 2, 4. Its ledger equals the closed form exactly: one ring all-reduce of
2dr̂ + (L−2)r̂² floats per step (PowerSGD's two when `powersgd_rank` is set). No clock is read.
"""

import functools
import math

import pytest
import torch

import parlab
from parlab.compression import cost, lowdim
from parlab.compression import exercises as compression_exercises
from parlab.compression.schemes_lowdim import network_of
from parlab.core.cost import ring_all_reduce
from parlab.engine.runner import make_config

STEPS = 4
GD = {"optimizer": "sgd", "lr": 10.0}


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, "lowdim", steps=STEPS)


def reference(result):
    """`lowdim.fit` of the network and entries the run's configuration builds."""
    task, model, _ = network_of(result.config)
    o, cfg = result.config.options, result.config
    return lowdim.fit(model, task, cfg.steps, cfg.lr, lowdim.outer_rate(o["network"], o["alpha"]),
                      cfg.optimizer)


def test_parameter_count_closed_form():
    for d, width, depth in ((32, 4, 3), (64, 6, 5), (16, 16, 2)):
        assert cost.dln_params(d, width, depth) == 2 * d * width + (depth - 2) * width ** 2
        assert sum(math.prod(s) for s in cost.dln_shapes(d, width, depth)) == cost.dln_params(d, width, depth)
    assert cost.dln_params(32, 32, 3) == 3 * 32 ** 2  # the original: L·d²
    task = lowdim.completion_task(32, 2, 0.5)
    for network, width in (("original", 32), ("compressed", 4)):
        model = lowdim.build_network(task, network, width, 3, 0.1)
        assert [tuple(p.shape) for p in model.parameters()] == cost.dln_shapes(32, width, 3)


def test_network_reads_the_products_entries_and_spectral_init_is_the_papers():
    task = lowdim.completion_task(16, 2, 0.5, seed=3)
    model = lowdim.build_network(task, "compressed", 4, 3, 0.1)
    full = model.end_to_end()
    assert torch.allclose(model(task.index), full[task.index[:, 0], task.index[:, 1]], atol=1e-7)
    w1, w2, w3 = (p.detach() for p in model.factors)
    assert torch.allclose(w1 @ w1.T, 0.01 * torch.eye(4), atol=1e-6)  # ε·V̂ᵀ: orthonormal rows
    assert torch.allclose(w2, 0.1 * torch.eye(4))
    assert torch.allclose(w3.T @ w3, 0.01 * torch.eye(4), atol=1e-6)
    u = torch.linalg.svd(task.surrogate()).U[:, :4]
    assert torch.allclose((u.T @ w3 / 0.1).abs(), torch.eye(4), atol=1e-5)  # Û: the surrogate's


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_data_parallel_equals_the_in_process_reference(runs, world_size):
    result = runs(world_size, **GD)
    comparison = result.compare(reference(result))
    assert comparison.match, comparison.problems


def test_adamw_and_the_original_network_equal_their_reference(runs):
    for options in ({}, {"network": "original", **GD}):
        result = runs(2, **options)
        assert result.compare(reference(result)).match


@pytest.mark.parametrize("world_size", [2, 4])
def test_ledger_is_one_all_reduce_of_the_compressed_parameters(runs, world_size):
    result = runs(world_size, **GD)
    d, r_hat, depth = 32, 4, 3  # the defaults: r̂ = 2r
    floats = 2 * d * r_hat + (depth - 2) * r_hat ** 2
    for rank in range(world_size):
        for step in range(STEPS):
            assert result.bytes_per_rank(step=step)[rank] == 4 * ring_all_reduce(floats, world_size, rank)[0]
    assert {r["op"] for r in result.ledger} == {"all_reduce"}
    assert parlab.schemes()["lowdim"].cost(result.config).bytes_sent == result.bytes_per_rank()


def test_powersgd_of_the_original_network_sends_its_closed_form(runs):
    result = runs(2, network="original", powersgd_rank=4, **GD)
    first, second = cost.powersgd_elements(cost.dln_shapes(32, 32, 3), 4)
    per_step = 4 * (ring_all_reduce(first, 2, 0)[0] + ring_all_reduce(second, 2, 0)[0])
    assert result.bytes_per_rank() == [STEPS * per_step] * 2
    assert parlab.schemes()["lowdim"].cost(result.config).bytes_sent == result.bytes_per_rank()
    assert not parlab.schemes()["lowdim"].exact  # equal to its own reference, not to `single`


@pytest.mark.parametrize("options,named", [
    ({"target_rank": 40}, "target_rank=40"), ({"network": "original", "width": 4}, "width=4"),
    ({"width": 64}, "width=64"), ({"d": 5, "world_size": 5}, "world_size=5"),
    ({"observed": 0.0}, "observed=0.0"), ({"network": "small"}, "network='small'")])
def test_bad_input_is_refused_before_launch(options, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        make_config("lowdim", **{"world_size": 1, **options})


def test_updates_stay_low_rank_and_the_compressed_network_recovers_faster():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread (restored below)
    try:
        _updates_and_recovery()
    finally:
        torch.set_num_threads(threads)


def _updates_and_recovery():
    full = lowdim.completion_task(32, 2, 1.0)  # deep matrix factorization: every entry seen
    run = lowdim.fit(lowdim.build_network(full, "original", 32, 3, 0.1), full, 600, 10.0,
                     snapshot_every=300)
    first, last = (deltas[0] for _, deltas in run.snapshots)
    assert lowdim.effective_rank(lowdim.update_spectrum(last)) <= 4  # ≤ 2r of 32
    assert lowdim.outside_share(first, last, 4) < 1e-2  # one fixed subspace
    task = lowdim.completion_task(32, 2, 0.5)
    errors = {net: lowdim.fit(lowdim.build_network(task, net, 32 if net == "original" else 4, 3, 0.1),
                              task, 300, 10.0, lowdim.outer_rate(net, 4.0)).errors[-1]
              for net in ("original", "compressed")}
    assert errors["compressed"] < 0.05 < errors["original"]


def test_compressed_mlp_runs_the_mlps_own_forward():
    from parlab import models

    mlp = lowdim.compress_mlp(models.build_model("mlp", models.model_config("mlp"), 0), 4)
    x, y = torch.randn(5, 2), torch.tensor([0, 1, 2, 0, 1])
    assert mlp(x).shape == (5, 3) and torch.isfinite(mlp.loss(x, y))
    hidden = 2 * 64 * 4 + 4 * 4 + 64
    assert sum(p.numel() for p in mlp.parameters()) == 2 * 64 + 64 + 3 * hidden + 64 * 3 + 3


def test_exercise_accepts_the_worked_answer_and_never_prints_it(capsys):
    ex = compression_exercises.exercise("lowdim-bytes-gpu")
    right = 2 * 7 / 8 * (2 * 8192 * 64 + 2 * 64 ** 2) * 4 / 1e6  # MB: 2(N−1)/N·Ψ·4
    assert ex.check(right) and not ex.check(4 * 8192 ** 2 * 2 * 7 / 8 * 4 / 1e6) and not ex.check("7")
    assert f"{right:.2f}" not in capsys.readouterr().out
    ex.hint()
    ex.solution()
    assert f"{right:.2f}" in capsys.readouterr().out
