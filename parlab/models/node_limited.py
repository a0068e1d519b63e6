"""Node-limited routing (DeepSeek-V3, 2024, §2.1.2): each token's k experts on at most M nodes.

DeepSeek-V3 spreads its routed experts over nodes and caps the nodes a token may reach, so that
a token crosses the slow inter-node link (InfiniBand) at most M times, whatever its scores. For
each token the node's score is the sum of its experts' top k/M affinities; the token keeps the M
best nodes and takes its top k among their experts only. Here a "node" is a contiguous block of
E/G experts (`expert_nodes` = G), which is where the ep ranks of one node hold them when G
divides ep (expert e on ep rank ⌊e·ep/E⌋). M = G routes exactly as plain top-k.
"""

from __future__ import annotations

import torch


def check(n_experts: int, top_k: int, nodes: int, limit: int) -> None:
    """ValueError naming what cannot be routed: G must divide E, 1 ≤ M ≤ G, k ≤ M·E/G."""
    for name, value in (("expert_nodes", nodes), ("node_limit", limit)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name}={value!r} must be an int")
    if nodes < 1 or n_experts % nodes:
        raise ValueError(f"expert_nodes={nodes} must be >= 1 and divide n_experts={n_experts}")
    if not 0 <= limit <= nodes:
        raise ValueError(f"node_limit={limit} must be between 0 (off) and expert_nodes={nodes}")
    if limit and top_k > limit * (n_experts // nodes):
        raise ValueError(f"top_k={top_k} is more than node_limit·E/G = {limit * n_experts // nodes} "
                         "experts a token may reach")


def limited_topk(scores: torch.Tensor, top_k: int, nodes: int, limit: int) -> torch.Tensor:
    """The (N, k) experts of each token: its top k among the experts of its `limit` best nodes.
    scores (N, E), the choice scores (probabilities + bias); nodes G blocks of E/G experts."""
    n, e = scores.shape
    per_node = e // nodes
    by_node = scores.view(n, nodes, per_node)  # (N, G, E/G)
    take = min(per_node, max(1, top_k // limit))  # DeepSeek-V3: the top k/M affinities per node
    node_score = by_node.topk(take, dim=-1).values.sum(-1)  # (N, G)
    best = node_score.topk(limit, dim=-1).indices  # (N, M)
    allowed = torch.zeros(n, nodes, dtype=torch.bool, device=scores.device)
    allowed.scatter_(1, best, True)  # (N, G)
    masked = scores.masked_fill(~allowed.repeat_interleave(per_node, dim=1), float("-inf"))  # (N, E)
    return masked.topk(top_k, dim=-1).indices  # (N, k)


def nodes_reached(experts: torch.Tensor, n_experts: int, nodes: int) -> torch.Tensor:
    """(N,) how many distinct nodes each token's experts (N, k) sit on."""
    node = experts // (n_experts // nodes)  # (N, k)
    hit = torch.zeros(experts.size(0), nodes, dtype=torch.bool, device=experts.device)
    return hit.scatter_(1, node, True).sum(-1)  # (N,)
