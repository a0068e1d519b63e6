"""Chapter 11: emulated speeds and topologies in the runtime; hetero-dp equals `single` for every
sharding; ledger bytes equal the closed forms exactly; the LP's shares; backup workers' bound."""

import functools

import pytest

import parlab
from parlab.core import speeds as speeds_mod
from parlab.core import topology
from parlab.core.link import PRESETS
from parlab.core.trace import Timeline
from parlab.engine.runner import make_config
from parlab.heterogeneous import cost, shares

STEPS = 2


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS)


# ----------------------------------------------------------------------------- the runtime
@pytest.mark.parametrize("bad,named", [([1], "[1]"), ([1, 0], "[0]"), ([1, -2], "[-2]"),
                                       ([1, float("inf")], "inf"), ("fast", "'fast'"),
                                       ([1, True], "True")])
def test_bad_speeds_raise_before_launch(bad, named):
    with pytest.raises(ValueError, match="speeds") as info:
        make_config("ddp-naive", world_size=2, speeds=bad)
    assert named in str(info.value)


def _busy(seconds):
    import time
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass


def test_a_slow_span_lasts_its_cpu_time_over_speed():
    timeline = Timeline(0)
    with speeds_mod.span(timeline, "forward", "compute", 0.25):
        _busy(0.02)
    assert timeline.events[0].duration >= 0.08  # 0.02 CPU seconds of work at speed 1/4
    with speeds_mod.span(timeline, "allreduce", "comm", 0.25):
        _busy(0.01)
    assert timeline.events[1].duration < 0.03  # only compute is stretched


def test_waiting_inside_a_span_is_not_stretched():
    import time
    timeline = Timeline(0)
    with speeds_mod.span(timeline, "forward", "compute", 0.5):
        time.sleep(0.03)  # blocked (on a message, say): no CPU time, not the device's compute
    assert timeline.events[-1].duration < 0.045


def test_speeds_change_time_not_results(runs):
    ref = runs("single")
    slow = runs("ddp-naive", 2, speeds=[1, 0.25])
    assert slow.compare(ref).match
    assert slow.config.speeds == (1.0, 0.25)


def test_two_node_topology():
    topo = topology.two_nodes(4, intra="NVLink", inter="1GbE")
    assert topo.nodes == ((0, 1), (2, 3))
    assert topo.link_between(0, 1) == PRESETS["NVLink"]
    assert topo.link_between(1, 2) == PRESETS["1GbE"]
    assert topo.link_for([0, 1]) == PRESETS["NVLink"]
    assert topo.link_for(range(4)) == PRESETS["1GbE"]  # a collective runs at its slowest hop
    with pytest.raises(ValueError, match="world_size=2"):
        make_config("ddp-naive", world_size=2, link=topo)
    with pytest.raises(ValueError, match="symmetric"):
        topology.from_matrix([[None, "1GbE"], ["NVLink", None]])


def test_topology_runs_and_stays_exact(runs):
    ref = runs("single")
    r = runs("ddp-naive", 2, link=topology.two_nodes(2, "NVLink", "1GbE"))
    assert r.compare(ref).match


# ----------------------------------------------------------------------------- shares and the LP
def test_shares():
    assert shares.even(12, 4) == [3, 3, 3, 3]
    assert shares.proportional(12, [1, 1, 1, 0.25]) == [4, 4, 3, 1]
    assert shares.proportional(13, [1, 1]) == [7, 6]
    # f = 0: the LP's step is proportional's (4 rows' time); f > 0: the slow rank gets fewer rows
    rows = shares.lp(12, [1, 1, 1, 0.25], 0.0)
    assert max(shares.rank_time(b, s, 0.0) for b, s in zip(rows, [1, 1, 1, 0.25])) == 4
    assert shares.lp(12, [1, 1, 1, 0.25], 1.5) == [4, 4, 4, 0]
    for sharding in shares.SHARDINGS:
        assert sum(shares.shares(sharding, 37, [1, 0.5, 0.3], 1.0)) == 37


def test_lp_is_optimal_among_whole_row_shardings():
    import itertools
    speeds, f, batch = [1, 0.7, 0.25], 1.0, 9
    lp_rows = shares.lp(batch, speeds, f)
    best = min(max(shares.rank_time(b, s, f) for b, s in zip(rows, speeds))
               for rows in itertools.product(range(batch + 1), repeat=3) if sum(rows) == batch)
    assert max(shares.rank_time(b, s, f) for b, s in zip(lp_rows, speeds)) == pytest.approx(best)
    _, t_star = shares.solve_lp(batch, speeds, f)
    assert t_star <= best + 1e-9  # the LP's T* bounds every integer sharding


# ----------------------------------------------------------------------------- hetero-dp
@pytest.mark.parametrize("shard", shares.SHARDINGS)
@pytest.mark.parametrize("world_size,speeds", [(1, None), (2, [1, 0.25])])
def test_hetero_dp_matches_single(runs, shard, world_size, speeds):
    r = runs("hetero-dp", world_size, shard=shard, speeds=speeds)
    assert r.compare(runs("single")).match


def test_hetero_dp_at_four_ranks_with_an_idle_rank(runs):
    r = runs("hetero-dp", 4, shard="lp", speeds=[1, 1, 1, 0.25])
    assert r.outputs[0].extras["rows"] == [4, 4, 4, 0]  # the slow rank only holds the model
    assert r.compare(runs("single")).match


def test_hetero_dp_rows_follow_the_sharding(runs):
    rows = {s: runs("hetero-dp", 2, shard=s, speeds=[1, 0.25]).outputs[0].extras["rows"]
            for s in shares.SHARDINGS}
    assert rows == {"even": [6, 6], "proportional": [10, 2], "lp": [11, 1]}


@pytest.mark.parametrize("world_size,options", [(2, {"shard": "lp", "speeds": [1, 0.25]}),
                                                (4, {"shard": "lp", "speeds": [1, 1, 1, 0.25]})])
def test_hetero_dp_bytes_equal_closed_form(runs, world_size, options):
    r = runs("hetero-dp", world_size, **options)
    cfg = r.config
    psi = sum(t.numel() for t in r.state.values())
    expected = [STEPS * cost.grad_sync_bytes(psi, world_size, k) for k in range(world_size)]
    assert r.bytes_per_rank() == expected == cost.hetero_dp_prediction(cfg).bytes_sent


def test_bad_options_raise_before_launch():
    with pytest.raises(ValueError, match="shard='fast'"):
        make_config("hetero-dp", world_size=2, shard="fast")
    with pytest.raises(ValueError, match="fixed_rows=-1"):
        make_config("hetero-dp", world_size=2, fixed_rows=-1)
    with pytest.raises(ValueError, match="batch_size=2"):
        make_config("hetero-dp", world_size=4, batch_size=2)
    with pytest.raises(ValueError, match="backups=2"):
        make_config("backup-workers", world_size=2, backups=2)


# ----------------------------------------------------------------------------- backup workers
def test_backup_workers_not_exact_but_registered():
    info = parlab.schemes()
    assert info["hetero-dp"].exact and not info["backup-workers"].exact


def test_no_backups_is_synchronous_sgd(runs):
    assert runs("backup-workers", 2, backups=0).compare(runs("single")).match


def test_backup_step_is_sgd_on_the_used_rows(runs):
    """b=1 of 2 with rank 1 100× slower: every step uses rank 0's rows [0, B/2) only, which is
    exactly `single` on a batch of B/2 (the same draw's first rows): an unbiased gradient of a
    smaller batch, not the full batch's."""
    r = runs("backup-workers", 2, backups=1, speeds=[1, 0.01])
    assert r.outputs[0].extras["used"] == [[0]] * STEPS
    assert r.compare(runs("single", batch_size=6)).match
    assert not r.compare(runs("single")).match


def test_backup_bytes_equal_closed_form(runs):
    r = runs("backup-workers", 2, backups=1, speeds=[1, 0.01])
    assert r.bytes_per_rank(phase="arrivals") == [cost.arrival_bytes(2, k) * STEPS for k in range(2)]
    assert r.bytes_per_rank() == cost.backup_prediction(r.config).bytes_sent


# ----------------------------------------------------------------------------- exercises
RIGHT = {"even-step": 12, "proportional-rows": 1024, "lp-time": 434, "weight": 0.25,
         "backup-bias": "unbiased", "bytes": 215_296}


@pytest.mark.parametrize("name,answer", sorted(RIGHT.items()))
def test_exercises_check_without_telling(name, answer, capsys):
    from parlab.heterogeneous import exercises
    exercise = exercises.exercise(name)
    assert exercise.check(answer)
    assert not exercise.check("biased" if isinstance(answer, str) else answer + 1)
    assert str(answer) not in capsys.readouterr().out.replace(name, "")


def test_a_slow_rank_stretches_the_data_parallel_forward_too():
    """GradSync's pausable forward span (not ctx.span) also honours speeds=: every segment lasts
    at least its CPU time ÷ speed (a bound by construction, whatever the machine's load)."""
    import time

    import torch

    from parlab.core.trace import Timeline
    from parlab.data_parallel.sync import ComputeSpan

    timeline = Timeline(0)
    span = ComputeSpan(timeline, "forward", 0.25, step=0)
    cpu0 = time.thread_time()
    with span:
        torch.randn(200, 200) @ torch.randn(200, 200)  # some real compute
    cpu = time.thread_time() - cpu0
    (event,) = timeline.records()
    assert event["t1"] - event["t0"] >= cpu / 0.25 - 1e-3  # the span's own bookkeeping
    assert parlab.run("ddp-naive", world_size=2, steps=2, speeds=[1, 0.25]).compare(
        parlab.run("single", steps=2)).match  # time changes, results do not
