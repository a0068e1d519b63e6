"""Composition is the chapters' own code: the planner's one-dimensional plan builds the model the
chapter's scheme builds (issue 33: `planner/compose.py` only orders the chapters' `apply_*`)."""

import pytest

from parlab.core.launch import launch
from tests import workers_compose


@pytest.mark.parametrize("dimension", ["tp", "cp", "ep"])
@pytest.mark.parametrize("world_size", [2, 4])
def test_one_dimensional_plan_builds_the_chapter_model(world_size, dimension):
    for report in launch(workers_compose.chapter_and_plan_build_the_same_model, world_size,
                         dimension):
        assert report["names_only_in_chapter"] == [] and report["names_only_in_plan"] == [], report
        assert report["same_tokens"], report
        assert report["weights"] == 0.0, report
        assert report["loss"] < 1e-6 and report["grads"] < 1e-6, report


def test_planner_holds_no_parallel_layer():
    """compose.py defines no module or layer: every `apply_*` it orders is a chapter's."""
    import inspect

    from parlab.planner import compose
    own = [name for name, obj in vars(compose).items()
           if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == compose.__name__]
    assert sorted(own) == ["build_mesh", "parallelize"], own
    for name in ("apply_tp", "apply_cp", "apply_ep", "split_pp", "apply_dp", "apply_zero"):
        module = getattr(compose, name).__module__
        assert module.split(".")[1] != "planner", (name, module)


def test_tensor_parallel_schemes_build_the_one_gpt():
    """Chapters 03 and 11 define no GPT of their own: their schemes build the one `GPT` with
    `apply_tp` (even or uneven shares), which is all their layer modules offer."""
    import torch.nn as nn

    from parlab.heterogeneous import schemes as hetero
    from parlab.heterogeneous import tp_layers
    from parlab.tensor_parallel import layers, schemes
    for module in (layers, tp_layers):
        models = [name for name, obj in vars(module).items() if isinstance(obj, type)
                  and issubclass(obj, nn.Module) and hasattr(obj, "loss")]
        assert models == [], (module.__name__, models)
    for module in (schemes, hetero):
        assert module.apply_tp.__module__ == "parlab.tensor_parallel.apply"
        assert module.gpt_on_mesh.__module__ == "parlab.models.gpt"
