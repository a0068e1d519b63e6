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
from tests.helpers import burning_cpus

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


class _Clocks:
    """A span's clocks, set by the test: the wall clock stands at 100 s and the thread's CPU clock
    reads 0, then `cpu_s`. The stretch a span asks for is then exact arithmetic, read off no real
    clock (on a busy machine a real one would add whatever the scheduler took)."""

    def __init__(self, cpu_s: float):
        self.reads = iter([0.0, cpu_s])

    def perf_counter(self) -> float:
        return 100.0

    def thread_time(self) -> float:
        return next(self.reads)


def _stretch_targets(monkeypatch):
    """Record every wait a slow span asks for (when it may end) instead of sleeping."""
    asked = []
    monkeypatch.setattr(speeds_mod, "sleep_until", asked.append)
    return asked


def _a_span_asks(monkeypatch, open_span, cpu_s: float) -> list:
    """The stretches `open_span()` asks for when its body used `cpu_s` CPU seconds."""
    from parlab.data_parallel import strategy
    asked = _stretch_targets(monkeypatch)
    clocks = _Clocks(cpu_s)
    monkeypatch.setattr(speeds_mod, "time", clocks)
    monkeypatch.setattr(strategy, "time", clocks)
    with open_span():
        pass
    return asked


def _timeline_at_100():
    timeline = Timeline(0)
    timeline.now = lambda: 100.0  # the wall clock the fake CPU clock goes with
    return timeline


def test_a_slow_span_lasts_its_cpu_time_over_speed(monkeypatch):
    # 0.02 CPU s at speed 1/4: the span may end 0.08 s after it started
    assert _a_span_asks(monkeypatch, lambda: speeds_mod.span(
        _timeline_at_100(), "forward", "compute", 0.25), 0.02) == [100.0 + 0.02 / 0.25]


def test_only_compute_is_stretched(monkeypatch):
    assert _a_span_asks(monkeypatch, lambda: speeds_mod.span(
        _timeline_at_100(), "allreduce", "comm", 0.25), 0.01) == []


def test_waiting_inside_a_span_is_not_stretched(monkeypatch):
    # blocked (on a message, say) the whole span: no CPU time, so the span may end when it began,
    # not 1/speed later
    assert _a_span_asks(monkeypatch, lambda: speeds_mod.span(
        _timeline_at_100(), "forward", "compute", 0.5), 0.0) == [100.0]


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


def test_paced_backup_workers_drop_the_straggler_and_repeat_beside_cpu_burners():
    """Virtual time (issue 46): on an A100 clock the step takes the first N−b gradients in virtual
    arrival order, so the 4× slower rank 1 is dropped at every step, and two identical runs, one
    beside two CPU-burning processes, give equal timelines, messages, step times, used ranks and
    losses (equal, not within a tolerance; the issue saw the straggler used once in three runs
    when the paced clock slept)."""
    options = dict(world_size=2, steps=3, speeds=[1, 0.25], backups=1, clock="A100")
    idle = parlab.run("backup-workers", **options)
    with burning_cpus(2):
        busy = parlab.run("backup-workers", **options)
    assert idle.outputs[0].extras["used"] == [[0]] * 3
    assert busy.outputs[0].extras["used"] == idle.outputs[0].extras["used"]
    assert busy.timeline == idle.timeline
    assert busy.ledger == idle.ledger
    assert busy.step_times == idle.step_times and busy.losses == idle.losses
    abandoned = [e for e in idle.timeline if e["name"] == "abandoned"]
    assert {e["rank"] for e in abandoned} == {1} and len(abandoned) == 3


def test_backup_bytes_equal_closed_form(runs):
    r = runs("backup-workers", 2, backups=1, speeds=[1, 0.01])
    assert r.bytes_per_rank(phase="arrivals") == [cost.arrival_bytes(2, k) * STEPS for k in range(2)]
    assert r.bytes_per_rank() == cost.backup_prediction(r.config).bytes_sent


# ----------------------------------------------------------------------------- exercises
RIGHT = {"even-step": 12, "lp-time": 434}


@pytest.mark.parametrize("name,answer", sorted(RIGHT.items()))
def test_exercises_check_without_telling(name, answer, capsys):
    from parlab.heterogeneous import exercises
    exercise = exercises.exercise(name)
    assert exercise.check(answer)
    assert not exercise.check("biased" if isinstance(answer, str) else answer + 1)
    assert str(answer) not in capsys.readouterr().out.replace(name, "")


def test_a_slow_rank_stretches_the_data_parallel_forward_too(monkeypatch):
    """GradSync's pausable forward span (not ctx.span) also honours speeds=: each segment asks to
    last its CPU time ÷ speed. Checked from the stretch it asks for on the test's own clocks, as
    the spans above are: the duration a busy machine then gives it is no part of the claim (CI
    read 16.8 ms against a 17.2 ms bound when the span's time was read off the clock)."""
    from parlab.data_parallel.strategy import ComputeSpan

    assert _a_span_asks(monkeypatch, lambda: ComputeSpan(
        _timeline_at_100(), "forward", 0.25, step=0), 0.02) == [100.0 + 0.02 / 0.25]
    assert parlab.run("ddp-naive", world_size=2, steps=2, speeds=[1, 0.25]).compare(
        parlab.run("single", steps=2)).match  # time changes, results do not


def test_when_to_use_follows_this_runs_numbers(capsys):
    from parlab.heterogeneous.explore import summary

    # HAP's LP on the fast device alone: T* = f + B = 40 row-times, so below f/T* = 0.7 a device gets no rows
    assert abs(summary.no_rows_below([1.0, 0.25], 12, 28.0) - 0.7) < 1e-6
    assert summary.no_rows_below([1.0], 12, 28.0) is None

    def dp(lp, prop=1.1, rows=(12, 0)):
        return [{"shard": "even", "rows": [6, 6], "speedup": 1.0, "fixed_rows": 28.0},
                {"shard": "proportional", "rows": [10, 2], "speedup": prop, "fixed_rows": 28.0},
                {"shard": "lp", "rows": list(rows), "speedup": lp, "fixed_rows": 28.0}]

    def backup(speedup, loss):
        return [{"backups": 0, "step_ms": 100.0 * speedup, "final_loss": 4.0, "single_loss": 4.0},
                {"backups": 1, "step_ms": 100.0, "final_loss": loss, "single_loss": 4.0}]

    two = [{"cluster": "one node", "link": "NVLink ÷100 (teaching preset) (α=1 µs)", "comm_ms": 0.1,
            "step_ms": 200.0, "rows": [11, 1]},
           {"cluster": "two nodes", "link": "1GbE ÷100 (teaching preset) (α=50 µs)", "comm_ms": 200.0,
            "step_ms": 400.0, "rows": [11, 1]}]
    tp = [{"shard": "even", "speedup": 1.0}, {"shard": "lp", "speedup": 1.4}]
    hap = [{"step_ms": 100.0}, {"step_ms": 120.0}]
    real = {"program": "rep col col row col col row", "sharded": 6, "slow_share": 0.22, "gain": 1.32}
    tiny = {"program": "rep row dp rep col col row", "sharded": 5, "slow_share": 0.01, "gain": 1.05}
    why = {"ops": [{"op": "stream", "choice": "rep", "alternative": "dp", "would_save_ms": 13.0,
                    "would_add_ms": 26.3}, {"op": "c_fc", "choice": "col"}]}
    summary.when_to_use(dp(2.7), [1.0, 0.25], backup(2.1, 4.04), two, tp, hap, real, tiny, why)
    out = capsys.readouterr().out
    assert out.startswith("When to use it (from this run):")
    assert "stepped 2.70× as fast as even shares (faster)" in out
    assert "s > f/T*_others = 0.70× the fastest" in out
    assert "the slowest here, at 0.25×, is below it and got 0 rows (as derived)" in out
    assert "LP shares won" in out and "final loss +1.00% against single" in out
    assert "crossed 1GbE ÷100 and its model (200.0 ms)" in out
    assert "was 50% of the step (one node: 0%), the step 2.00× one node's" in out
    assert "cut every layer by speed too: hetero-tp's LP shares stepped 1.40×" in out
    assert "ran 1.20× as fast as the fixed Megatron block (the search paid)" in out
    assert "the search sharded 6 of 7 operators ('rep col col row col col row', the V100's share " \
           "0.22), 1.32× over replicating everything, on the tiny GPT 1.05×" in out
    assert "where matmuls' FLOPs, not launches, set the time" in out
    assert "kept replicated there: stream (dp would save 13.0 ms of compute and add 26.3 ms" in out
    # the numbers flip, the verdicts flip
    summary.when_to_use(dp(0.9, rows=(8, 4)), [1.0, 0.9], backup(2.1, 4.0), two,
                        [tp[0], dict(tp[1], speedup=0.9)], hap[::-1], dict(real, gain=1.02), tiny)
    out = capsys.readouterr().out
    assert "(NOT faster here: see the verdict above)" in out and "at 0.90×, is not below it and got 4" in out
    assert "backup workers won" in out and "the search did NOT pay here" in out
    assert "0.90× as fast as even ones, NOT faster in this run" in out
    assert "NOT the contrast expected in this run" in out and "kept replicated" not in out
