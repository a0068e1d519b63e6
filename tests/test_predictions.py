"""Every scheme that registers a cost predicts exactly the bytes its ledger records.

`parlab.schemes()[name].cost(cfg)` applies the chapter's closed forms to a configuration; a
planner (chapter 13) compares schemes through it, so it is held here against measurement.
"""

import pytest

import parlab
from parlab.engine.runner import make_config

CASES = [("single", 1, {}), ("ddp-naive", 2, {}), ("ddp-naive", 3, {}), ("ddp-bucketed", 2, {}),
         ("ddp-overlap", 4, {}), ("ddp-priority", 2, {"partition_kb": 4}),
         ("dear", 3, {"bucket_mb": 0.01}), ("zero1", 3, {}), ("zero2", 2, {}), ("zero3", 4, {})]

# chapter 10 (parlab/subnet): owner-set all-reduces, and backward masking's refresh all-gather
CASES += [("sdp", 2, {"owners": 1}), ("sdp", 3, {"owners": 2, "mask": "backward"}),
          ("sdp", 4, {"owners": 2, "mask": "backward", "granularity": "neuron"})]
CASES += [("topk", 2, {"ratio": 0.05}), ("randomk", 3, {}), ("qsgd", 2, {"bits": 2}),
          ("signsgd", 4, {}), ("powersgd", 2, {"rank": 2}), ("local-sgd", 2, {"sync_every": 2}),
          ("diloco", 3, {}), ("lowdim", 3, {"observed": 0.75})]  # chapter 08


@pytest.mark.parametrize("scheme,world_size,options", CASES)
def test_prediction_equals_the_ledger(scheme, world_size, options):
    cfg = make_config(scheme, world_size=world_size, steps=2, **options)
    predicted = parlab.schemes()[scheme].cost(cfg)
    measured = parlab.run(scheme, world_size=world_size, steps=2, **options)
    assert predicted.bytes_sent == measured.bytes_per_rank(), predicted.source


def test_every_chapter_registers_predictions():
    chapters = {"single", "ddp-naive", "ddp-bucketed", "ddp-overlap", "ddp-priority", "dear",
                "zero1", "zero2", "zero3", "topk", "randomk", "qsgd", "signsgd", "powersgd",
                "local-sgd", "diloco"}
    with_cost = {name for name, info in parlab.schemes().items() if info.cost is not None}
    assert chapters <= with_cost
    assert {case[0] for case in CASES} == with_cost  # a registered cost without a test fails here


# chapter 07: ep-allgather's bytes do not depend on the routing (ep's do: tests/test_expert_parallel.py
# checks them against the routing counts each run logs)
EP_CASES = [("ep-allgather", 2, {"model": "gpt-moe"}), ("ep-allgather", 4, {"model": "gpt-moe", "ep": 2})]
CASES += EP_CASES


@pytest.mark.parametrize("scheme,world_size,options", EP_CASES)
def test_expert_parallel_prediction_equals_the_ledger(scheme, world_size, options):
    test_prediction_equals_the_ledger(scheme, world_size, options)


# chapter 11 (parlab/heterogeneous): one all-reduce of Ψ per step whatever the shares; backup workers
# add the all-gather of N arrival times
HETERO_CASES = [("hetero-dp", 2, {"shard": "lp", "speeds": [1, 0.5]}), ("hetero-dp", 3, {"shard": "even"}),
                ("backup-workers", 2, {"backups": 1}), ("backup-workers", 4, {"backups": 1}),
                ("hetero-tp", 3, {"speeds": [1, 1, 0.5], "collective": "padded"}),
                ("hetero-tp", 4, {"speeds": [1, 1, 1, 0.5]}),
                ("hetero-hap", 2, {"speeds": [1, 0.5], "program": "dp col col row col col row",
                                   "shard": "proportional"})]
CASES += HETERO_CASES


@pytest.mark.parametrize("scheme,world_size,options", HETERO_CASES)
def test_heterogeneous_prediction_equals_the_ledger(scheme, world_size, options):
    test_prediction_equals_the_ledger(scheme, world_size, options)


# chapter 09 (parlab/asynchrony): the parameter server; async per-worker jobs from the seeded schedule
PS_CASES = [("ps-sync", 2, {}), ("ps-ssp", 4, {"staleness": 1, "delays": "seeded"}),
            ("ps-async", 4, {"delays": "seeded", "straggler": 3.0}),
            ("ps-dualbatch", 4, {"delays": "seeded", "straggler": 3.0, "small_batch": 4})]
CASES += PS_CASES


@pytest.mark.parametrize("scheme,world_size,options", PS_CASES)
def test_parameter_server_prediction_equals_the_ledger(scheme, world_size, options):
    test_prediction_equals_the_ledger(scheme, world_size, options)


# chapter 05 (parlab/local_learning): activations up, gradient components down, tie and dp rings
LOCAL_CASES = [("local", 2, {}), ("interlocking", 3, {"depth": 2}), ("local", 4, {"pp": 2}),
               ("pipedream", 2, {}), ("pipedream-2bw", 2, {"microbatches": 1}),
               ("layerwise-merge", 4, {"pp": 2})]
CASES += LOCAL_CASES


@pytest.mark.parametrize("scheme,world_size,options", LOCAL_CASES)
def test_local_learning_prediction_equals_the_ledger(scheme, world_size, options):
    test_prediction_equals_the_ledger(scheme, world_size, options)


# chapter 13 (parlab/planner): every dimension's closed form composed (ep's routing-dependent
# all-to-alls are read from the run's routing log, so only dense plans are predicted here)
ND_CASES = [("nd", 4, {"dp": 2, "tp": 2}), ("nd", 4, {"pp": 2, "cp": 2, "microbatches": 2}),
            ("nd", 4, {"dp": 2, "pp": 2, "zero": 1})]
CASES += ND_CASES


@pytest.mark.parametrize("scheme,world_size,options", ND_CASES)
def test_nd_prediction_equals_the_ledger(scheme, world_size, options):
    test_prediction_equals_the_ledger(scheme, world_size, options)


# mixed precision (parlab/core/precision.py): 16-bit gradients, 2 bytes an element, buckets cut by
# bytes; fp16 adds one 1-element fp32 all-reduce per step (the overflow flag)
MIXED_CASES = [("ddp-naive", 3, {"precision": "bf16-mixed"}),
               ("ddp-bucketed", 2, {"precision": "bf16-mixed"}),
               ("ddp-bucketed", 3, {"precision": "bf16-mixed", "reduce_dtype": "fp32"}),
               ("ddp-overlap", 4, {"precision": "fp16-mixed"}),
               ("ddp-priority", 2, {"precision": "bf16-mixed"}),
               ("dear", 3, {"precision": "bf16-mixed"}),
               ("zero1", 3, {"precision": "bf16-mixed"}), ("zero2", 2, {"precision": "fp16-mixed"}),
               ("zero3", 4, {"precision": "bf16-mixed"}), ("zero3", 3, {"precision": "fp16-mixed"})]


@pytest.mark.parametrize("scheme,world_size,options", MIXED_CASES)
def test_mixed_precision_prediction_equals_the_ledger(scheme, world_size, options):
    test_prediction_equals_the_ledger(scheme, world_size, options)


# chapter 13's operator placement (parlab/planner/placement/placed_cost.py): 2·m·bytes(u) per cross-rank edge
def _placed_options() -> dict:
    from parlab.planner.placement.measured_graph import Graph, with_times
    from parlab.planner.placement.pipeline_1f1b import pipeline_plan
    g = Graph(batch=4, seq=8, width=16, heads=2, kernel=3, microbatches=2)
    g = with_times(g, dict.fromkeys(g.names, 1e-3), dict.fromkeys(g.names, 2e-3))
    options = {k: v for k, v in g.run_options().items() if k != "steps"}
    return {**options, "plan": pipeline_plan(g, 2), "microbatches": 2}


PLACED_CASES = [("placed", 2, _placed_options())]
CASES += PLACED_CASES


@pytest.mark.parametrize("scheme,world_size,options", PLACED_CASES)
def test_placed_prediction_equals_the_ledger(scheme, world_size, options):
    test_prediction_equals_the_ledger(scheme, world_size, options)
