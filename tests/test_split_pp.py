"""`split_pp` is the one cut of a model into pipeline stages (issue 33): chapter 04's schemes and
the planner's `nd` both call it, so the chapter's scheme and the planner's pp-only plan build the
same stages and send the same messages; the placements (a loop of chunks, DualPipe's mirror) put
every stage on the ranks the schedules expect; bad arguments are refused naming the value."""

import pytest

import parlab
from parlab.models import build_model, model_config
from parlab.pipeline.split import placed_stages, split_pp
from parlab.planner.plan import Plan

KW = {"model_config": {"n_layer": 4, "n_embd": 16, "n_head": 4, "block_size": 16},
      "batch_size": 8, "steps": 2}


def messages(result):
    return [(r["rank"], r["step"], r["op"], r["phase"], r["group"], r["bytes_sent"])
            for r in result.ledger]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_the_chapters_pipeline_and_the_pp_only_plan_are_one_model(schedule):
    chapter = parlab.run(f"pp-{schedule}", world_size=2, microbatches=2, **KW)
    plan = parlab.run("nd", world_size=2, **Plan(pp=2, microbatches=2, schedule=schedule).options(),
                      **KW)
    assert [o.extras["layers_per_stage"] for o in chapter.outputs] == [[2, 2], [2, 2]]
    assert [o.extras["stages"] for o in chapter.outputs] == [[0], [1]]
    assert chapter.losses == plan.losses
    assert messages(chapter) and messages(chapter) == messages(plan)
    assert {r["phase"] for r in chapter.ledger} == {"pp-fwd", "pp-bwd", "embed-tie"}
    for name, value in chapter.state.items():
        assert (value - plan.state[name]).abs().max().item() <= 1e-6, name


def test_placements_hold_every_stage_where_the_schedules_expect():
    # interleaved loop: rank r holds r, p + r, 2p + r
    assert [placed_stages("loop", 3, 2, r) for r in range(3)] == [[0, 3], [1, 4], [2, 5]]
    # DualPipe's mirror: ranks r and p-1-r hold the same pair, every stage twice
    assert [placed_stages("mirror", 4, 1, r) for r in range(4)] == [[0, 3], [1, 2], [1, 2], [0, 3]]


class _Mesh:  # what split_pp reads before its first collective
    names, world = ["pp"], None

    def degree(self, name):
        return 2

    def coord(self, name):
        return 0


@pytest.mark.parametrize("kwargs, named", [({"placement": "ring"}, "placement='ring'"),
                                           ({"counts": [1, 1, 2]}, r"counts=\[1, 1, 2\]")])
def test_bad_split_is_named(kwargs, named):
    model = build_model("gpt", model_config("gpt", KW["model_config"]), seed=0)
    with pytest.raises(ValueError, match=named):
        split_pp(model, _Mesh(), "1f1b", 2, **kwargs)
