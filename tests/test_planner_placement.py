"""Chapter 13, operator-level placement (She et al., 2025): the MILP and the exhaustive search agree,
the plan is data that the timing model, the executor and the drawing share, a run of any plan
(`parlab.run("placed", plan=...)`) equals `parlab.run("single", model="op-graph")`, the ledger holds
exactly the bytes of the closed form, and what a run holds stays within the memory model; bad
input fails before any process starts. Memory caps and the
bi-level decomposition: tests/test_planner_placement_memory.py; the comparison with DualPipe:
tests/test_planner_placement_dualpipe.py."""

import pytest
import torch

from parlab.core.link import Link
from parlab.engine.run_config import make_config
from parlab.planner.explore import placement_run as placed_run
from parlab.planner.placement.exhaustive import exhaustive, greedy
from parlab.planner.placement.measured_graph import Graph, demo_graph, profile, with_times
from parlab.planner.placement.milp import build_milp, solve
from parlab.planner.placement.op_costs import measure_memory, peak_memory
from parlab.planner.placement.pipeline_1f1b import pipeline_plan
from parlab.planner.placement.placed import messages
from parlab.planner.placement.placed_cost import message_bytes
from parlab.planner.placement.tasks import PlacementPlan, Task, evaluate, precedences, tasks

FWD = {"stem": 1e-3, "mlp_up": 3e-3, "mlp_down": 3e-3, "attn": 4e-3, "conv": 2e-3,
       "merge": 1e-3, "head": 1e-3}
BWD = {n: 2 * t for n, t in FWD.items()}
SLOW = Link(5e-3, 1e6, "slow")  # a message costs about a forward: placement must weigh it
TINY = dict(batch=4, seq=8, width=16, heads=2, kernel=3)


def graph(m=1, **kw):
    return with_times(Graph(microbatches=m, **kw), FWD, BWD)


# ----------------------------------------------------------------------------- the graph
def test_edge_bytes_are_the_activation_shapes():
    g = Graph(batch=8, seq=4, width=16, microbatches=2)
    edges = {(u, v): n for u, v, n in g.edges()}
    assert edges["stem", "attn"] == 4 * 4 * 16 * 4  # (B/m, T, d) fp32
    assert edges["mlp_up", "mlp_down"] == 4 * 4 * 64 * 4  # (B/m, T, 4d)
    assert sorted(v for u, v in edges if u == "stem") == ["attn", "conv", "mlp_up"]
    assert len(edges) == 8


def test_profile_measures_every_op():
    g = profile(Graph(microbatches=2, **TINY), reps=2)
    fwd, bwd = g.times()
    assert set(fwd) == set(bwd) == set(g.names)
    assert all(t > 0 for t in list(fwd.values()) + list(bwd.values()))


# ----------------------------------------------------------------------------- solving
@pytest.mark.parametrize("ranks", [1, 2, 3])
@pytest.mark.parametrize("link", [None, SLOW])
def test_milp_equals_exhaustive_search(ranks, link):
    g = graph()
    best, milp = exhaustive(g, ranks, link), solve(g, ranks, link)
    assert milp.objective == pytest.approx(best.objective, rel=1e-6)
    for plan in (best, milp):  # the plan (data) times to what the solver said
        assert evaluate(g, plan, link).makespan == pytest.approx(best.objective, rel=1e-6)


def test_greedy_bounds_the_optimum_and_a_stopped_milp_falls_back_to_it():
    g = graph()
    assert greedy(g, 3).objective >= exhaustive(g, 3).objective - 1e-12
    g4 = graph(m=4)
    stopped = solve(g4, 2, time_limit=1e-3)
    assert stopped.status.startswith("stopped")
    assert evaluate(g4, stopped).makespan == pytest.approx(stopped.objective, rel=1e-6)
    assert stopped.objective <= greedy(g4, 2).objective + 1e-12


def test_the_link_changes_the_placement():
    g = graph()
    fast, slow = solve(g, 3), solve(g, 3, Link(1.0, 1e3, "awful"))
    assert len(set(fast.placement.values())) > 1  # branches spread when messages are cheap
    assert set(slow.placement.values()) == {0}  # everything on one rank when they are not
    assert evaluate(g, slow, Link(1.0, 1e3)).makespan == pytest.approx(sum(FWD.values())
                                                                       + sum(BWD.values()))


def test_micro_batched_milp_beats_or_ties_1f1b():
    g = graph(m=2)
    plan, pipe = solve(g, 2), pipeline_plan(g, 2)
    assert plan.status.startswith("optimal")
    assert plan.objective <= evaluate(g, pipe).makespan + 1e-9
    assert evaluate(g, plan).makespan == pytest.approx(plan.objective, rel=1e-6)


def test_model_is_printed_by_families():
    model, x, s, cmax = build_milp(graph(), 2)
    text = model.text()
    for family in ("each op on one rank", "edge crosses ranks", "precedence", "no overlap",
                   "makespan", "minimise C"):
        assert family in text
    assert f"variables: {len(model.names)}" in text
    assert len(s) == len(tasks(graph())) == 14


def test_one_rank_has_no_bubble_and_sums_the_tasks():
    g = graph(m=2)
    timing = evaluate(g, solve(g, 1))
    assert timing.makespan == pytest.approx(2 * (sum(FWD.values()) + sum(BWD.values())))
    assert timing.bubble == (pytest.approx(0.0),)


def test_evaluate_rejects_bad_plans():
    g = graph()
    good = exhaustive(g, 2)
    names = dict(good.place)
    swapped = tuple(tuple(reversed(seq)) for seq in good.order)  # backward before forward
    with pytest.raises(ValueError, match="deadlocks"):
        evaluate(g, PlacementPlan("bad", 2, good.place, swapped))
    with pytest.raises(ValueError, match="every task once"):
        evaluate(g, PlacementPlan("bad", 2, good.place, (good.order[0][1:], good.order[1])))
    assert set(names) == set(g.names)


def test_pipeline_plan_is_1f1b_over_contiguous_stages():
    g = graph(m=4)
    plan = pipeline_plan(g, 3)
    ranks = [plan.placement[n] for n in g.names]
    assert ranks == sorted(ranks) and set(ranks) == {0, 1, 2}  # contiguous, topological
    last = plan.order[2]
    first_b = next(i for i, t in enumerate(last) if t.kind == "B")
    assert all(t.mb == 0 for t in last[:first_b])  # the last stage: one forward, then backward
    evaluate(g, plan)  # runs to the end: no deadlock


def test_messages_are_derived_from_the_plan():
    g = graph(m=2)
    plan = pipeline_plan(g, 2)
    sent = messages(g, plan)
    place = plan.placement
    cross = [(u, d) for u in g.names for d in {place[v] for v in g.consumers(u)} - {place[u]}]
    assert sum(len(s) for s in sent) == 2 * 2 * len(cross)  # act + grad, per micro-batch
    for rank, seq in enumerate(sent):
        for msg in seq:
            assert msg.src == rank and msg.after in plan.order[rank]
            assert msg.after.kind == ("F" if msg.kind == "act" else "B")


# ----------------------------------------------------------------------------- running for real
@pytest.fixture(scope="module")
def both2():
    """The MILP's plan and the 1F1B pipeline on 2 ranks, each run for 2 steps (shared by the
    exactness test and the report)."""
    from parlab.planner.explore.placement_demo import run_both
    g = graph(m=2, **TINY)
    return g, run_both(g, 2, steps=2)


@pytest.mark.parametrize("ranks,which", [(1, "milp"), (2, "milp"), (2, "1f1b"), (4, "1f1b")])
def test_run_equals_single_and_ledger_equals_closed_form(ranks, which, both2):
    g = graph(m=2, **TINY)
    if ranks == 2:
        g, runs = both2
        plan, run = runs["planned (MILP)" if which == "milp" else "1F1B pipeline"]
    else:
        plan = solve(g, ranks) if which == "milp" else pipeline_plan(g, ranks)
        run = placed_run.run_plan(g, plan, steps=2)
    if ranks > 1:
        assert len(set(plan.placement.values())) == ranks  # every rank has work
    diff = run.compare(placed_run.reference(g, 2))  # losses and final parameters within 1e-4
    assert diff.match, diff
    for step in range(2):
        assert placed_run.sent_bytes(run, step) == message_bytes(g, plan)
    assert len(placed_run.makespans(run)) == 2 and all(t > 0 for t in placed_run.makespans(run))
    assert all(0 <= b < 1 for b in placed_run.bubble(run))
    assert set(placed_run.task_seconds(run)) == set(tasks(g))
    model = peak_memory(plan, measure_memory(g))  # each op's saved tensors counted on its own
    for step in placed_run.step_memory(run):  # the run holds a buffer two ops save once: never more
        assert all(0 < got <= want for got, want in zip(step, model))


def test_run_over_an_emulated_link_is_exact():
    g = graph(m=2, **TINY)
    run = placed_run.run_plan(g, pipeline_plan(g, 2), steps=2, link=Link(1e-3, 1e8, "emulated"))
    assert run.compare(placed_run.reference(g, 2)).match


# ----------------------------------------------------------------------------- bad input
def test_bad_input_fails_before_any_process_starts():
    with pytest.raises(ValueError, match="batch=5"):
        Graph(batch=5, microbatches=2)
    with pytest.raises(ValueError, match="heads=3"):
        Graph(width=16, heads=3)
    with pytest.raises(ValueError, match="measured"):
        solve(Graph(), 2)
    with pytest.raises(ValueError, match="ranks=0"):
        solve(graph(), 0)
    with pytest.raises(ValueError, match="ranks=8"):
        pipeline_plan(graph(), 8)
    with pytest.raises(ValueError, match="method='lp'"):
        solve(graph(), 2, method="lp")
    with pytest.raises(ValueError, match="link='2GbE'"):
        solve(graph(), 2, "2GbE")
    with pytest.raises(ValueError, match="microbatches=2"):
        exhaustive(graph(m=2), 2)
    with pytest.raises(ValueError, match="steps=0"):
        placed_run.run_plan(graph(), solve(graph(), 1), steps=0)


def test_bad_placed_options_fail_before_any_process_starts():
    g = graph(m=2, **TINY)
    plan, options = pipeline_plan(g, 2), g.run_options()

    def config(world_size=2, **kw):
        return make_config("placed", world_size=world_size, **{**options, "plan": plan,
                                                               "microbatches": 2, **kw})
    config()  # the good one
    with pytest.raises(ValueError, match="plan=None"):
        config(plan=None)
    with pytest.raises(ValueError, match="world_size=4"):
        config(world_size=4)
    with pytest.raises(ValueError, match="microbatches=3"):
        config(microbatches=3)
    with pytest.raises(ValueError, match="microbatches=0"):
        config(microbatches=0)
    with pytest.raises(ValueError, match="not the graph's ops"):
        config(plan=PlacementPlan("bad", 2, plan.place[1:], plan.order))
    with pytest.raises(ValueError, match="deadlocks"):
        config(plan=PlacementPlan("bad", 2, plan.place, tuple(s[::-1] for s in plan.order)))
    with pytest.raises(ValueError, match="model='gpt'"):
        config(model="gpt")


def test_precedences_cover_both_directions():
    g = graph()
    prec = {(a, b) for a, b, _ in precedences(g)}
    assert (Task("F", "stem", 0), Task("F", "attn", 0)) in prec
    assert (Task("B", "attn", 0), Task("B", "stem", 0)) in prec
    assert torch.is_tensor(demo_graph(measure=False).data(0)["x"])


def test_report_rows_and_drawings(capsys, both2):
    import matplotlib

    matplotlib.use("Agg")
    from parlab.planner.explore.placement_demo import placement_report, print_report
    from parlab.planner.explore.placement_draw import draw, draw_run

    g, runs = both2
    rows = placement_report(g, 2, runs=runs)
    assert [r["plan"] for r in rows] == ["planned (MILP)", "1F1B pipeline"]
    for r in rows:
        assert r["match"] and r["bytes_ledger"] == r["bytes_closed_form"]
        assert r["measured_ms"] > 0 and len(r["measured_bubble"]) == 2
        assert all(m <= p for m, p in zip(r["measured_memory"], r["predicted_memory"]))
    assert rows[0]["predicted_ms"] <= rows[1]["predicted_ms"] + 1e-9  # optimal ≤ 1F1B, same model
    assert max(rows[0]["predicted_memory"]) <= max(rows[1]["predicted_memory"]) * (1 + 1e-9)
    print_report(rows)
    out = capsys.readouterr().out
    assert "1F1B closed form" in out and out.count("match: True") == 2
    assert out.count("measured ≤ predicted on every rank") == 2 and "fits" in out
    assert draw(g, solve(g, 2)).get_title().startswith("milp predicted")
    assert "measured" in draw_run(runs["1F1B pipeline"][1]).get_title()


def test_report_flags_a_model_that_is_off(capsys):
    """Measured 82 ms against a predicted 26 ms is flagged, and split into what this run's own
    task times explain (replay 41 ms: 1.58×) and what messages and waits add (82 / 41 = 2.00×)."""
    from parlab.planner.explore.placement_demo import print_report

    row = {"plan": "1F1B pipeline", "predicted_ms": 26.0, "measured_ms": 82.0, "replay_ms": 41.0,
           "predicted_bubble": [0.1, 0.2], "measured_bubble": [0.5, 0.6], "bytes_ledger": [1, 1],
           "bytes_closed_form": [1, 1], "match": True, "measured_memory": [1, 1],
           "predicted_memory": [2, 2], "ranks": 1, "microbatches": 2}
    print_report([row])
    out = capsys.readouterr().out
    assert "the model is off — measured 3.15× its prediction" in out
    assert "account for 1.58×" in out and "remaining 2.00×" in out
    print_report([{**row, "measured_ms": 27.0, "replay_ms": 26.5}])
    assert "the model is off" not in capsys.readouterr().out
