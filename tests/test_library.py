"""parlab's building blocks in a user's own training loop (issue 35, item 7): DataParallel and
ZeRO-1/2/3 on a model with a frozen layer, a tied embedding/head and two blocks, every rank seeded
differently (the broadcast at construction makes them one model), equal to plain PyTorch in one
process at world sizes 1, 2, 4 (1e-4)."""

import pytest
import torch

from parlab.core.launch import RankError, launch
from parlab.data_parallel.api import DataParallel
from parlab.zero.api import ZeRO
from tests import workers_library as w

STEPS = 3


@pytest.fixture(scope="module")
def reference():
    return w.single(STEPS)


def _close(got: dict, want: dict, what) -> None:
    assert sorted(got) == sorted(want), what
    for name, value in want.items():
        assert torch.allclose(got[name], value, rtol=1e-4, atol=1e-6), (what, name)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_data_parallel_and_zero_match_one_process(reference, world_size):
    results = launch(w.library, world_size, STEPS, timeout=120)
    initial = w.BlockNet(0)
    for rank, out in enumerate(results):
        _close(out["ddp"], reference["sgd"], ("ddp", world_size, rank))
        assert out["scale"] == 1.0  # buffers come from rank 0 too
        for stage in (1, 2, 3):
            _close(out[f"zero{stage}"], reference["adamw"], (f"zero{stage}", world_size, rank))
            assert torch.equal(out[f"zero{stage}"]["frozen.weight"], initial.frozen.weight)
            # Adam's two moments of this rank's padded shards: 1/N of the trainable parameters
            numel = sum(p.numel() for p in w.trainable(initial))
            assert out[f"zero{stage}_optimizer_numel"] <= 2 * (numel // world_size + 3 * 4)
    assert "head.weight" not in results[0]["zero3"]  # tied: one parameter, named once


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_over_a_parameter_list_with_an_optimizer_factory(stage):
    reference = w.single(STEPS)["sgd"]
    for out in launch(w.parameter_list, 2, STEPS, stage, timeout=120):
        _close(out, reference, ("params", stage))


def test_optimizer_is_optional_and_comm_defaults_to_the_world():
    grads = launch(w.without_optimizer, 2, timeout=60)
    assert torch.allclose(grads[0][0], grads[1][0])  # averaged over the ranks
    assert grads[0][1] is None  # DataParallel holds no optimizer of its own: it never steps
    for grad, _, before, after in grads:  # the user's SGD moved the averaged gradient, alike
        assert torch.allclose(after, before - 0.1 * grad)
    assert torch.equal(grads[0][3], grads[1][3])


@pytest.mark.parametrize("kind", ["ddp", "zero"])
def test_verify_names_the_first_differing_tensor(kind):
    with pytest.raises(RankError, match=r"initial weights differ between ranks: embed.weight "
                                        r"\(16, 8\) on ranks \[1\] is not rank 0's"):
        launch(w.verify_differing, 2, kind, timeout=60)


def test_bad_arguments_are_refused_before_any_communication():
    model = w.BlockNet()
    params = w.trainable(model)
    cases = [
        (lambda: ZeRO(model, w.adamw, stage=4), "stage=4"),
        (lambda: ZeRO(model, w.adamw, stage=True), "stage=True"),
        (lambda: ZeRO(model, w.adamw, init="copy"), "init='copy'"),
        (lambda: ZeRO(params, w.adamw, stage=3), "stage=3 needs the model itself"),
        (lambda: ZeRO([torch.zeros(2)], w.adamw), "must hold torch.nn.Parameter"),
        (lambda: ZeRO(42, w.adamw), "model_or_params=int"),
        (lambda: ZeRO(model, "adam"), "optimizer='adam'"),
        (lambda: ZeRO(model, torch.optim.SGD([{"params": params[:1], "lr": 0.1},
                                               {"params": params[1:], "lr": 0.2}])),
         r"2 parameter groups that differ in \['lr'\]"),
        (lambda: DataParallel(model, init="copy"), "init='copy'"),
        (lambda: DataParallel(model, "sgd"), "optimizer=str"),
    ]
    for make, match in cases:
        with pytest.raises(ValueError, match=match):
            make()


def test_the_chapters_library_demo_matches_one_process():
    """What notebooks 01 and 02 run: every wrapper on a user's tied/frozen model equals plain PyTorch."""
    from parlab.data_parallel.explore import library as ex_library
    from parlab.zero.explore import library as zero_library

    assert ex_library.demo(world_size=2, steps=2) == {"ddp": True}
    assert zero_library.demo(world_size=2, steps=2) == dict.fromkeys(
        ("zero1", "zero2", "zero3"), True)
    with pytest.raises(ValueError, match="world_size=5"):
        ex_library.demo(world_size=5)
    with pytest.raises(ValueError, match="world_size=5"):
        zero_library.demo(world_size=5)
