"""Chapter 04, DualPipe (DeepSeek-V3 report, §3.2.1): the bidirectional schedule validates and
simulates to its closed forms, runs exactly like the single process at pp = 2 and 4, sends the
closed form's bytes, holds p+1 micro-batch chunks of activations, and its bubble in virtual time is the one
its action lists predict; bad sizes fail before any process starts."""

import pytest

import parlab
from parlab.pipeline import cost, cost_dualpipe
from parlab.pipeline.dualpipe import dualpipe
from parlab.pipeline.schedules import Action, make_schedule
from parlab.pipeline.validate import ScheduleError, check, simulate

SIZES = [(p, m) for p in (2, 4, 6, 8) for m in (2 * p, 2 * p + 2, 4 * p)]


def test_every_size_validates_with_the_closed_form_bubble_and_memory():
    for p, m in SIZES:
        schedule = check(make_schedule("dualpipe", p, m))
        assert sum(len(a) for a in schedule.actions) == 3 * p * m
        assert cost.ideal_bubble(schedule) == pytest.approx(cost_dualpipe.dualpipe_bubble(p, m), abs=1e-12)
        for rank, actions in enumerate(schedule.actions):
            held = peak = 0
            for a in actions:
                held += (a.op == "F") - (a.op == "W")
                peak = max(peak, held)
            assert peak == cost_dualpipe.dualpipe_in_flight_peak(p, m, rank) == p + 1  # the report's PP+1
            assert {a.stage for a in actions} == {rank, p - 1 - rank}  # two chunks: 2× parameters
        if p > 2:  # below ZB-H1 and 1F1B at equal m
            assert cost_dualpipe.dualpipe_bubble(p, m) < cost.theory_bubble("zb", p, m) \
                < cost.theory_bubble("1f1b", p, m)


def test_list_scheduled_bubble_against_the_reports_formula():
    """With F = B = W our list-scheduled DualPipe idles half of the report's (p/2−1)(F&B+B−3W)
    (F&B = F + B, the pair in sequence; zero at p = 2 in both); with unequal parts it is not
    bounded by it: a forward much longer than B and W (F=1.7, B=0.65, W=0.27 at p=8) idles more."""
    def idle(p, m, times):
        events = simulate(dualpipe(p, m), lambda a: times[a.op])
        return max(e["t1"] for e in events) - m * sum(times.values())

    for p, m in SIZES:
        for t in (1.0, 2.5):
            assert idle(p, m, {"F": t, "B": t, "W": t}) == pytest.approx(
                cost_dualpipe.report_bubble("dualpipe", p, t, t, t) / 2, abs=1e-9)
    long_forward = {"F": 1.7, "B": 0.65, "W": 0.27}
    assert idle(8, 16, long_forward) > cost_dualpipe.report_bubble("dualpipe", 8, *long_forward.values())


def test_validator_checks_directions_and_pairs():
    good = dualpipe(2, 4)
    wrong = [list(r) for r in good.actions]
    wrong[0][0] = wrong[0][0]._replace(dir=1)
    with pytest.raises(ScheduleError, match="micro-batch 0 flows direction 0"):
        check(good.__class__(**{**good.__dict__, "actions": tuple(map(tuple, wrong))}))
    f, b = good.pairs[0][0]
    bad_pairs = ((b, f),) + good.pairs[0][1:], good.pairs[1]
    with pytest.raises(ScheduleError, match="is not an F followed by a B"):
        check(good.__class__(**{**good.__dict__, "pairs": bad_pairs}))
    assert str(Action("F", 1, 3, 1)) == "F1.3r"
    with pytest.raises(ValueError, match="charged='both'"):
        simulate(good, charged="both")


@pytest.mark.parametrize("kwargs,match", [
    (dict(world_size=3, pp=3), r"even number of pipeline ranks .* got pp=3"),
    (dict(world_size=3), r"dividing world_size=3"),
    (dict(world_size=4, pp=4, microbatches=6), r"microbatches=6 with pp=4"),
    (dict(world_size=2, microbatches=3), r"microbatches=3 with pp=2"),
    (dict(world_size=4, pp=4, batch_size=9), r"none does"),
])
def test_bad_sizes_are_value_errors_before_any_process(kwargs, match):
    with pytest.raises(ValueError, match=match):
        parlab.run("pp-dualpipe", **kwargs)
    with pytest.raises(ValueError, match="pp=5"):
        dualpipe(5, 10)


@pytest.fixture(scope="module")
def reference():
    return parlab.run("single", model="gpt", steps=2)


@pytest.fixture(scope="module", params=[2, 4], ids=["pp2", "pp4"])
def run(request):
    return parlab.run("pp-dualpipe", world_size=request.param, model="gpt", steps=2)


def test_matches_single(reference, run):
    comparison = run.compare(reference)
    assert comparison.match, comparison.problems


def test_ledger_is_the_closed_form_and_activations_are_p_plus_one(run):
    p, steps = run.config.world_size, run.config.steps
    m = 2 * p if p == 2 else 12  # the defaults: the fewest even divisors of 12 rows >= 2p
    mc = run.config.model_config
    numel = run.config.batch_size // m * mc.block_size * mc.n_embd
    schedule = dualpipe(p, m)
    for rank in range(p):
        sent = sum(run.bytes_per_rank(op="send", phase=ph)[rank] for ph in ("pp-fwd", "pp-bwd"))
        assert sent == steps * cost_dualpipe.dualpipe_p2p_bytes_per_step(p, m, rank, numel)
        assert sent == steps * cost.p2p_bytes_per_step(p, 1, m, rank, numel)  # 1F1B's count
        group = sorted({rank, p - 1 - rank})
        expect = cost_dualpipe.mirror_sync_bytes(run.outputs[rank].extras["param_numels"], 2,
                                        group.index(rank))
        assert run.bytes_per_rank(phase="mirror-sync")[rank] == steps * expect
        assert run.bytes_per_rank(phase="embed-tie")[rank] == 0
        extras = run.outputs[rank].extras
        assert extras["in_flight_peak"] == p + 1
        per_stage = extras["stage_activations"]
        # a few kB of one-off tensors (the loss's) ride along: 5 %
        assert run.memory[rank]["activations"] == pytest.approx(
            cost.held_peak(schedule, rank, per_stage), rel=0.05)


def test_paced_bubble_is_what_the_action_lists_predict():
    """In virtual time (A100, NVLink) the measured bubble is the ideal one — the action lists
    with the run's own stage times and messages on a wire, as virtual time's link carries them —
    within a point (measured 0.04), and below 1F1B's closed form at the same p and m."""
    from parlab.pipeline.explore.dualpipe import TOLERANCE, measure

    row = measure("pp-dualpipe", pp=4, microbatches=8, steps=2)
    assert abs(row["bubble"] - row["ideal"]) <= TOLERANCE == 0.01, row
    assert row["bubble"] < cost.theory_bubble("1f1b", 4, 8)
    assert row["in_flight"] == [5, 5, 5, 5]
