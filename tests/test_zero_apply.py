"""Issue 33: chapter 02's `zero-*` schemes attach ZeRO through the chapter's own `apply_zero`, the
function the planner composes — one way to attach it, and the chapter's ledger unchanged."""

import ast
import functools
import inspect

import pytest

from parlab.zero import apply as zero_apply
from parlab.zero import schemes as zero_schemes
from parlab.zero.cost import step_bytes
from parlab.zero.shard import FlatLayout

STAGES = {"zero1": 1, "zero2": 2, "zero3": 3}
STEPS = 2
WORLD = 2


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS)


def records(result) -> list[tuple]:
    """What a ledger says was moved, apart from the group's name: in the order the ranks issued it."""
    return [(r["rank"], r["op"], r["algo"], r["numel"], r["bytes_sent"], r["bytes_recv"],
             r["phase"], r["step"]) for r in result.ledger]


@pytest.mark.parametrize("scheme", list(STAGES))
def test_chapter_ledger_equals_the_dp_only_plan_and_keeps_the_world_group(runs, scheme):
    """The chapter's scheme and the planner's dp-only plan at the same stage move the same
    messages (op, bytes, phase, step, per rank, in order); the chapter's records still name the
    world Comm (as before `apply_zero`), the planner's its dp × cp split."""
    stage = STAGES[scheme]
    chapter, plan = runs(scheme, WORLD), runs("nd", WORLD, dp=WORLD, zero=stage)
    assert chapter.ledger and records(chapter) == records(plan)
    assert {(r["group"], tuple(r["group_ranks"])) for r in chapter.ledger} == {("world", (0, 1))}
    assert {(r["group"], tuple(r["group_ranks"])) for r in plan.ledger} == {("dp×cp", (0, 1))}
    numels = [FlatLayout.from_meta(m).numel for m in chapter.outputs[0].extras["layouts"]]
    expect = STEPS * step_bytes(stage, numels, WORLD)
    assert chapter.bytes_per_rank() == plan.bytes_per_rank() == [expect] * WORLD
    assert chapter.outputs[0].extras["stage"] == stage
    assert chapter.compare(runs("single")).match


def _calls(module) -> set[str]:
    """Names of the functions and classes `module`'s source calls (`f(...)`, `a.f(...)`)."""
    names = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def test_chapter_schemes_attach_zero_only_through_apply_zero():
    calls = _calls(zero_schemes)
    assert "ZeroEngine" not in calls
    assert "ZeroEngine" not in vars(zero_schemes)
    assert "apply_zero" in calls
    assert zero_schemes.apply_zero is zero_apply.apply_zero


def test_apply_zero_takes_the_engine_options():
    params = inspect.signature(zero_apply.apply_zero).parameters
    assert params["prefetch"].default is False and params["algo"].default == "gloo"
    assert params["reuse_world"].default is False  # the planner's groups keep their "dp×cp" name
    assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY
               for name in ("prefetch", "algo", "reuse_world"))
