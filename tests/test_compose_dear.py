"""`apply_dp(sync="dear")`: chapter 01's DeAR in a composed plan. The reducer owns the update —
the composed step hands it its optimizer, cut per bucket, and each piece steps in the next
forward after its bucket's all-gather — so `Plan(dp_sync="dear")` equals the single process, its
"dp-grad-sync" ledger equals chapter 01's closed form (`dear_messages`) and sends chapter 01's
own `dear` messages, and the plans it cannot run exactly are refused before any process starts."""

import pytest
import torch

import parlab
from parlab.data_parallel.cost import REDUCER_MESSAGES, dear_messages
from parlab.data_parallel.layerwise import split_optimizer
from parlab.planner.cost import dp_param_numels
from parlab.planner.plan import Plan
from tests.conftest import CACHE  # the session's one cache of runs
from tests.helpers import assert_plan_equals_single_and_its_closed_form

MC = {"n_layer": 4, "n_embd": 16, "n_head": 4, "block_size": 16}
KW = {"model_config": MC, "steps": 2}
CAP = 0.002  # MiB: 524 floats, so each block's gradients take a few buckets
BATCH = {3: 12}  # rows divisible by the dp degree (8 otherwise)

PLANS = [Plan(dp=2, dp_sync="dear", dp_bucket_mb=CAP),
         Plan(dp=3, dp_sync="dear", dp_bucket_mb=CAP),
         Plan(dp=4, dp_sync="dear", dp_bucket_mb=CAP),
         Plan(dp=2, microbatches=2, dp_sync="dear", dp_bucket_mb=CAP),
         Plan(dp=2, tp=2, dp_sync="dear", dp_bucket_mb=CAP),
         Plan(dp=2, cp=2, dp_sync="dear", dp_bucket_mb=CAP)]


def batch_size(plan: Plan) -> int:
    return BATCH.get(plan.dp, 8)


def run(plan: Plan):
    return CACHE("nd", world_size=plan.world_size, **plan.options(), batch_size=batch_size(plan),
                 **KW)


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"{p.describe()} m{p.microbatches}")
def test_dear_plan_matches_single_and_its_closed_form(plan):
    result, reference = run(plan), CACHE("single", batch_size=batch_size(plan), **KW)
    # bytes: chapter 01's closed form on the rank's slice, and the planner's prediction
    assert_plan_equals_single_and_its_closed_form(plan, result, reference)
    n = plan.dp * plan.cp
    numels = dp_param_numels(plan, result.config.model_config, 0)
    messages = REDUCER_MESSAGES["dear"](numels, n, {"bucket_mb": CAP})
    assert REDUCER_MESSAGES["dear"] is dear_messages
    # one reduce-scatter per padded bucket in bucket order, then one all-gather of each (the
    # ledger's numel: the full bucket) in the next forward's order, first layers first
    scatters = [s for op, s in messages if op == "reduce_scatter"]
    assert [s * n for op, s in messages if op == "all_gather"] == scatters
    issued = [("reduce_scatter", s) for s in scatters] + [("all_gather", s) for s in scatters[::-1]]
    for step in range(KW["steps"]):
        synced = [(r["op"], r["numel"]) for r in result.ledger if r["rank"] == 0
                  and r["phase"] == "dp-grad-sync" and r["step"] == step]
        assert synced == issued, plan.describe()
    # the buckets' flat buffers (padded to a multiple of the group), measured
    assert result.memory[0]["comm_buffers"] == 4 * sum(scatters), plan.describe()


def test_the_reducer_steps_each_bucket_in_the_next_forward():
    """Every bucket's optimizer piece steps once a step, inside the next step's forward (the
    last step's after training: flushed), never as the composed step's own optimizer span."""
    plan = PLANS[0]
    result = run(plan)
    numels = dp_param_numels(plan, result.config.model_config, 0)
    buckets = sum(op == "reduce_scatter" for op, _ in dear_messages(numels, 2, {"bucket_mb": CAP}))
    rank0 = [e for e in result.timeline if e["rank"] == 0]
    updates = [e for e in rank0 if e["name"] == "optimizer"]
    assert updates and all("group" in e["args"] for e in updates)
    assert len(updates) == buckets * KW["steps"]
    forward1 = [e for e in rank0 if e["name"] == "forward" and e["args"].get("step") == 1]
    step1 = [e for e in updates if e["args"]["step"] == 1]
    assert len(step1) == buckets  # step 0's updates, labelled with the step that ran them
    assert min(e["t0"] for e in forward1) <= min(e["t0"] for e in step1)
    assert max(e["t1"] for e in step1) <= max(e["t1"] for e in forward1)


@pytest.mark.parametrize("world_size", [2, 4])
def test_dp_only_plan_sends_chapter_01s_dear_messages(world_size):
    """The planner's dp-only plan and chapter 01's own `dear` scheme build the same padded
    buckets: the same reduce-scatters and all-gathers, in the same order, of the same sizes, on
    every rank and step."""
    chapter = CACHE("dear", world_size=world_size, bucket_mb=CAP, batch_size=8, **KW)
    plan = run(Plan(dp=world_size, dp_sync="dear", dp_bucket_mb=CAP))

    def sent(result, phase):
        return [(r["rank"], r["step"], r["op"], r["bytes_sent"]) for r in result.ledger
                if r["phase"] == phase]

    theirs = sent(chapter, "grad-sync")
    assert theirs and sent(plan, "dp-grad-sync") == theirs


@pytest.mark.parametrize("options,match", [
    ({"dp": 2, "pp": 2, "microbatches": 2}, "dp_sync='dear' with pp=2"),
    ({"dp": 2, "zero": 1}, "dp_sync='dear' with zero=1"),
    ({"dp": 2, "dp_compressor": "topk"}, "dp_compressor='topk' with dp_sync='dear'"),
    ({"dp": 2, "model": "gpt-moe"}, "dp_sync='dear' with a mixture"),
])
def test_dear_is_refused_where_it_cannot_be_exact(options, match):
    world_size = options["dp"] * options.get("pp", 1)
    with pytest.raises(ValueError, match=match):
        parlab.run("nd", world_size=world_size, dp_sync="dear", **options, batch_size=8, **KW)


def test_split_optimizer_keeps_each_parameters_settings():
    a, b, c = (torch.nn.Parameter(torch.ones(3)) for _ in range(3))
    whole = torch.optim.AdamW([{"params": [a, b], "lr": 0.1}, {"params": [c], "lr": 0.2,
                                                                  "weight_decay": 0.0}],
                              betas=(0.9, 0.95), eps=1e-5)
    piece = split_optimizer(whole)([b, c])
    assert type(piece) is torch.optim.AdamW
    assert [(g["lr"], g["weight_decay"], g["betas"], g["eps"], len(g["params"]))
            for g in piece.param_groups] == [(0.1, 0.01, (0.9, 0.95), 1e-5, 1), (0.2, 0.0, (0.9, 0.95),
                                                                               1e-5, 1)]
    with pytest.raises(ValueError, match="not AdamW's"):
        split_optimizer(whole)([torch.nn.Parameter(torch.ones(2))])
    for p in (a, b, c):
        p.grad = torch.ones(3)
    whole.step()
    with pytest.raises(ValueError, match="optimizer=AdamW has already stepped"):
        split_optimizer(whole)
