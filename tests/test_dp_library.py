"""Chapter 01's gradient sync as a library on a user's model and optimizer (issue 22): frozen
parameters, tied weights, a branch unused in some steps, PyTorch's SGD with momentum and weight
decay — equal to plain PyTorch in one process, with only the trainable bytes on the wire."""

import pytest
import torch

from parlab.core import cost
from parlab.core.launch import launch
from parlab.data_parallel.api import DataParallel
from tests import workers_dp

STEPS = 4


@pytest.fixture(scope="module")
def reference():
    return workers_dp.train_tied_single(STEPS)


@pytest.mark.parametrize("sync", ["naive", "bucketed", "overlap"])
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_library_matches_plain_pytorch(reference, sync, world_size):
    results = launch(workers_dp.train_tied_library, world_size, sync, STEPS)
    for out in results:
        for name, value in reference.items():
            assert torch.allclose(out["state"][name], value, rtol=1e-4, atol=1e-6), (sync, name)
    initial = workers_dp.TiedNet()
    assert torch.equal(results[0]["state"]["frozen.weight"], initial.frozen.weight)  # untouched
    assert not torch.equal(results[0]["state"]["branch.weight"], initial.branch.weight)


def test_only_trainable_parameters_move_and_the_used_map_is_one_small_all_reduce():
    """Per step only trainable gradients and the used-map move; once, at construction, the
    broadcast of rank 0's initial weights."""
    world_size = 2
    results = launch(workers_dp.train_tied_library, world_size, "naive", STEPS)
    for rank, out in enumerate(results):
        trainable = out["numels"]  # embed (tied, once), body, branch: weights and biases
        assert sum(trainable) == sum(p.numel() for n, p in workers_dp.TiedNet().named_parameters()
                                     if not n.startswith("frozen"))
        grads = sum(cost.ring_all_reduce(n, world_size, rank)[0] for n in trainable) * 4
        used_map = cost.ring_all_reduce(len(trainable), world_size, rank)[0] * 4
        by_phase = {}
        for record in out["ledger"]:
            by_phase[record["phase"]] = by_phase.get(record["phase"], 0) + record["bytes_sent"]
        # construction: rank 0's weights (frozen ones too) broadcast once (issue 35, item 7)
        every = sum(p.numel() for p in workers_dp.TiedNet().parameters())
        init = cost.flat_broadcast(every, world_size, rank, 0)[0] * 4
        assert by_phase == {None: STEPS * grads, "unused-map": STEPS * used_map,
                            "init-broadcast": init}


def test_an_unused_parameter_without_the_flag_is_named():
    with pytest.raises(Exception, match="branch.weight"):
        launch(workers_dp.train_tied_library, 2, "overlap", 2, False)


def test_bad_arguments_name_the_value():
    model = workers_dp.TiedNet()
    optimizer = workers_dp.user_optimizer(model)
    for kwargs, match in [({"sync": "dear"}, "sync='dear'"), ({"bucket_mb": -1}, "bucket_mb=-1"),
                          ({"algo": "nccl"}, "algo='nccl'"),
                          ({"find_unused_parameters": 1}, "find_unused_parameters=1")]:
        with pytest.raises(ValueError, match=match):
            DataParallel(model, optimizer, comm=None, **kwargs)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_engine_trains_a_model_with_frozen_and_tied_weights(stage):
    from parlab.zero.shard import FlatLayout, assemble_state

    reference = workers_dp.train_tied_single_all_used(STEPS)
    results = launch(workers_dp.train_tied_zero, 2, stage, STEPS)
    layouts = [FlatLayout.from_meta(m) for m in results[0]["layouts"]]
    state = assemble_state(layouts, [out["shards"] for out in results])
    assert sorted(state) == sorted(n for n in reference if not n.startswith("frozen"))
    for name, value in state.items():
        assert torch.allclose(value, reference[name], rtol=1e-4, atol=1e-6), (stage, name)
    for out in results:  # the frozen layer is never sharded, updated or decayed
        assert torch.equal(out["frozen"], workers_dp.TiedNet().frozen.weight)
