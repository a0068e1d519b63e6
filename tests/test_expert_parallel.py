"""Chapter 07: ep and ep-allgather (and dp × ep) equal the single process on gpt-moe, with and
without dropping; ledger bytes equal the closed forms computed from the logged routing counts;
the routing plan of split ranks is the single process's; memory per rank is the formula."""

import pytest
import torch

import parlab
from parlab.engine.runner import make_config
from parlab.expert_parallel import cost
from parlab.models.gpt_moe import GPTMoEConfig, Router, RoutingPlan, assignment_counts

STEPS = 2
NO_DROP = {"capacity_factor": None}
BALANCED = {"bias_update": 0.01, "aux_loss": 0.0, "shared_expert": True, "moe_every": 2,
            "top_k": 1, "capacity_factor": 1.0}
_REFERENCES = {}


def reference(model_config):
    key = repr(model_config)
    if key not in _REFERENCES:
        _REFERENCES[key] = parlab.run("single", model="gpt-moe", steps=STEPS,
                                      model_config=model_config)
    return _REFERENCES[key]


def expected_bytes(result, rank: int) -> dict:
    """The closed forms for one rank, from the routing counts the run logged."""
    cfg, out = result.config, result.outputs[rank]
    m, W, ep, dp = cfg.model_config, cfg.world_size, out.extras["ep"], out.extras["dp"]
    total = dict.fromkeys(cost.A2A_PHASES + cost.GATHER_PHASES, 0)
    for layer in out.extras["routing"]:
        assert len(layer) == STEPS
        for step in layer:
            if cfg.scheme == "ep":
                part = cost.all_to_all_layer_bytes(step["kept"], rank, out.extras["group"],
                                                   m.n_embd, m.top_k)
            else:
                part = cost.all_gather_layer_bytes(cfg.batch_size // W * m.block_size, ep,
                                                   out.extras["ep_rank"], W, rank, m.n_embd,
                                                   m.top_k, m.n_experts)
            for phase, nbytes in part.items():
                total[phase] += nbytes
    counts = cost.parameter_counts(m)
    sync = cost.sync_bytes(counts["dense"], counts["experts"] // ep, W, rank, dp, rank // ep)
    return {**total, **{phase: STEPS * nbytes for phase, nbytes in sync.items()}}


@pytest.mark.parametrize("scheme,world_size,options,model_config", [
    ("ep", 1, {}, None),
    ("ep", 2, {}, None), ("ep", 4, {}, None), ("ep", 4, {"ep": 2}, None),  # dp=2 × ep=2
    ("ep", 2, {}, NO_DROP), ("ep", 4, {}, NO_DROP), ("ep", 4, {"ep": 2}, NO_DROP),
    ("ep", 2, {}, BALANCED),  # top-1, shared expert, every other block, bias balancing
    ("ep-allgather", 2, {}, None), ("ep-allgather", 4, {"ep": 2}, None),
])
def test_matches_single_and_ledger_is_closed_form(scheme, world_size, options, model_config):
    result = parlab.run(scheme, world_size=world_size, model="gpt-moe", steps=STEPS,
                        model_config=model_config, **options)
    comparison = result.compare(reference(model_config))
    assert comparison.match, comparison.problems
    logs = [out.extras["routing"] for out in result.outputs]
    assert all(log == logs[0] for log in logs)  # every rank derived the same global plan
    for rank in range(world_size):
        got = {phase: result.bytes_per_rank(phase=phase)[rank]
               for phase in cost.A2A_PHASES + cost.GATHER_PHASES + cost.SYNC_PHASES}
        assert got == expected_bytes(result, rank), rank
        assert sum(got.values()) == result.bytes_per_rank()[rank]  # nothing unaccounted for


def test_dropping_happens_and_the_plan_is_the_same_at_every_world_size():
    one = parlab.run("ep", world_size=1, model="gpt-moe", steps=STEPS)
    four = parlab.run("ep", world_size=4, model="gpt-moe", steps=STEPS)
    plan = lambda r: [[(s["load"], s["dropped"]) for s in layer]  # noqa: E731
                      for layer in r.outputs[0].extras["routing"]]
    assert plan(one) == plan(four)
    steps = [s for layer in four.outputs[0].extras["routing"] for s in layer]
    assert any(s["dropped"] for s in steps)  # the default capacity factor 1.25 drops tokens
    for s in steps:
        kept = sum(map(sum, s["kept"]))
        assert kept == sum(s["load"]) - s["dropped"]
        assert max(map(sum, zip(*s["kept"]))) <= s["capacity"]


def test_routing_plan_of_split_ranks_equals_one_process():
    """Cut one batch's tokens over W 'ranks': each rank's keep mask from the gathered counts is
    the single process's keep mask on its rows, for the slot-major global queue."""
    cfg = GPTMoEConfig(n_experts=4, top_k=2, capacity_factor=0.75)
    torch.manual_seed(0)
    router = Router(cfg)
    _, experts, _ = router(torch.randn(96, cfg.n_embd))  # (N, k)
    whole = RoutingPlan(assignment_counts(experts, 4).unsqueeze(0), 0, 36)
    for W in (2, 3, 4):
        parts = experts.chunk(W)
        counts = torch.stack([assignment_counts(p, 4) for p in parts])  # (W, k, E)
        masks = [RoutingPlan(counts, r, 36).keep_mask(p) for r, p in enumerate(parts)]
        assert torch.equal(torch.cat(masks), whole.keep_mask(experts))
        kept = RoutingPlan(counts, 0, 36).kept()  # (W, E)
        assert [int(m[(p == e)].sum()) for m, p in zip(masks, parts) for e in range(4)] \
            == kept.reshape(-1).tolist()


@pytest.mark.parametrize("world_size,ep", [(1, 1), (2, 2), (4, 2), (4, 4)])
def test_memory_per_rank_is_the_formula(world_size, ep):
    result = parlab.run("ep", world_size=world_size, model="gpt-moe", steps=1, ep=ep)
    expect = cost.memory_per_rank(result.config.model_config, ep)
    for measured in result.memory:
        assert {k: measured[k] for k in expect} == expect
    held = [p.numel() for p in result.state.values()]
    counts = cost.parameter_counts(result.config.model_config)
    assert sum(held) == counts["dense"] + counts["experts"]


@pytest.mark.parametrize("kwargs,match", [
    (dict(world_size=3, ep=3), r"n_experts=4 is not divisible by ep=3"),
    (dict(world_size=4, ep=3), r"n_experts=4 is not divisible by ep=3; world_size=4 is not "
     r"divisible by ep=3"),
    (dict(world_size=2, model_config={"top_k": 5}), r"top_k=5 is more than n_experts=4"),
    (dict(world_size=2, model_config={"capacity_factor": 0}), r"capacity_factor=0 must be"),
    (dict(world_size=2, model_config={"capacity_factor": -1.0}), r"capacity_factor=-1.0"),
    (dict(world_size=2, model_config={"n_experts": 0}), r"n_experts=0 must be an int >= 1"),
    (dict(world_size=4, batch_size=6), r"batch_size=6 is not divisible by world_size=4"),
    (dict(world_size=2, ep=0), r"ep=0 must be an int >= 1"),
    (dict(world_size=2, model="gpt"), r"model='gpt' is not supported"),
    (dict(world_size=2, model_config={"moe_every": 5}), r"moe_every=5 is more than n_layer=4"),
])
def test_bad_input_is_a_value_error_before_launch(kwargs, match):
    kwargs = {"model": "gpt-moe", **kwargs}
    for scheme in ("ep", "ep-allgather"):
        with pytest.raises(ValueError, match=match):
            make_config(scheme, **kwargs)


def test_default_ep_uses_every_rank_that_divides_the_experts():
    assert make_config("ep", world_size=4, model="gpt-moe").options["ep"] is None
    run = parlab.run("ep", world_size=4, model="gpt-moe", steps=1,
                     model_config={"n_experts": 2, "top_k": 1})
    assert {(o.extras["dp"], o.extras["ep"]) for o in run.outputs} == {(2, 2)}


def test_exercises_accept_the_right_answer_and_never_print_it(capsys):
    from parlab.expert_parallel.exercises import answers, exercise

    for name, answer in answers().items():
        assert exercise(name).check(answer), name
        assert not exercise(name).check(answer * 1.5 + 1), name
        assert not exercise(name).check(None) and not exercise(name).check("many"), name
        exercise(name).hint()
    out = capsys.readouterr().out
    from tools.leaks import telling_numbers

    for answer in answers().values():  # a one-digit answer (M = 4) tells nothing by itself
        if telling_numbers(f"{answer:g}"):
            assert f"{answer:g}" not in out, answer
            assert answer != int(answer) or f"{answer:,.0f}" not in out, answer
