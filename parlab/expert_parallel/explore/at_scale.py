"""Notebook 07 at real scale: what expert parallelism's all-to-all costs for a gpt2-xl-width MoE
over 8–64 A100s (NVLink 3 inside a node of 8, HDR InfiniBand between: `parlab.core.link.REAL`,
a DGX A100 cluster), and what node-limited routing (DeepSeek-V3, 2024, §2.1.2) saves on the
InfiniBand part. Closed forms, α-β per link (no run: an estimate, its formula printed):

    rows a rank sends in one dispatch, balanced: (ep−1)/ep · N_r·k; of them 7/ep stay in its node
    (NVLink) and (ep−8)/ep cross InfiniBand; both links work at once (DeepSeek-V3 report §3.2.2;
    Tutel's 2D hierarchical all-to-all, Hwang et al. 2023), one message per peer, so one dispatch
    takes 7·α_NV + (ep−8)·α_IB + max(NVLink bytes/β_NV, IB bytes/β_IB) — the price the paced
    topology charges (`parlab.core.topology.Topology.all_to_all_seconds`)
    expert compute of one MoE layer's forward: N_r·k·2·(2·C·4C) FLOPs at the A100's sustained rate
"""

from __future__ import annotations

import torch

from parlab.core.link import ACCELERATORS, REAL
from parlab.models import node_limited

PRESET_WIDTH = 1600  # gpt2-xl's n_embd (Radford et al. 2019)
PER_NODE = 8  # a DGX A100


def dispatch_seconds(ep: int, tokens: int, top_k: int, width: int, row_bytes: int = 2,
                     intra: str = "NVLink3", inter: str = "HDR-IB", per_node: int = PER_NODE) -> dict:
    """One balanced dispatch (GShard's all-to-all) of one rank: bytes per link and α-β time."""
    rows = tokens * top_k  # (N_r·k) assignments, spread evenly over the ep ranks' experts
    local = min(ep, per_node) - 1  # other ranks inside this rank's node
    remote = ep - 1 - local
    nv_bytes = rows * local / ep * width * row_bytes
    ib_bytes = rows * remote / ep * width * row_bytes
    (a_nv, b_nv), (a_ib, b_ib) = REAL[intra], REAL[inter]
    alpha = local * a_nv + remote * a_ib  # one message to each peer
    return {"nv_bytes": nv_bytes, "ib_bytes": ib_bytes,
            "seconds": alpha + max(nv_bytes / b_nv, ib_bytes / b_ib)}


def cost_table(eps=(8, 16, 32, 64), tokens: int = 8192, top_k: int = 2,
               width: int = PRESET_WIDTH, accelerator: str = "A100") -> list[dict]:
    """Per ep: one dispatch's bytes and time beside one MoE layer's expert compute (forward)."""
    flops = tokens * top_k * 2 * (2 * width * 4 * width)  # N_r·k rows through C→4C→C
    compute = flops / ACCELERATORS[accelerator].flops
    print(f"gpt2-xl-width MoE layer (C = {width}, experts 4C wide, k = {top_k}), {tokens:,} tokens "
          f"per rank, bf16 rows, balanced; nodes of {PER_NODE} A100s: NVLink 3 inside "
          f"(α {REAL['NVLink3'][0] * 1e6:g} µs, {REAL['NVLink3'][1] / 1e9:g} GB/s), HDR InfiniBand "
          f"between (α {REAL['HDR-IB'][0] * 1e6:g} µs, {REAL['HDR-IB'][1] / 1e9:g} GB/s) — α-β "
          f"estimate, not a run")
    print(f"expert compute of the layer's forward: {flops:.3g} FLOPs at the A100's sustained "
          f"{ACCELERATORS[accelerator].flops / 1e12:g} TFLOP/s = {compute * 1e3:.3f} ms")
    print(f"{'ep':>3} {'NVLink MB':>10} {'IB MB':>8} {'dispatch ms':>12} {'4 exchanges ÷ compute':>22}")
    rows = []
    for ep in eps:
        d = dispatch_seconds(ep, tokens, top_k, width)
        ratio = 4 * d["seconds"] / (3 * compute)  # fwd+bwd: 4 exchanges vs 3× the forward FLOPs
        rows.append({"ep": ep, **d, "ratio": ratio})
        print(f"{ep:>3} {d['nv_bytes'] / 1e6:>10.1f} {d['ib_bytes'] / 1e6:>8.1f} "
              f"{d['seconds'] * 1e3:>12.3f} {ratio:>22.2f}")
    inside, across = rows[0], rows[-1]
    print(f"leaving the node multiplies one dispatch's time by "
          f"{across['seconds'] / inside['seconds']:.1f}× (ep {inside['ep']} → {across['ep']}): "
          f"InfiniBand carries {across['ib_bytes'] / (across['ib_bytes'] + across['nv_bytes']):.0%} "
          f"of the rows at 1/{REAL['NVLink3'][1] / REAL['HDR-IB'][1]:g} of NVLink's bandwidth; "
          "the exchanges " + ("outlast" if across["ratio"] > 1 else "stay under")
          + f" the experts' compute at ep {across['ep']} (backward counted as 2× forward)")
    return rows


def node_limit_table(n_experts: int = 64, nodes: int = 8, top_k: int = 8, tokens: int = 4096,
                     limits=(8, 4, 2), seed: int = 0) -> dict:
    """Node-limited routing on random router scores (softmax of N(0, 1) logits: an untrained
    router): nodes each token reaches and InfiniBand copies per token, one per remote node
    (DeepSeek-V3 sends a token once per node, then forwards over NVLink)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.softmax(torch.randn(tokens, n_experts, generator=g), dim=-1)  # (N, E)
    home = torch.arange(tokens) * nodes // tokens  # (N,) tokens spread evenly over the nodes
    per_node = n_experts // nodes
    print(f"E = {n_experts} experts on {nodes} nodes, k = {top_k}, {tokens:,} tokens, random "
          f"scores (an untrained router)")
    out = {}
    for m in limits:
        experts = node_limited.limited_topk(scores, top_k, nodes, m)  # (N, k)
        reached = node_limited.nodes_reached(experts, n_experts, nodes)  # (N,)
        node = experts // per_node  # (N, k)
        hit = torch.zeros(tokens, nodes, dtype=torch.bool).scatter_(1, node, True)  # (N, G)
        remote = hit.sum(1) - hit[torch.arange(tokens), home].int()  # (N,) copies over IB
        out[m] = {"mean_nodes": reached.float().mean().item(), "max_nodes": int(reached.max()),
                  "ib_copies": remote.float().mean().item()}
        print(f"M = {m}: nodes per token mean {out[m]['mean_nodes']:.2f}, max "
              f"{out[m]['max_nodes']} (limit {m}: {'holds' if out[m]['max_nodes'] <= m else 'VIOLATED'}); "
              f"InfiniBand copies per token {out[m]['ib_copies']:.2f}")
    first, last = out[limits[0]], out[limits[-1]]
    print(f"M = {limits[-1]} sends {first['ib_copies'] / last['ib_copies']:.1f}× fewer InfiniBand "
          f"copies per token than M = {limits[0]} (no limit)")
    return out
