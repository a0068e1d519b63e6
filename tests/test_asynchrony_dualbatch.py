"""Chapter 09, ps-dualbatch (Lu et al. 2025): every job computed and applied exactly once with its
version and batch size logged, lr ∝ rows, the cyclic sequence schedule, bytes = the async closed
form on the dual-batch schedule; with equal batches and no cycles it is ps-async exactly."""

import pytest
import torch

import parlab
from parlab.asynchrony import cost
from parlab.asynchrony.delays import VirtualClock
from parlab.asynchrony.dualbatch import dual_schedule, seq_len_at
from parlab.asynchrony.versions import Book, simulate

SEEDED = dict(delays="seeded", straggler=3.0, jitter=0.5)


@pytest.fixture(scope="module")
def hybrid():
    return parlab.run("ps-dualbatch", world_size=4, steps=10, small_batch=4, cycles=2, snapshot_every=5,
                      timeout=120, **SEEDED)


def test_equal_batches_and_no_cycles_is_ps_async_exactly():
    options = dict(world_size=4, steps=6, timeout=120, **SEEDED)
    plain = parlab.run("ps-async", **options)
    dual = parlab.run("ps-dualbatch", large_batch=12, small_batch=12, **options)
    assert dual.losses == plain.losses
    assert all(torch.equal(dual.state[k], v) for k, v in plain.state.items())
    key = ("worker", "job", "version", "applied_at")
    assert [tuple(g[k] for k in key) for g in dual.outputs[0].extras["log"]] == \
        [tuple(g[k] for k in key) for g in plain.outputs[0].extras["log"]]


def test_every_job_applied_once_with_version_and_batch_logged(hybrid):
    extras = hybrid.outputs[0].extras
    log = extras["log"]
    assert sorted(g["job"] for g in log) == list(range(10))
    assert [g["applied_at"] for g in log] == list(range(10))
    assert all(0 <= g["version"] <= g["applied_at"] for g in log)
    assert extras["update_batches"] == [4 if g["worker"] == 3 else 12 for g in log]
    book = simulate(Book(3, 10, "asp"), VirtualClock(dual_schedule(hybrid.config)))
    assert [(g["worker"], g["job"], g["version"]) for g in log] == [(g.worker, g.job, g.version)
                                                                   for g in book.log]


def test_small_batch_straggler_is_not_left_behind(hybrid):
    """3× slower but 1/3 of the rows: on the virtual clock it keeps pace with the others."""
    jobs = {w: 0 for w in (1, 2, 3)}
    for g in hybrid.outputs[0].extras["log"]:
        jobs[g["worker"]] += 1
    assert jobs[3] >= min(jobs[1], jobs[2]) - 1


def test_bytes_equal_the_async_closed_form_on_the_dual_schedule(hybrid):
    cfg = hybrid.config
    numel = sum(v.numel() for v in hybrid.state.values())
    jobs, exact = cost.async_jobs(cfg, dual_schedule(cfg))
    assert exact and hybrid.bytes_per_rank() == cost.async_bytes(numel, jobs, cfg.steps)


def test_snapshots_every_five_updates_end_at_the_final_state(hybrid):
    snaps = hybrid.outputs[0].extras["snapshots"]
    assert [n for n, _, _ in snaps] == [0, 5, 10]
    assert [t for _, t, _ in snaps] == sorted(t for _, t, _ in snaps)
    final = torch.cat([v.reshape(-1) for v in hybrid.state.values()])
    assert torch.equal(snaps[-1][2], final)


def test_cyclic_sequence_lengths():
    lengths = [seq_len_at(j, 10, 2, 8, 32) for j in range(10)]
    assert lengths == [8, 14, 20, 26, 32, 8, 14, 20, 26, 32]
    assert [seq_len_at(j, 10, 0, 8, 32) for j in range(3)] == [32, 32, 32]


def test_small_batch_updates_use_the_scaled_learning_rate():
    """SGD, one small-batch worker: θ1 = θ0 − lr·(b/B)·g, with g the gradient of its batch."""
    from parlab.engine.loop import build_model
    from parlab.engine.runner import make_config
    from parlab.models import data

    options = dict(world_size=2, steps=1, optimizer="sgd", large_batch=12, small_batch=3, timeout=60)
    run = parlab.run("ps-dualbatch", **options)
    cfg = make_config("ps-dualbatch", **options)
    model = build_model(cfg)
    x, y = data.global_batch(cfg.model, 0, 3, cfg.seed, cfg.model_config.block_size)
    model.loss(x, y).backward()
    for name, p in model.named_parameters():
        assert torch.allclose(run.state[name], p.detach() - cfg.lr * 3 / 12 * p.grad, atol=1e-6)


@pytest.mark.parametrize("kwargs,message", [
    (dict(small_batch=16, large_batch=12), "small_batch=16"),
    (dict(small_workers=4), "small_workers=4"),
    (dict(cycles=3, model="mlp"), "cycles=3"),
    (dict(cycles=9), "cycles=9"),
    (dict(min_seq=64, cycles=1), "min_seq=64")])
def test_dualbatch_bad_input_names_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        parlab.run("ps-dualbatch", world_size=4, steps=4, **kwargs)
