"""`apply_dp` attaches chapter 08's compressors (issue 33): the planner's dp-only plan with
`Plan.dp_compressor` trains exactly as chapter 08's own scheme with that compressor (the same
losses, parameters and ledger messages — one reducer, two loops), its "dp-grad-sync" bytes equal
chapter 08's closed form (also on composed plans, where the compressor sees tp-sliced stage
parameters), and bad names and options are refused naming the value before any process starts."""


import pytest
import torch

import parlab
import parlab.engine.runner
from parlab.compression import cost
from parlab.data_parallel.apply import apply_dp
from parlab.planner.cost import dp_param_shapes, nd_closed_form_bytes, nd_prediction
from parlab.planner.plan import Plan
from tests.conftest import CACHE  # the session's one cache of runs
from tests.helpers import ledger_by_phase

MC = {"n_layer": 2, "n_embd": 16, "n_head": 4, "block_size": 16}
KW = {"model_config": MC, "batch_size": 8, "steps": 3}

# (compressor, chapter 08's options): lossy settings, so equality means the same computation
COMPRESSORS = [("topk", {"ratio": 0.1}), ("randomk", {"ratio": 0.2}),
               ("qsgd", {"bits": 4, "error_feedback": True}), ("signsgd", {}),
               ("powersgd", {"rank": 2}), ("powersgd", {"rank": 1, "warm_start": False})]
CASES = [(2, c, o) for c, o in COMPRESSORS] + [(4, "topk", {"ratio": 0.1}),
                                               (4, "powersgd", {"rank": 2})]


def dp_plan(world_size: int, compressor: str, options: dict, **degrees) -> Plan:
    return Plan(**({"dp": world_size} | degrees), dp_compressor=compressor,
                **{f"dp_{k}": v for k, v in options.items()})


def run(plan: Plan):
    return CACHE("nd", world_size=plan.world_size, **plan.options(), **KW)


def chapter(world_size: int, compressor: str, items: tuple):
    return CACHE(compressor, world_size=world_size, **dict(items), **KW)


def sent(result, phase):
    return [(r["rank"], r["op"], r["bytes_sent"]) for r in result.ledger if r["phase"] == phase]


@pytest.mark.parametrize("world_size,compressor,options", CASES,
                         ids=[f"ws{n}-{c}-{o}" for n, c, o in CASES])
def test_dp_only_plan_trains_as_chapter_08s_scheme(world_size, compressor, options):
    ours = run(dp_plan(world_size, compressor, options))
    theirs = chapter(world_size, compressor, tuple(sorted(options.items())))
    assert ours.losses == pytest.approx(theirs.losses, abs=1e-5)
    assert ours.state.keys() == theirs.state.keys()
    for name, tensor in theirs.state.items():
        torch.testing.assert_close(ours.state[name], tensor, atol=1e-5, rtol=0, msg=name)
    messages = sent(theirs, "grad-sync")
    assert messages and sent(ours, "dp-grad-sync") == messages  # the same ops, sizes, order
    assert ours.bytes_per_rank() == theirs.bytes_per_rank()
    # the residuals (and PowerSGD's Q) are the reducer's buffers in both loops
    assert ours.memory[0]["comm_buffers"] == theirs.memory[0]["comm_buffers"] > 0


@pytest.mark.parametrize("world_size,compressor,options", CASES,
                         ids=[f"ws{n}-{c}-{o}" for n, c, o in CASES])
def test_bytes_equal_chapter_08s_closed_form(world_size, compressor, options):
    plan = dp_plan(world_size, compressor, options)
    result = run(plan)
    shapes = [tuple(t.shape) for t in result.state.values()]  # the reference's parameter order
    assert shapes == dp_param_shapes(plan, result.config.model_config, 0)
    defaults = parlab.schemes()[compressor].options
    form = [cost.total_bytes(compressor, shapes, world_size, KW["steps"], rank,
                             **(defaults | options)) for rank in range(world_size)]
    assert ledger_by_phase(result) == {"dp-grad-sync": form}
    assert nd_closed_form_bytes(plan, result.config) == {"dp-grad-sync": form}
    assert nd_prediction(result.config).bytes_sent == result.bytes_per_rank() == form


@pytest.mark.parametrize("compressor,options,degrees", [
    ("powersgd", {"rank": 2}, {"tp": 2}),  # tp-sliced matrices: other factor ranks
    ("topk", {"ratio": 0.1}, {"pp": 2, "microbatches": 2}),  # a stage's parameters, tied wte
    ("signsgd", {}, {"cp": 2}),  # averaged over dp × cp
])
def test_composed_plans_send_the_closed_form(compressor, options, degrees):
    plan = dp_plan(2, compressor, options, **degrees)
    result = run(plan)
    assert ledger_by_phase(result) == nd_closed_form_bytes(plan, result.config), plan.describe()
    assert nd_prediction(result.config).bytes_sent == result.bytes_per_rank()
    assert all(torch.isfinite(torch.tensor(result.losses)))


@pytest.fixture
def no_launch(monkeypatch):
    """Any process launch fails the test: a refusal must come before it."""
    def launch(*args, **kwargs):
        raise AssertionError("a process was launched")

    monkeypatch.setattr(parlab.engine.runner, "launch", launch)


@pytest.mark.parametrize("options,match", [
    ({"dp_compressor": "zip"}, r"dp_compressor='zip' must be one of \('powersgd', 'qsgd', "
                               r"'randomk', 'signsgd', 'topk'\)"),
    ({"dp_compressor": "local-sgd"}, "dp_compressor='local-sgd' must be one of"),
    ({"dp_compressor": "topk", "dp_ratio": 1.5}, r"dp_ratio=1.5 must be a number in \(0, 1\]"),
    ({"dp_compressor": "qsgd", "dp_bits": 1}, r"dp_bits=1 must be an int in \[2, 8\]"),
    ({"dp_compressor": "powersgd", "dp_rank": 0}, "dp_rank=0 must be an int >= 1"),
    ({"dp_compressor": "topk", "dp_error_feedback": 1}, "dp_error_feedback=1 must be True or False"),
    ({"dp_compressor": "qsgd", "dp_ratio": 0.1}, "dp_ratio=0.1: not an option of compressor 'qsgd'"),
    ({"dp_ratio": 0.1}, "dp_ratio=0.1 without a dp_compressor"),
    ({"dp_compressor": 5}, "dp_compressor=5 must be one of"),
    ({"dp_compressor": "topk", "dp_ratio": "x"}, "dp_ratio='x' must be a number"),
    ({"dp_compressor": "topk", "zero": 1}, "dp_compressor='topk' with zero=1"),
    ({"dp_compressor": "topk", "dp_sync": "bucketed"}, "dp_compressor='topk' with dp_sync='bucketed'"),
    ({"dp_compressor": "topk", "model": "gpt-moe"}, "dp_compressor='topk' with a mixture"),
])
def test_bad_compressor_is_refused_naming_the_value(no_launch, options, match):
    with pytest.raises(ValueError, match=match):
        parlab.run("nd", world_size=2, dp=2, **options, **KW)


@pytest.mark.parametrize("kwargs,match", [
    ({"compressor": "zip"}, r"compressor='zip' must be one of \('powersgd'"),
    ({"compressor": "topk", "sync": "overlap"}, "sync='overlap' with compressor='topk'"),
    ({"compressor": "topk", "compressor_options": {"ratio": 0}}, "ratio=0 must be a number"),
    ({"compressor": "signsgd", "compressor_options": {"rank": 2}}, "rank=2: not an option"),
    ({"compressor_options": {"ratio": 0.1}}, "without a compressor"),
])
def test_apply_dp_checks_before_touching_the_model(kwargs, match):
    with pytest.raises(ValueError, match=match):
        apply_dp(None, None, **kwargs)  # no model, no mesh: refused before either is read


def test_describe_names_the_compressor():
    assert dp_plan(2, "topk", {"ratio": 0.1}).describe() == "dp2 topk ratio=0.1"
    assert Plan(dp=2).describe() == "dp2"



@pytest.mark.parametrize("compressor,options", [("topk", {"ratio": 0.1}), ("powersgd", {"rank": 2})])
def test_a_paced_dp_only_plan_charges_the_compressor_as_chapter_08_does(compressor, options):
    """The encoding and decoding are compute on the paced clock in both loops: each rank's
    "compress" spans last exactly as long in the planner's dp-only plan as in chapter 08's scheme
    (before, the plan ran them outside any span and they cost nothing)."""
    plan = dp_plan(2, compressor, options)
    ours = CACHE("nd", world_size=2, clock="A100", **plan.options(), **KW)
    theirs = CACHE(compressor, world_size=2, clock="A100", **options, **KW)

    def compress(result):
        return [(e["rank"], round(e["t1"] - e["t0"], 12)) for e in result.timeline  # to 1 ps: the
                if e["name"] == "compress"]  # spans start at other times (float subtraction)

    assert compress(ours) == compress(theirs)
    assert len(compress(ours)) == 2 * KW["steps"] and min(t for _, t in compress(ours)) > 0
