"""Node-limited routing (DeepSeek-V3, 2024): each token's experts on at most M nodes, `ep` equal
to `single` with it, and M = G routing exactly as plain top-k."""

import pytest
import torch

import parlab
from parlab.models import node_limited

LIMITED = {"n_experts": 8, "top_k": 2, "expert_nodes": 4, "node_limit": 1, "capacity_factor": None}


def test_every_token_reaches_at_most_m_nodes():
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(500, 16, generator=g)
    for limit in (1, 2, 3):
        experts = node_limited.limited_topk(scores, 4, 4, limit)
        assert experts.shape == (500, 4)
        assert int(node_limited.nodes_reached(experts, 16, 4).max()) <= limit
        assert all(len(set(row.tolist())) == 4 for row in experts)  # k distinct experts
    plain = node_limited.nodes_reached(scores.topk(4, dim=-1).indices, 16, 4)
    assert int(plain.max()) > 1  # unlimited top-k does spread over nodes here


def test_limit_equal_to_the_nodes_is_plain_topk():
    scores = torch.rand(300, 8, generator=torch.Generator().manual_seed(1))
    assert torch.equal(node_limited.limited_topk(scores, 2, 4, 4), scores.topk(2, dim=-1).indices)


def test_node_score_is_the_sum_of_the_top_k_over_m():
    scores = torch.tensor([[0.9, 0.0, 0.5, 0.5]])  # node 0: 0.9 + 0.0, node 1: 0.5 + 0.5
    assert sorted(node_limited.limited_topk(scores, 2, 2, 1)[0].tolist()) == [2, 3]
    assert sorted(node_limited.limited_topk(scores, 1, 2, 1)[0].tolist()) == [0]


@pytest.mark.parametrize("bad,match", [({"expert_nodes": 3}, "divide"),
                                       ({"node_limit": 5}, "between"),
                                       ({"top_k": 3, "node_limit": 1}, "reach")])
def test_bad_node_settings_are_value_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        parlab.run("single", model="gpt-moe", steps=1, model_config={**LIMITED, **bad})


def test_ep_with_node_limited_routing_equals_single_and_limits_the_nodes():
    single = parlab.run("single", model="gpt-moe", steps=2, model_config=LIMITED)
    ep = parlab.run("ep", world_size=4, model="gpt-moe", steps=2, model_config=LIMITED)
    comparison = ep.compare(single)
    assert comparison.match, comparison.problems
    plain = parlab.run("single", model="gpt-moe", steps=2,
                       model_config={**LIMITED, "node_limit": 0})
    assert plain.losses != single.losses  # the limit changed the routing
