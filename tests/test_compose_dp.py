"""`apply_dp` attaches chapter 01's gradient reducers (issue 33): the scheme `nd` with every
`Plan.dp_sync` equals the single process, its "dp-grad-sync" ledger equals chapter 01's closed
form on the rank's parameters, the overlapped one communicates inside backward, and bad knobs
are refused before any process starts, naming the value."""


import pytest

import parlab
from parlab.data_parallel.cost import REDUCER_MESSAGES
from parlab.planner.cost import dp_param_numels, nd_closed_form_bytes, nd_prediction
from parlab.planner.plan import Plan
from tests.conftest import CACHE  # the session's one cache of runs
from tests.helpers import ledger_by_phase

MC = {"n_layer": 4, "n_embd": 16, "n_head": 4, "block_size": 16}
KW = {"model_config": MC, "batch_size": 8, "steps": 2}
CAP = 0.002  # MiB: 524 floats, so each block's gradients take a few buckets

PLANS = [Plan(dp=2, dp_sync="bucketed", dp_bucket_mb=CAP),
         Plan(dp=2, microbatches=2, dp_sync="overlap", dp_bucket_mb=CAP),
         Plan(dp=2, tp=2, dp_sync="overlap", dp_bucket_mb=CAP),
         Plan(dp=2, pp=2, microbatches=2, dp_sync="overlap", dp_bucket_mb=CAP),
         Plan(dp=2, cp=2, dp_sync="naive")]


@pytest.fixture(scope="module")
def reference():
    return CACHE("single", **KW)


def run(plan: Plan):
    return CACHE("nd", world_size=plan.world_size, **plan.options(), **KW)


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe())
def test_every_dp_sync_matches_single_and_its_closed_form(reference, plan):
    result = run(plan)
    comparison = result.compare(reference)
    assert comparison.match, (plan.describe(), comparison.problems)
    assert ledger_by_phase(result) == nd_closed_form_bytes(plan, result.config), plan.describe()
    assert nd_prediction(result.config).bytes_sent == result.bytes_per_rank()
    # one message per tensor / bucket of chapter 01's closed form, every step
    numels = dp_param_numels(plan, result.config.model_config, 0)
    messages = REDUCER_MESSAGES[plan.dp_sync](numels, plan.dp * plan.cp,
                                              {"bucket_mb": plan.dp_bucket_mb})
    synced = [r for r in result.ledger if r["rank"] == 0 and r["phase"] == "dp-grad-sync"]
    assert len(synced) == KW["steps"] * len(messages) > KW["steps"], plan.describe()
    if plan.dp_sync in ("bucketed", "overlap"):  # the buckets' flat buffers, measured
        assert result.memory[0]["comm_buffers"] == 4 * sum(numels), plan.describe()


def test_overlap_communicates_during_the_last_backward_only():
    for plan, during in ((PLANS[1], True), (PLANS[0], False)):
        rank0 = [e for e in run(plan).timeline if e["rank"] == 0]
        step1 = min(e["t0"] for e in rank0 if e["args"].get("step") == 1)
        backward = sorted((e["t0"], e["t1"]) for e in rank0
                          if e["name"] == "backward" and e["args"].get("step") == 0)
        first = min(e["t0"] for e in rank0 if e["kind"] == "comm" and e["t0"] < step1)
        assert (first < backward[-1][1]) is during, plan.describe()  # inside the last backward
        assert first > backward[0][1] or len(backward) == 1, plan.describe()  # none before it


@pytest.mark.parametrize("options,match", [
    ({"dp": 2, "dp_sync": "ring"}, "dp_sync='ring'"),
    ({"dp": 2, "dp_bucket_mb": -1.0}, "dp_bucket_mb=-1.0"),
    ({"dp": 2, "zero": 1, "dp_sync": "bucketed"}, "dp_sync='bucketed' with zero=1"),
    ({"dp": 2, "dp_sync": "overlap", "model": "gpt-moe"}, "dp_sync='overlap' with a mixture"),
])
def test_bad_dp_sync_is_refused_naming_the_value(options, match):
    with pytest.raises(ValueError, match=match):
        parlab.run("nd", world_size=options["dp"], **options, **KW)


@pytest.mark.parametrize("sync, scheme", [("bucketed", "ddp-bucketed"), ("overlap", "ddp-overlap"),
                                          ("naive", "ddp-naive")])
def test_one_dimensional_plan_sends_the_chapters_messages(sync, scheme):
    """The planner's dp-only plan and chapter 01's own scheme build the same buckets: the same
    messages, in the same order, of the same sizes, on every rank and step."""
    options = {} if sync == "naive" else {"bucket_mb": CAP}
    chapter = parlab.run(scheme, world_size=2, **options, **KW)
    plan = run(Plan(dp=2, dp_sync=sync, **({"dp_bucket_mb": CAP} if options else {})))

    def sent(result, phase):
        return [(r["rank"], r["op"], r["bytes_sent"]) for r in result.ledger if r["phase"] == phase]

    theirs = sent(chapter, "grad-sync")
    assert theirs and sent(plan, "dp-grad-sync") == theirs, (sync, scheme)


def test_the_plans_dp_syncs_are_apply_dps_reducers():
    """The planner's lists of dp_syncs name exactly apply_dp's reducers, those that own the
    update, and those that cut buckets; chapter 01 has a closed form and an issue time for each."""
    from parlab.data_parallel import apply as dp_apply
    from parlab.data_parallel.cost import REDUCER_ISSUE, REDUCER_MESSAGES
    from parlab.data_parallel.reducers import BucketedReducer, GradientReducer, OverlapReducer
    from parlab.planner import plan as plan_mod
    reducers = dp_apply.ALL_REDUCERS
    assert plan_mod.DP_SYNCS == dp_apply.SYNCS == tuple(reducers)
    assert set(plan_mod.DP_OWNS_UPDATE) == {s for s, r in reducers.items() if r.owns_update}
    assert set(plan_mod.DP_BUCKETED) == {s for s, r in reducers.items()
                                         if issubclass(r, (BucketedReducer, OverlapReducer))}
    assert set(REDUCER_MESSAGES) == set(REDUCER_ISSUE) == set(reducers)
    assert all(issubclass(r, GradientReducer) for r in reducers.values())
