"""MAD-Max's trace-driven model (issue 31): a replayed trace reproduces the paced run it came from,
and the what-ifs move it the way the α-β model says. No raw clock: virtual (A100) step times."""

import pytest

import parlab
from parlab.planner.scaling.step_model import rank_step
from parlab.planner.trace_replay import Op, Trace, replay

TOLERANCE = 0.10  # issue 31: the replay within 10% of the run it replays


def _coll(rank, k, alpha, beta, group=(0, 1)):
    return Op(rank, {"op": "all_reduce"}, alpha, beta, ("coll", group, k))


def test_replay_of_a_hand_made_trace():
    """Two ranks: compute 1 s, one all-reduce (α 0.25 s + β 0.25 s) waited at once, compute 1 s;
    rank 1 computes twice as long first, so rank 0 waits for it."""
    actions = [[("C", 1.0), ("I", _coll(0, 0, 0.25, 0.25)), ("W", _coll(0, 0, 0.25, 0.25)),
                ("C", 1.0)],
               [("C", 2.0), ("I", _coll(1, 0, 0.25, 0.25)), ("W", _coll(1, 0, 0.25, 0.25)),
                ("C", 1.0)]]
    trace = Trace(actions, measured_step=3.5)
    assert replay(trace)["step_s"] == 3.5
    assert replay(trace, flops=2.0)["step_s"] == 2.0  # 1 + 0.5 + 0.5
    assert replay(trace, bandwidth=2.0)["step_s"] == 3.375
    assert replay(trace, latency=2.0)["step_s"] == 3.375
    out = replay(trace)
    assert out["exposed_s"] == (1.5 + 0.5) / 2  # rank 0 waits 1.5 s, rank 1 0.5 s


def test_overlapped_communication_is_not_exposed():
    """Issued early and waited late, a collective hides behind compute."""
    op = [_coll(k, 0, 0.5, 0.0) for k in range(2)]
    actions = [[("I", op[k]), ("C", 1.0), ("W", op[k])] for k in range(2)]
    out = replay(Trace(actions, measured_step=1.0))
    assert out["step_s"] == 1.0 and out["exposed_s"] == 0.0


# overlaps: the run hides some of its communication behind compute, so what it waits is less than
# what it sends. Not the pipeline: a stage's wait is the bubble (its peer's compute, which the
# replay counts as exposed), while NVLink moves the tiny GPT's activations in microseconds
@pytest.mark.parametrize("scheme,world_size,options,overlaps", [
    ("ddp-overlap", 2, {"bucket_mb": 0.05}, True), ("pp-1f1b", 2, {"microbatches": 4}, False),
    ("zero3", 2, {"prefetch": True}, True),
])
def test_replay_reproduces_the_paced_run(scheme, world_size, options, overlaps):
    # virtual time: the run is bit-reproducible, so one run is the measurement; the tolerance is
    # the replay's own simplifications (named in parlab.planner.trace_replay)
    r = parlab.run(scheme, world_size=world_size, steps=2, clock="A100", link="NVLink",
                   batch_size=16, **options)
    trace = Trace.from_run(r, step=1)
    base = replay(trace)
    assert abs(base["step_s"] / trace.measured_step - 1) <= TOLERANCE, \
        (base["step_s"], trace.measured_step)
    assert 0.0 <= base["exposed_share"] < 1.0
    # the exposed time the replay finds is what the ranks measurably waited (within 10% of the
    # step), and where the run overlaps, less than all the communication they issued
    waited = sum(rank_step(r, k, 1)["wait"] for k in range(world_size)) / world_size
    assert abs(base["exposed_s"] - waited) <= TOLERANCE * trace.measured_step, (base, waited)
    assert (base["exposed_s"] < base["comm_s"]) == overlaps, base
    assert replay(trace, flops=2.0)["step_s"] < base["step_s"]
    assert replay(trace, latency=2.0)["step_s"] < base["step_s"]
    assert replay(trace, bandwidth=2.0)["step_s"] <= base["step_s"]


def test_a_trace_that_does_not_match_is_named():
    r = parlab.run("ddp-naive", world_size=2, steps=2)
    with pytest.raises(ValueError, match="no compute span in step 5"):
        Trace.from_run(r, step=5)
