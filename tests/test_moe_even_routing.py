"""Even routing of gpt-moe (`model_config={"routing": "even"}`, parlab.models.gpt_moe.EvenPlan):
its plan in Python integers is the plan the tensor rule (RoutingPlan) derives from the same
assignments, drops included; ep and ep-allgather routed evenly still equal the single process;
the summary of an evenly routed run — shapes-only ones are — says so."""

import pytest
import torch

import parlab
from parlab.models.gpt_moe import (
    EvenPlan,
    GPTMoEConfig,
    RoutingPlan,
    assignment_counts,
    capacity,
    even_counts,
    even_experts,
)

EVEN = {"routing": "even"}


@pytest.mark.parametrize("n, E, k, cf", [(32, 4, 2, 1.25), (30, 4, 2, 1.25), (32, 4, 1, 0.5),
                                         (33, 6, 4, 0.7), (16, 8, 3, None)])
def test_the_even_plan_in_integers_is_the_tensor_rules_plan(n, E, k, cf):
    cfg = GPTMoEConfig(n_experts=E, top_k=k, capacity_factor=cf, routing="even")
    experts = even_experts(n, E, k)  # (n, k)
    assert all(len(set(row)) == k for row in experts.tolist())  # k distinct experts per token
    assert assignment_counts(experts, E).tolist() == even_counts(n, cfg)
    world = 3
    counts = torch.stack([assignment_counts(experts, E)] * world)  # (W, k, E)
    for rank in range(world):
        tensor_plan = RoutingPlan(counts, rank, capacity(int(counts.sum()), cfg))
        plan = EvenPlan(n, world, rank, cfg)
        assert plan.cap == tensor_plan.cap
        assert plan.kept() == tensor_plan.kept().tolist()
        assert plan.load().tolist() == tensor_plan.load().tolist()
        keep = tensor_plan.keep_mask(experts)
        assert torch.equal(plan.keep_mask(experts), keep)
        token, slot = plan.assignments(keep)
        expected = keep.nonzero(as_tuple=True)
        assert torch.equal(token, expected[0]) and torch.equal(slot, expected[1])


def test_even_routing_gives_every_expert_the_same_tokens_and_ep_still_equals_single():
    single = parlab.run("single", model="gpt-moe", steps=2, model_config=EVEN)
    for scheme in ("ep", "ep-allgather"):
        result = parlab.run(scheme, world_size=2, model="gpt-moe", steps=2, model_config=EVEN)
        assert result.compare(single).match, scheme
        for layer in result.outputs[0].extras["routing"]:
            for step in layer:
                assert len(set(step["load"])) == 1 and step["routing"] == "even"
    assert "routing: even" in single.summary()


def test_a_shapes_only_moe_run_says_it_routes_evenly():
    r = parlab.run("ep", world_size=2, model="gpt-moe", steps=1, clock="A100", link="10GbE",
                   shapes_only=True, model_config=EVEN)
    assert "routing: even" in r.summary() and "no losses" in r.summary()
