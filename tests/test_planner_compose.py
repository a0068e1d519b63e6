"""Chapter 13, composition: the scheme `nd` equals the single process for every plan of world sizes
1, 2, 4 (and 3 where a plan fits; 3-D at 8 and a few plans of 4 in test_planner_paced.py, whose
paced sweep checks its runs the same way), with ZeRO and micro-batch variants, and on the
mixture-of-experts GPT with ep; every rank's ledger bytes per phase equal `nd_closed_form_bytes`
(+ `nd_routing_bytes` for the routing-dependent all-to-alls); bad plans are refused before any
process starts, with every failing factor named."""

from dataclasses import fields, replace

import pytest

import parlab
from parlab.engine.runner import make_config
from parlab.models import GPTConfig
from parlab.planner.cost import by_dimension, nd_closed_form_bytes, nd_prediction, nd_routing_bytes
from parlab.planner.plan import Plan, enumerate_plans
from tests.helpers import ledger_by_phase

MC = {"n_layer": 4, "n_embd": 16, "n_head": 4, "block_size": 16}  # pp=4, cp=4 (2·cp | T) fit
BATCH, STEPS = 8, 2
KW = {"model_config": MC, "batch_size": BATCH, "steps": STEPS}

PLANS_4 = enumerate_plans(4, GPTConfig(**MC), BATCH)


def _variants() -> list[Plan]:
    """ZeRO-1 wherever a slice has replicas, ZeRO-3 where there is no pipeline, 2 micro-batches
    (and GPipe once) wherever there is a pipeline, activation checkpointing on two plans."""
    out = []
    for p in PLANS_4:
        if p.dp * p.cp > 1:
            out.append(replace(p, zero=1))
            if p.pp == 1:
                out.append(replace(p, zero=3))
        if p.pp > 1:
            out.append(replace(p, microbatches=2))
    out += [Plan(tp=2, pp=2, microbatches=2, schedule="gpipe"),
            Plan(dp=2, pp=2, zero=1, microbatches=2),
            Plan(tp=2, cp=2, checkpoint=True), Plan(dp=2, tp=2, zero=3, checkpoint=True)]
    return out


SMALL = [Plan(), Plan(dp=2), Plan(tp=2), Plan(pp=2), Plan(cp=2), Plan(pp=3, microbatches=2)]


@pytest.fixture(scope="module")
def reference():
    return parlab.run("single", **KW)


def check_plan(plan: Plan, reference) -> None:
    result = parlab.run("nd", world_size=plan.world_size, **plan.options(), **KW)
    comparison = result.compare(reference)
    assert comparison.match, (plan.describe(), comparison.problems)
    table = nd_closed_form_bytes(plan, result.config)
    assert ledger_by_phase(result) == table, plan.describe()
    assert nd_prediction(result.config).bytes_sent == result.bytes_per_rank()
    talking = {d for d in ("tp", "pp", "cp") if getattr(plan, d) > 1}
    talking |= {"dp"} if plan.dp * plan.cp > 1 else set()  # dp × cp ranks share a slice
    assert set(by_dimension(table)) == talking


def test_every_plan_of_four_is_enumerated():
    assert len(PLANS_4) == 10  # ordered factorizations of 4 into dp × tp × pp × cp
    assert {p.world_size for p in PLANS_4} == {4}


def _not_in_paced_sweep(plans: list[Plan]) -> list[Plan]:
    """The plans whose shape the paced sweep (test_planner_paced.py) does not already run and
    check the same way (= single, ledger per phase = the closed form) on the chapter's model."""
    from tests.test_planner_paced import PLANS_4 as PACED
    return [p for p in plans if p not in PACED]


@pytest.mark.parametrize("plan", _not_in_paced_sweep(PLANS_4 + _variants()),
                         ids=lambda p: p.describe())
def test_world_size_4_matches_single_and_bytes_are_closed_form(reference, plan):
    check_plan(plan, reference)


@pytest.mark.parametrize("plan", SMALL, ids=lambda p: p.describe())
def test_world_sizes_1_2_3_match_single(reference, plan):
    check_plan(plan, reference)


def test_dp3_matches_single():
    kw = {**KW, "batch_size": 12}
    result = parlab.run("nd", world_size=3, dp=3, **{k: v for k, v in kw.items()})
    comparison = result.compare(parlab.run("single", **kw))
    assert comparison.match, comparison.problems


# world size 8 (3-D plans): test_planner_paced.py runs and checks them, paced


MOE_KW = {**KW, "model": "gpt-moe", "model_config": {**MC, "n_layer": 2}}  # E=4, top-2, capacity


@pytest.fixture(scope="module")
def moe_reference():
    return parlab.run("single", **MOE_KW)


@pytest.mark.parametrize("plan", [Plan(dp=2), Plan(dp=2, ep=2), Plan(dp=2, tp=2, ep=2),
                                  Plan(dp=4, ep=2), Plan(dp=4, ep=4), Plan(dp=2, zero=1)],
                         ids=lambda p: p.describe())
def test_moe_plans_match_single_and_bytes_are_closed_form(moe_reference, plan):
    result = parlab.run("nd", world_size=plan.world_size, **plan.options(), **MOE_KW)
    comparison = result.compare(moe_reference)
    assert comparison.match, comparison.problems
    want = {**nd_closed_form_bytes(plan, result.config),
            **nd_routing_bytes(plan, result.config, result.outputs)}
    assert ledger_by_phase(result) == want
    if plan.ep > 1:  # tokens really crossed ranks, and the capacity dropped some
        assert want["dispatch"] and any(log["dropped"] for layer in result.outputs[0].extras["routing"]
                                        for log in layer)


def test_options_are_the_plans_fields():
    declared = set(parlab.schemes()["nd"].options) | {"checkpoint"}  # checkpoint: a common option
    assert declared == {f.name for f in fields(Plan)}


def test_closed_form_is_per_rank_and_per_phase():
    cfg = make_config("nd", 4, dp=2, pp=2, **KW)
    table = nd_closed_form_bytes(Plan(dp=2, pp=2), cfg)
    assert set(table) == {"pp-fwd", "pp-bwd", "embed-tie", "dp-grad-sync"}
    assert table["pp-fwd"][0] > 0 and table["pp-fwd"][2] == 0  # the last stage sends no activation
    assert table["pp-bwd"][0] == 0 and table["pp-bwd"][2] > 0
    one = nd_closed_form_bytes(Plan(dp=2, pp=2), cfg, steps=1)
    assert all(2 * a == b for k in one for a, b in zip(one[k], table[k]))


def _refused(world_size, **options) -> str:
    with pytest.raises(ValueError) as err:
        make_config("nd", world_size, **{**KW, **options})
    return str(err.value)


def test_bad_plan_names_every_factor():
    msg = _refused(4, dp=3, tp=3, pp=5, cp=3)
    for factor in ("world_size=4 != dp=3 × tp=3 × pp=5 × cp=3 = 135", "n_head=4", "n_embd=16",
                   "MLP width 4·n_embd=64", "n_layer=4 < pp=5", "block_size=16",
                   "batch_size=8 is not divisible by dp=3"):
        assert factor in msg, (factor, msg)


@pytest.mark.parametrize("options,named", [
    ({"dp": 2, "pp": 2, "zero": 2}, "zero=2 with pp=2"),
    ({"dp": 4, "zero": 3, "microbatches": 2}, "zero=3 with microbatches=2"),
    ({"dp": 4, "microbatches": 4}, "microbatches=4"),
    ({"dp": 2, "ep": 2, "tp": 2}, "ep=2 needs a mixture-of-experts model"),
    ({"dp": 0}, "dp=0"), ({"dp": 4, "zero": 4}, "zero=4"), ({"pp": 4, "schedule": "zb"}, "schedule='zb'"),
])
def test_bad_option_is_named(options, named):
    assert named in _refused(4, **options)


@pytest.mark.parametrize("world_size,options,named", [
    (4, {"dp": 2, "pp": 2, "ep": 2}, "pp=2 > 1 with a mixture-of-experts model"),
    (4, {"dp": 2, "cp": 2}, "cp=2 > 1 with a mixture-of-experts model"),
    (4, {"dp": 4, "ep": 2, "zero": 1}, "zero=1 with ep=2"),
    (3, {"dp": 3, "ep": 3}, "n_experts=4 is not divisible by ep=3"),
    (2, {"dp": 2, "ep": 4}, "ep=4 must divide dp=2"),
])
def test_bad_moe_plan_is_named(world_size, options, named):
    with pytest.raises(ValueError) as err:
        make_config("nd", world_size, **{**MOE_KW, "batch_size": 12, **options})
    assert named in str(err.value)


def test_unsupported_model_is_named():
    with pytest.raises(ValueError, match="mlp"):
        make_config("nd", 2, model="mlp", dp=2)
