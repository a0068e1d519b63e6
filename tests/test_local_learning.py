"""Chapter 05, breaking backprop locking: the exact cases equal `single`, every other setting
equals its one-process emulation, gradients cross exactly the boundaries the route allows with
exactly the closed form's bytes, and every PipeDream backward used the weights its forward saw."""


import pytest

import parlab
from parlab.engine.runner import make_config
from parlab.engine.verify import compare_states
from parlab.local_learning import cost
from parlab.local_learning.emulate import emulate
from parlab.local_learning.layout import resolve
from parlab.local_learning.routes import Route
from parlab.pipeline.schedules import one_f_one_b
from tests.conftest import CACHE  # the session's one cache of runs

STEPS = 3


def run(scheme, world_size, model="gpt", **options):
    return CACHE(scheme, world_size=world_size, model=model, steps=STEPS, **options)


def _run(scheme, world_size, options):
    return run(scheme, world_size, **options)


# ----------------------------------------------------------------------------- routes (no processes)
def test_routes_carry_each_loss_at_most_depth_boundaries():
    assert [Route.of(4, 0, 1.0).crossing(j) for j in range(3)] == [(), (), ()]
    assert [Route.of(4, 1, 1.0).crossing(j) for j in range(3)] == [(1,), (2,), (3,)]
    assert [Route.of(4, 2, 1.0).crossing(j) for j in range(3)] == [(1, 2), (2, 3), (3,)]
    assert [Route.of(4, 3, 0.0).crossing(j) for j in range(3)] == [(3,), (3,), (3,)]
    assert [Route.of(4, 1, 0.0).crossing(j) for j in range(3)] == [(), (), (3,)]
    assert Route.of(4, 2, 1.0).reaching(1) == (1, 2, 3) and Route.of(2, 5, 1.0).depth == 1
    assert [Route.of(4, d, 1.0).tied for d in range(4)] == [False, False, False, True]


@pytest.mark.parametrize("p,m", [(2, 2), (3, 4), (4, 4), (4, 2)])
def test_global_route_is_1f1b_and_local_never_waits(p, m):
    schedule = one_f_one_b(p, m)
    for r in range(p):
        expected = [(a.op, a.mb) for a in schedule.actions[r]]
        assert Route.of(p, p - 1, 0.0).order(r, m) == expected
        assert Route.of(p, 0, 1.0).order(r, m) == [(op, i) for i in range(m) for op in "FB"]
        assert Route.of(p, 1, 1.0).warmup(r, m) == (0 if r == p - 1 else 1)


# ----------------------------------------------------------------------------- exactness
def reference(model):
    return CACHE("single", model=model, steps=STEPS)


EXACT = [("local", 1, {}), ("local", 2, {"pp": 1}), ("interlocking", 1, {}),
         ("interlocking", 2, {"pp": 1, "model": "mlp"}),
         ("interlocking", 2, {"depth": 1, "aux_weight": 0.0}),
         ("interlocking", 4, {"depth": 3, "aux_weight": 0.0, "microbatches": 4}),
         ("pipedream", 2, {"microbatches": 1}), ("pipedream-2bw", 2, {"microbatches": 1}),
         ("pipedream", 2, {"microbatches": 1, "model": "mlp"})]


@pytest.mark.parametrize("scheme,world_size,options", EXACT)
def test_exact_cases_equal_single(scheme, world_size, options):
    result = _run(scheme, world_size, options)
    comparison = result.compare(reference(options.get("model", "gpt")))
    assert comparison.match, comparison.problems


EMULATED = [("local", 2, {}), ("interlocking", 2, {"aux_weight": 0.5, "model": "mlp"}),
            ("interlocking", 3, {"depth": 2}), ("local", 3, {"model": "mlp", "microbatches": 2})]


@pytest.mark.parametrize("scheme,world_size,options", EMULATED)
def test_other_settings_equal_their_one_process_emulation(scheme, world_size, options):
    result = _run(scheme, world_size, options)
    cfg = make_config(scheme, world_size=world_size, steps=STEPS, **options)
    layout = resolve(cfg)
    route = Route.of(layout.pp, cfg.options.get("depth", 0), cfg.options.get("aux_weight", 1.0))
    em = emulate(cfg, layout, route)
    assert result.losses == pytest.approx(em.losses, rel=1e-4)
    worst, name, problems = compare_states(result.state, em.state)
    assert not problems, problems
    if scheme == "local" or route.aux_weight:  # the auxiliary losses are the emulation's too
        for out in result.outputs:
            s = out.extras["stage"]
            if s < layout.pp - 1:
                assert out.extras["aux_losses"] == pytest.approx([a[s] for a in em.aux_losses],
                                                                 rel=1e-4)


# ----------------------------------------------------------------------------- ledger
@pytest.mark.parametrize("scheme,world_size,options", EMULATED + [EXACT[4], EXACT[5]])
def test_bytes_per_step_per_boundary_are_the_closed_form(scheme, world_size, options):
    result = _run(scheme, world_size, options)
    cfg = result.config
    layout = resolve(cfg)
    route = Route.of(layout.pp, cfg.options.get("depth", 0), cfg.options.get("aux_weight", 1.0))
    table = cost.boundary_table(route, cfg.model_config, layout.rows)
    for step in range(STEPS):
        for row in table:
            j = row["boundary"]
            up = sum(r["bytes_sent"] for r in result.ledger
                     if r["rank"] == j and r["phase"] == "pp-fwd" and r["step"] == step)
            down = sum(r["bytes_sent"] for r in result.ledger
                       if r["rank"] == j + 1 and r["phase"] == "pp-bwd" and r["step"] == step)
            assert (up, down) == (row["activations"], row["gradients"]), (step, row)
    if scheme == "local":  # activations only
        assert all(row["gradients"] == 0 for row in table)
    assert result.bytes_per_rank() == parlab.schemes()[scheme].cost(cfg).bytes_sent


# ----------------------------------------------------------------------------- weight stashing
@pytest.mark.parametrize("scheme", ["pipedream", "pipedream-2bw"])
def test_every_backward_used_the_weights_its_forward_saw(scheme):
    result = run(scheme, 2, microbatches=2)
    p, m = 2, 2
    for out in result.outputs:
        s, records = out.extras["stage"], out.extras["versions"]
        assert [g for g, *_ in records] == list(range(STEPS * m))  # every micro-batch, in order
        assert all(fwd == used for _, fwd, used, _ in records)  # stashed: the forward's version
        warm = cost.pipedream_warmup(p, m, s)
        if scheme == "pipedream":  # an update per micro-batch: live = g, staleness min(g, warm)
            assert [live - fwd for g, fwd, _, live in records] == [min(g, warm) for g, *_ in records]
            assert out.extras["peak_versions"] == cost.pipedream_versions(p, m, s)
        else:  # one update per m micro-batches: at most one version behind, two versions held
            assert all(live - fwd in (0, 1) for _, fwd, _, live in records)
            assert out.extras["peak_versions"] == cost.twobw_versions(p, m, s)
    assert all(loss == loss for loss in result.losses) and result.losses[-1] < result.losses[0]
    assert result.bytes_per_rank() == parlab.schemes()[scheme].cost(result.config).bytes_sent


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("scheme,world_size,options,names", [
    ("local", 2, {"pp": 3}, "pp=3"),
    ("interlocking", 2, {"depth": -1}, "depth=-1"),
    ("interlocking", 2, {"aux_weight": -0.5}, "aux_weight=-0.5"),
    ("local", 2, {"microbatches": 5}, "microbatches=5"),
    ("local", 1, {"pp": 5}, "pp=5"),
    ("pipedream", 4, {"pp": 2}, "dp=2"),
    ("pipedream-2bw", 2, {"microbatches": 0}, "microbatches=0"),
])
def test_bad_input_fails_before_any_process(scheme, world_size, options, names):
    with pytest.raises(ValueError, match=names):
        make_config(scheme, world_size=world_size, **options)


# ----------------------------------------------------------------------------- exercises
RIGHT = {"interlock-run": 98304, "pipedream-fit": 5, "scheme-fits": "2bw",
         "local-catch-up": 59, "stash-gpu": 70 * 64 / (16 + 63 * 2),  # Ψ/p·(16 + 63·2) + 10 <= 80 GB
         "merge-bytes": 3 * 2 * 128 * 2048 * 2048 * 2 / 1e9 + 2 * 1.3e9 * 2 / 1e9}  # k = 4, dp = 2


def test_exercises_check_without_telling(capsys):
    from parlab.local_learning import exercises

    assert 4 <= len(exercises.EXERCISES) <= 6 and {e.name for e in exercises.EXERCISES} == set(RIGHT)
    for name, answer in RIGHT.items():
        ex = exercises.exercise(name)
        assert ex.check(answer) and not ex.check(None) and not ex.check("backward")
    kinds = [e.kind for e in exercises.EXERCISES]
    assert kinds.count("design") >= 2 and kinds.count("predict") >= 1
    out = capsys.readouterr().out
    assert "98304" not in out and "98,304" not in out and "right" in out
    assert "131072" not in out and "131,072" not in out


def test_explain_idle_names_the_link_bound_stage(capsys):
    """In virtual time (A100), so nothing here depends on this machine's load. On the real 1GbE a
    message of the tiny GPT's boundary at 64 rows per micro-batch (64·32·32·4 B) costs α + bytes/β
    = 50 µs + 2.097 ms, two per step: 4.29 A100 ms, exactly (the ledger's bytes through
    Link.cost); the stage's compute per step is 2.40 A100 ms (its operators' launches and FLOPs),
    so the stage is link-bound, 1.79×. (On 100Gb-IB, or at the default 6 rows, the tiny GPT's
    kernel launches outlast its messages even on 1GbE: no link-bound stage to name.)"""
    from parlab.local_learning.explore import timing as ex_timing

    rows = ex_timing.compare_schemes(2, steps=2, link="1GbE", microbatches=2, clock="A100",
                                     batch_size=128, schemes=(("pp-1f1b", {}),), quiet=True)
    cfg = rows[0]["result"].config
    message = cfg.link.cost(64 * 32 * 32 * 4)  # one micro-batch's activation on the real link
    diagnoses = ex_timing.explain_idle(rows, 2, cores=2)
    out = capsys.readouterr().out
    (d,) = diagnoses
    assert d["link_s"] == pytest.approx(2 * message, rel=1e-12)  # ledger × α-β, to rounding
    assert d["link_s"] > 1.5 * d["compute_s"]  # link-bound (1.79×, deterministic)
    assert d["idle"] > d["form"] + 0.10  # so the diagnosis is printed
    assert out.count("link-bound") == 1 and "A100 ms per step on 1GbE" in out
    assert "share" not in out  # virtual time: a core's contention is not claimed as idle


def test_flushed_pipeline_catches_up_where_its_bubble_falls_below_the_extra_compute():
    """cost.flushed_catches_up: the first m where (1 − decoupled idle)/(1 − 1F1B idle) ≤ the
    compute ratio; never for a scheme that computes no more than 1F1B."""
    m = cost.flushed_catches_up(4, 3, 1.38)
    gain = lambda k: (1 - cost.decoupled_idle(4, k, 3)) / (1 - cost.one_f_one_b_idle(4, k))  # noqa: E731
    assert gain(m) <= 1.38 < gain(m - 1)
    assert cost.flushed_catches_up(4, 3, 1.14) > m  # less extra compute: a larger m to catch up
    assert cost.flushed_catches_up(4, 3, 1.0) is None


def test_when_to_use_follows_the_numbers_it_is_given():
    """Chapter 05's verdict: faster / not faster, lower / not lower and whether stashing paid flip
    with the inputs."""
    from parlab.local_learning.explore import when_to_use_lines

    lesson = {"local": 1.7, "interlocking": 1.3, "pp": 4, "steps": 3, "microbatches": 2,
              "compute_local": 1.14, "compute_interlocking": 1.38}
    losses = {"interlocking": 0.48, "local": 0.52}
    sweep = [{"scheme": "pp-1f1b", "final_loss": 3.7, "idle": 0.6},
             {"scheme": "local", "final_loss": 3.9, "idle": 0.2},
             {"scheme": "pipedream", "final_loss": 3.4, "idle": 0.65}]
    merge = {"vs_pipedream": 1.4, "vs_2bw": 1.2}
    stale = {"stale_gaps": [0.3, 0.01]}
    lines = when_to_use_lines(lesson, losses, sweep, merge, stale)
    assert lines[0] == "When to use it (from this run):" and len(lines) == 4
    assert "1.70× pp-1f1b's throughput (faster)" in lines[1] and "catches up from m ≥ 14" in lines[1]
    assert "3.9000 was higher than global backprop's 3.7000" in lines[1]
    assert "0.4800 was lower than local's" in lines[2] and "catches up from m ≥ 5" in lines[2]
    assert "here m=2 < p=4: PipeDream idled 65%" in lines[3] and "stashing did not pay here" in lines[3]

    lesson.update(local=0.9, compute_local=0.95, microbatches=4)
    losses.update(interlocking=0.6)
    sweep[1]["final_loss"] = 3.5
    merge.update(vs_2bw=0.8)
    flipped = when_to_use_lines(lesson, losses, sweep, merge, stale)
    assert "0.90× pp-1f1b's throughput (not faster)" in flipped[1] and "never catches up" in flipped[1]
    assert "3.5000 was not higher" in flipped[1]
    assert "0.6000 was not lower than local's" in flipped[2]
    assert "m ≥ p here" in flipped[3] and "0.80× 2BW's throughput (not faster)" in flipped[3]
    assert "stashing paid here" in flipped[3]
