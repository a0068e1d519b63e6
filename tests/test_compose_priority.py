"""`apply_dp(sync="priority")`: chapter 01's P3 scheduler in a composed plan. Like DeAR the reducer
owns the update — each bucket's optimizer piece steps in the next forward once its partitions are
in — so `Plan(dp_sync="priority")` equals the single process, its "dp-grad-sync" ledger equals
chapter 01's closed form (`priority_messages`), its messages are chapter 01's own `ddp-priority`
ones, and bad options and the plans it cannot run exactly are refused before any process starts."""

import pytest

import parlab
from parlab.data_parallel.cost import REDUCER_MESSAGES, bucketed_messages, priority_messages
from parlab.planner.cost import dp_param_numels
from parlab.planner.plan import Plan
from tests.conftest import CACHE  # the session's one cache of runs
from tests.helpers import assert_plan_equals_single_and_its_closed_form

MC = {"n_layer": 4, "n_embd": 16, "n_head": 4, "block_size": 16}
KW = {"model_config": MC, "steps": 2}
CAP = 0.002  # MiB: 524 floats, so each block's gradients take a few buckets
PART = 0.5  # KiB: 128 floats, so a bucket is several partitions
BATCH = {3: 12}  # rows divisible by the dp degree (8 otherwise)


PLANS = [Plan(dp=2, dp_sync="priority", dp_bucket_mb=CAP, dp_partition_kb=PART),
         Plan(dp=3, dp_sync="priority", dp_bucket_mb=CAP, dp_partition_kb=PART, dp_credit=2),
         Plan(dp=4, dp_sync="priority", dp_bucket_mb=CAP, dp_partition_kb=PART),
         Plan(dp=2, microbatches=2, dp_sync="priority", dp_bucket_mb=CAP, dp_partition_kb=PART),
         Plan(dp=2, tp=2, dp_sync="priority", dp_bucket_mb=CAP, dp_partition_kb=PART),
         Plan(dp=2, cp=2, dp_sync="priority", dp_bucket_mb=CAP, dp_partition_kb=PART, dp_credit=3)]


def batch_size(plan: Plan) -> int:
    return BATCH.get(plan.dp, 8)


def run(plan: Plan):
    return CACHE("nd", world_size=plan.world_size, **plan.options(), batch_size=batch_size(plan),
                 **KW)


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"{p.describe()} m{p.microbatches}")
def test_priority_plan_matches_single_and_its_closed_form(plan):
    result, reference = run(plan), CACHE("single", batch_size=batch_size(plan), **KW)
    # bytes: chapter 01's closed form on the rank's slice, and the planner's prediction
    assert_plan_equals_single_and_its_closed_form(plan, result, reference)
    assert REDUCER_MESSAGES["priority"] is priority_messages
    numels = dp_param_numels(plan, result.config.model_config, 0)
    partitions = priority_messages(numels, plan.dp * plan.cp, plan.reducer_options())
    for step in range(KW["steps"]):  # one all-reduce per partition, front layers' first
        synced = [(r["op"], r["numel"]) for r in result.ledger if r["rank"] == 0
                  and r["phase"] == "dp-grad-sync" and r["step"] == step]
        assert sorted(synced) == sorted(partitions), plan.describe()
    buckets = bucketed_messages(numels, plan.dp * plan.cp, plan.reducer_options())
    assert len(partitions) > len(buckets)  # a bucket is several partitions


@pytest.mark.parametrize("world_size,credit", [(2, 1), (4, 2)])
def test_dp_only_plan_sends_chapter_01s_priority_messages(world_size, credit):
    """The planner's dp-only plan and chapter 01's own `ddp-priority` scheme release the same
    partitions in the same priority order, of the same sizes, on every rank and step."""
    chapter = CACHE("ddp-priority", world_size=world_size, bucket_mb=CAP, partition_kb=PART,
                    credit=credit, batch_size=8, **KW)
    plan = run(Plan(dp=world_size, dp_sync="priority", dp_bucket_mb=CAP, dp_partition_kb=PART,
                    dp_credit=credit))

    def sent(result, phase):
        return [(r["rank"], r["step"], r["op"], r["bytes_sent"]) for r in result.ledger
                if r["phase"] == phase]

    theirs = sent(chapter, "grad-sync")
    assert theirs and sent(plan, "dp-grad-sync") == theirs
    assert plan.losses == pytest.approx(chapter.losses, rel=1e-6, abs=0)


def test_the_time_model_prices_the_partitions():
    """Every partition is a message the time model prices (each pays its α), and the plan's name
    says its partition size and credit."""
    from parlab.planner import costmodel
    from parlab.planner.explore import closed_form_table
    plan = PLANS[0]
    assert plan.describe() == "dp2 priority 0.002MiB 0.5KiB c1"
    table = closed_form_table(2, plans=[plan])
    assert table["equal"].all(), table
    cfg = run(plan).config.model_config
    bucketed = Plan(dp=2, dp_sync="bucketed", dp_bucket_mb=CAP)
    count = {p.dp_sync: sum(x.dim == "dp" for x in costmodel.messages(cfg, p, 8))
             for p in (plan, bucketed)}
    assert count["priority"] > count["bucketed"]


@pytest.mark.parametrize("options,match", [
    ({"dp": 2, "pp": 2, "microbatches": 2}, "dp_sync='priority' with pp=2"),
    ({"dp": 2, "zero": 1}, "dp_sync='priority' with zero=1"),
    ({"dp": 2, "dp_compressor": "topk"}, "dp_compressor='topk' with dp_sync='priority'"),
    ({"dp": 2, "model": "gpt-moe"}, "dp_sync='priority' with a mixture"),
    ({"dp": 2, "dp_partition_kb": 0.0}, "dp_partition_kb=0.0"),
    ({"dp": 2, "dp_credit": 0}, "dp_credit=0"),
])
def test_priority_is_refused_where_it_cannot_run(options, match):
    world_size = options["dp"] * options.get("pp", 1)
    with pytest.raises(ValueError, match=match):
        parlab.run("nd", world_size=world_size, dp_sync="priority", **options, batch_size=8, **KW)
