"""Chapter 08: PyTorch's own PowerSGD hook (`torch-powersgd`) beside ours — exact before it starts
compressing, nominal ledger bytes equal to the closed form of its `_should_compress` rule, and a
compressed run's loss within a stated bound of our `powersgd` at the same rank."""

import functools

import pytest
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

import parlab
from parlab.compression import cost

STEPS = 6
LOSS_BOUND = 0.05  # |torch-powersgd − powersgd| ≤ 5% of powersgd's final loss (rank 4, 6 steps)


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS)


@pytest.mark.parametrize("world_size,model", [(1, "mlp"), (2, "gpt"), (4, "mlp")])
def test_before_start_iter_equals_single(runs, world_size, model):
    """Before `start_iter` the hook is a plain all-reduce: the run is DDP, equal to single."""
    result = runs("torch-powersgd", world_size, model, start_iter=STEPS + 1)
    comparison = result.compare(runs("single", 1, model))
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("world_size,model,options", [
    (2, "gpt", {}), (4, "mlp", {"rank": 2, "start_iter": 3}),
    (2, "gpt", {"bucket_mb": 0.05}),  # several buckets: the serialized hook keeps ranks in step
    (2, "mlp", {"error_feedback": False, "warm_start": False, "start_iter": 0})])
def test_nominal_bytes_equal_closed_form(runs, world_size, model, options):
    result = runs("torch-powersgd", world_size, model, **options)
    o = result.config.options
    for rank, out in enumerate(result.outputs):
        buckets_per_step = out.extras["buckets"]
        assert out.extras["drain"]["drained"]  # no callback left on gloo's workers at the end
        assert len(buckets_per_step) == STEPS
        for step, buckets in enumerate(buckets_per_step):
            compressed = {c for c, _ in buckets}
            assert compressed == {step >= o["start_iter"]}
            expect = cost.torch_powersgd_bytes([shapes for _, shapes in buckets], world_size, rank,
                                               step >= o["start_iter"], o["rank"],
                                               o["min_compression_rate"])
            assert result.bytes_per_rank(op="all_reduce", step=step)[rank] == expect, (rank, step)
    if "bucket_mb" in options:
        assert max(len(b) for b in result.outputs[0].extras["buckets"]) > 1  # really several
    else:  # the models here fit one 25 MiB bucket: the closed form on the whole model
        shapes = [tuple(v.shape) for v in result.state.values()]
        assert sorted(result.outputs[0].extras["buckets"][-1][0][1]) == sorted(shapes)


def test_compressed_loss_near_ours(runs):
    ours = runs("powersgd", 2, "gpt", rank=4)
    torch_run = runs("torch-powersgd", 2, "gpt", rank=4)
    assert torch_run.losses[-1] < torch_run.losses[0]  # it trains
    assert abs(torch_run.losses[-1] - ours.losses[-1]) <= LOSS_BOUND * ours.losses[-1], \
        (torch_run.losses, ours.losses)


@pytest.mark.parametrize("shape", [(96, 32), (32,), (3, 64), (64, 2), (128, 32), (5, 5), (1,),
                                   (8, 3, 3, 3), (10, 10)])
@pytest.mark.parametrize("rank,rate", [(1, 2.0), (4, 2.0), (4, 1.0), (16, 0.5)])
def test_closed_form_follows_should_compress(shape, rank, rate):
    whole, ps, qs = cost.torch_powersgd_elements([shape], rank, rate)
    n = shape[0]
    m = 1
    for d in shape[1:]:
        m *= d
    r = min(n, m, rank)
    if _should_compress(n, m, r, rate)[0]:
        assert (whole, ps, qs) == (0, n * r, m * r)
    else:
        assert (whole, ps, qs) == (n * m, 0, 0)


@pytest.mark.parametrize("options,named", [
    ({"start_iter": 1}, "start_iter=1"), ({"rank": 0}, "rank=0"),
    ({"error_feedback": "yes"}, "error_feedback='yes'"), ({"batch_size": 10}, "batch_size=10")])
def test_bad_options_raise_before_launch(options, named):
    with pytest.raises(ValueError, match=named):
        parlab.run("torch-powersgd", world_size=4, **options)
