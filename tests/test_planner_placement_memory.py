"""Chapter 13, operator-level placement under memory capacity (She et al., 2025): the monolithic
MILP with memory per rank equals the exhaustive search, the bi-level decomposition (operators
merged, the merged graph placed, every operator ordered with that placement fixed) never beats it
and equals it when nothing is merged, and what a run holds stays within the model."""

from functools import cache

import pytest

from parlab.planner.placement.bilevel import bilevel, coarsen, expand, merge_ops
from parlab.planner.placement.exhaustive import exhaustive, greedy
from parlab.planner.placement.measured_graph import Graph, with_times
from parlab.planner.placement.milp import milp_plan, solve
from parlab.planner.placement.op_costs import (
    Memory,
    measure_memory,
    memory_of,
    op_graph,
    peak_memory,
)
from parlab.planner.placement.tasks import evaluate
from tests.test_planner_placement import BWD, FWD, TINY  # the branchy graph's op times and shapes

# A triangle a → b → c, a → c: with two micro-batches 12 tasks, small enough to enumerate at
# once, and the order decides how many micro-batches a rank holds at once.
SMALL = op_graph([("a", "b", 1000), ("a", "c", 1000), ("b", "c", 1000)],
                 {"a": 1e-3, "b": 3e-3, "c": 2e-3}, {"a": 2e-3, "b": 6e-3, "c": 4e-3},
                 microbatches=2)
SMALL_MEMORY = memory_of({"a": 1, "b": 3, "c": 2}, {"a": 2, "b": 3, "c": 3})


def graph(m=1):
    return with_times(Graph(microbatches=m), FWD, BWD)


@cache
def _small_best(ranks, cap=None):
    return exhaustive(SMALL, ranks, None, SMALL_MEMORY if cap is not None else None, cap)


def _same_answer(g, ranks, memory, cap, solver):
    """Both find the optimum and agree, or both say no plan fits."""
    try:
        best = _small_best(ranks, cap) if g is SMALL else exhaustive(g, ranks, None, memory, cap)
    except ValueError as error:
        assert "memory_cap" in str(error)
        with pytest.raises(ValueError, match="memory_cap"):
            solver(g, ranks, memory, cap)
        return None
    plan = solver(g, ranks, memory, cap)
    assert plan.objective == pytest.approx(best.objective, rel=1e-6)
    assert evaluate(g, plan).makespan == pytest.approx(plan.objective, rel=1e-6)
    if cap is not None:
        assert max(peak_memory(plan, memory)) <= cap * (1 + 1e-6)
        assert max(peak_memory(best, memory)) <= cap * (1 + 1e-6)
    return best


def _milp(g, ranks, memory, cap):
    return milp_plan(g, ranks, None, 30.0, memory if cap is not None else None, cap)


# ----------------------------------------------------------------------------- the monolithic MILP
@pytest.mark.parametrize("ranks,cap", [(1, 16), (1, 12), (2, None), (2, 10), (2, 9), (2, 7)])
def test_milp_with_memory_equals_exhaustive_search(ranks, cap):
    _same_answer(SMALL, ranks, SMALL_MEMORY, cap, _milp)


def test_a_binding_cap_reorders_and_slows_the_plan():
    free, tight = _small_best(2), _small_best(2, 9)
    assert max(peak_memory(free, SMALL_MEMORY)) > 9  # the free optimum does not fit
    assert tight.objective > free.objective + 1e-9
    one, held = _small_best(1), _small_best(1, 14)  # one rank: the same work, another order
    assert held.objective == pytest.approx(one.objective)
    assert max(peak_memory(held, SMALL_MEMORY)) < max(peak_memory(one, SMALL_MEMORY))


def test_memory_on_the_branchy_graph_equals_exhaustive_search():
    g = graph()  # one micro-batch: 14 tasks
    memory = measure_memory(g)
    top = max(peak_memory(exhaustive(g, 2), memory))
    _same_answer(g, 2, memory, top * 0.6, _milp)


def test_peak_memory_counts_weights_and_activations_in_flight():
    plan = exhaustive(SMALL, 1)
    w, a = SMALL_MEMORY.w, SMALL_MEMORY.a
    held = peak = 0.0
    for t in plan.order[0]:
        held += a[t.op] if t.kind == "F" else -a[t.op]
        peak = max(peak, held)
    assert peak_memory(plan, SMALL_MEMORY) == (sum(w.values()) + peak,)
    assert peak >= sum(a.values())  # micro-batch 0's whole forward precedes its first backward


def test_measure_memory_counts_parameters_twice_and_saved_tensors():
    g = Graph(microbatches=2, **TINY)  # memory needs shapes, not times
    memory = measure_memory(g)
    modules = g.modules()
    for n in g.names:
        params = sum(p.numel() * 4 for p in modules[n].parameters())
        assert memory.w[n] == 2 * params  # parameters and their gradients, fp32
        assert memory.a[n] >= g.nbytes(n) or n == "head"  # at least its own output
    assert memory.a["mlp_up"] > memory.a["merge"]  # 4d wide activations vs d


# ----------------------------------------------------------------------------- the decomposition
@pytest.mark.parametrize("ranks", [2, 3])
def test_bilevel_without_merging_is_the_optimum(ranks):
    g = graph()
    b = bilevel(g, ranks, groups=len(g.names))
    assert all(len(ops) == 1 for ops in b.merged)
    assert b.plan.objective == pytest.approx(exhaustive(g, ranks).objective, rel=1e-6)


@pytest.mark.parametrize("groups", [4, 2])
def test_bilevel_never_beats_exhaustive_and_its_lower_level_is_exact(groups):
    g = graph()
    best = exhaustive(g, 2)
    b = bilevel(g, 2, groups=groups)
    assert len(b.merged) <= max(groups, 1) or len(b.merged) == len(merge_ops(g, groups))
    assert best.objective * (1 - 1e-9) <= b.plan.objective <= b.upper_objective * (1 + 1e-9)
    assert evaluate(g, b.plan).makespan == pytest.approx(b.plan.objective, rel=1e-6)
    # the lower level: the best order for its placement, as enumeration finds it
    fixed = exhaustive(g, 2, place=b.plan.placement)
    assert b.plan.objective == pytest.approx(fixed.objective, rel=1e-6)
    assert "merged" in b.plan.status and b.solve_s > 0


def test_bilevel_under_a_cap_fits_and_never_beats_exhaustive():
    for cap in (10, 9):
        b = bilevel(SMALL, 2, groups=2, memory_cap=cap, memory=SMALL_MEMORY)
        best = _small_best(2, cap)
        assert max(peak_memory(b.plan, SMALL_MEMORY)) <= cap * (1 + 1e-6)
        assert b.plan.objective >= best.objective * (1 - 1e-9)
        assert evaluate(SMALL, b.plan).makespan == pytest.approx(b.plan.objective, rel=1e-6)


def test_merging_keeps_the_graph_acyclic_and_expands_to_a_valid_plan():
    g = graph(m=2)
    for groups in range(1, len(g.names) + 1):
        merged = merge_ops(g, groups)
        assert sorted(n for ops in merged for n in ops) == sorted(g.names)
        coarse, _ = coarsen(g, merged)
        index = {n: i for i, n in enumerate(coarse.names)}
        assert all(index[u] < index[v] for u, v, _ in coarse.edges())  # topological
        plan = expand(g, greedy(coarse, 1), merged)
        evaluate(g, plan)  # every task once, no deadlock
    assert len(merge_ops(g, 1)) == 1


def test_merging_respects_the_memory_cap():
    memory = memory_of({"a": 1, "b": 1, "c": 1}, {"a": 5, "b": 5, "c": 1})
    merged = merge_ops(SMALL, 1, None, memory, cap=8)
    assert all(sum(memory.w[n] + memory.a[n] for n in ops) <= 8 for ops in merged)
    assert not any({"a", "b"} <= set(ops) for ops in merged)


# ----------------------------------------------------------------------------- bad input
def test_bad_memory_input_is_refused():
    g = graph()
    with pytest.raises(ValueError, match="memory_cap=0"):
        solve(g, 2, memory_cap=0)
    with pytest.raises(ValueError, match="memory_cap"):
        solve(g, 2, memory_cap=1.0, memory=memory_of(dict.fromkeys(g.names, 10),
                                                      dict.fromkeys(g.names, 10)))
    with pytest.raises(ValueError, match="memory=Memory"):
        exhaustive(SMALL, 2, cap=10)
    with pytest.raises(ValueError, match="groups=0"):
        bilevel(g, 2, groups=0)
    with pytest.raises(ValueError, match="the same ops"):
        memory_of({"a": 1}, {"b": 1})
    with pytest.raises(ValueError, match="do not go forward"):
        op_graph([("b", "a", 1)], {"a": 1, "b": 1}, {"a": 1, "b": 1})
    assert isinstance(SMALL_MEMORY, Memory)


def test_the_held_memory_exercise_checks_without_telling(capsys):
    from parlab.planner.exercises import exercise
    ex = exercise("held-memory")
    # worked by hand: weights 1 + 1; after F:a.1 three forwards are held, 3 + 2 + 3 = 8
    assert ex.check(10) and not ex.check(8) and not ex.check(12)
    assert "10" not in capsys.readouterr().out


def test_memory_table_prints_both_methods_and_an_infeasible_cap(capsys):
    from parlab.planner.explore.placement_memory import memory_table, print_memory_table
    rows = memory_table(graph(), 2, fractions=(1.0, 0.8, 0.05))
    assert "infeasible" in rows[-1]["milp"] and "infeasible" in rows[-1]["bilevel"]
    for r in rows[:-1]:
        if "infeasible" in r["milp"]:
            assert "infeasible" in r["bilevel"]  # the decomposition cannot find what does not exist
            continue
        assert r["bilevel"]["makespan"] >= r["milp"]["makespan"] * (1 - 1e-9)
        assert max(r["milp"]["peak"], r["bilevel"]["peak"]) <= r["cap"] * (1 + 1e-6)
    print_memory_table(rows)
    out = capsys.readouterr().out
    assert "no plan fits" in out and "bi-level vs monolithic" in out and "ABOVE" not in out
