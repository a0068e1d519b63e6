"""Notebook 07 at real scale, run: `ep`'s all-to-all at gpt2-xl width, shapes-only in paced A100
time, beside the α-β estimate of `explore.at_scale` (GShard, Lepikhin et al. 2021: two all-to-alls
forward, two backward per MoE layer).

A gpt2-xl-width MoE (C = 1,600, 25 heads, 1,024 tokens per sequence, GPT-2's vocabulary; Radford
et al. 2019) of `layers` MoE blocks, one expert of width 4C per rank (E = ep), k = 2, every expert
the same number of tokens (`routing="even"`: shapes-only has no scores to route by) and no
capacity, runs `ep` with `shapes_only=True` on `clock="A100"` over DGX A100 nodes of 8
(`parlab.core.topology.nodes`: NVLink 3 inside, HDR InfiniBand between). The run trains in fp32,
so a row is 4 bytes per element: the estimate is priced at the run's 4 bytes, not the bf16 of the
α-β table. Measured: rank 0's dispatch in the ledger, t_end − t_start in paced time. Two forms:

    hierarchical (`at_scale.dispatch_seconds`; DeepSeek-V3 report §3.2.2, Tutel's 2D all-to-all,
    Hwang et al. 2023): Σ_peers α + max(NVLink bytes/β_NV, IB bytes/β_IB) — a rank's NVLink
    peers and its InfiniBand peers are served at once, each over its own path
    slowest link (every byte at the group's slowest pair): (ep−1)·α_slow + all bytes/β_slow

Inside one node both are the same; across nodes they part. The paced topology prices an all-to-all
per destination pair (`parlab.core.topology.Topology.all_to_all_seconds`), so the run should
follow the hierarchical form; the verdict says whether it does.
"""

from __future__ import annotations

from parlab.core.link import REAL
from parlab.expert_parallel.explore.at_scale import PER_NODE, PRESET_WIDTH, dispatch_seconds

INTRA, INTER = "NVLink3", "HDR-IB"
ROW_BYTES = 4  # the run's fp32 rows
SEQUENCE = 1024  # gpt2-xl's context
TOLERANCE = 0.05
RANKS = (8, 16)  # one DGX A100 node; two


def moe_config(ep: int, layers: int = 2, top_k: int = 2, width: int = PRESET_WIDTH) -> dict:
    """gpt-moe overrides: gpt2-xl's width, heads, context and vocabulary, `layers` MoE blocks, one
    expert (4C wide) per rank, even routing, no capacity (nothing dropped: every row moves)."""
    return {"n_embd": width, "n_head": 25, "n_layer": layers, "block_size": SEQUENCE,
            "vocab_size": 50257, "n_experts": ep, "top_k": top_k, "capacity_factor": None,
            "routing": "even"}


def slowest_link_seconds(ep: int, tokens: int, top_k: int, width: int, row_bytes: int = ROW_BYTES,
                         per_node: int = PER_NODE) -> float:
    """One balanced dispatch priced on the group's slowest link: (ep−1)·α + bytes/β."""
    rows = tokens * top_k * (ep - 1) / ep  # (N_r·k)·(ep−1)/ep rows leave the rank
    alpha, beta = REAL[INTER if ep > per_node else INTRA]
    return (ep - 1) * alpha + rows * width * row_bytes / beta


def measure(ep: int, layers: int = 2, sequences: int = 8, top_k: int = 2,
            width: int = PRESET_WIDTH, per_node: int = PER_NODE) -> dict:
    """One shapes-only step of `ep` on `ep` ranks in nodes of `per_node`: rank 0's dispatch
    (bytes, paced seconds), the step, and both estimates."""
    import parlab
    from parlab.core.topology import nodes

    tokens = sequences * SEQUENCE  # per rank
    r = parlab.run("ep", world_size=ep, model="gpt-moe", steps=1, clock="A100", shapes_only=True,
                   link=nodes(ep, per_node, INTRA, INTER), batch_size=sequences * ep,
                   model_config=moe_config(ep, layers, top_k, width), timeout=1800.0)
    exchanges = [x for x in r.ledger if x["rank"] == 0 and x["phase"] in
                 ("dispatch", "combine", "dispatch-backward", "combine-backward")]
    dispatch = [x for x in exchanges if x["phase"] == "dispatch"]
    seconds = sum(x["t_end"] - x["t_start"] for x in dispatch) / len(dispatch)
    both = dispatch_seconds(ep, tokens, top_k, width, row_bytes=ROW_BYTES, per_node=per_node)
    return {"ep": ep, "nodes": -(-ep // per_node), "tokens": tokens, "layers": layers,
            "bytes": dispatch[0]["bytes_sent"], "measured_s": seconds,
            "links_at_once_s": both["seconds"],
            "slowest_s": slowest_link_seconds(ep, tokens, top_k, width, per_node=per_node),
            "exchange_s": sum(x["t_end"] - x["t_start"] for x in exchanges),
            "step_s": r.step_times[0], "clock": r.clock.label}


def show(up_to: int = 16, layers: int = 2, sequences: int = 8, top_k: int = 2,
         tolerance: float = TOLERANCE) -> list[dict]:
    """Each ep of RANKS up to `up_to` run shapes-only, its measured dispatch beside the
    hierarchical α-β model, with a verdict at `tolerance`; across nodes, what the slowest-link
    form would have charged; where the model misses, which pricing the run follows."""
    ranks = [ep for ep in RANKS if ep <= up_to]
    if not ranks:
        raise ValueError(f"up_to={up_to!r} must be at least {RANKS[0]}")
    print(f"`ep` shapes-only, paced A100 time: gpt2-xl-width MoE ({layers} MoE blocks, C = "
          f"{PRESET_WIDTH}, one expert 4C wide per rank, k = {top_k}), {sequences * SEQUENCE:,} tokens "
          f"per rank, even routing, fp32 rows ({ROW_BYTES} B per element: the model is priced at "
          f"the run's bytes); nodes of {PER_NODE}: NVLink 3 inside, HDR InfiniBand between")
    print(f"{'ep':>3} {'nodes':>5} {'dispatch MB':>12} {'measured ms':>12} {'model ms':>9} {'off':>6}  "
          f"{'slowest-link ms':>15}  verdict")
    rows = []
    for ep in ranks:
        row = measure(ep, layers, sequences, top_k)
        row["error"] = row["measured_s"] / row["links_at_once_s"] - 1
        row["holds"] = abs(row["error"]) <= tolerance
        rows.append(row)
        print(f"{ep:>3} {row['nodes']:>5} {row['bytes'] / 1e6:>12.1f} {row['measured_s'] * 1e3:>12.3f} "
              f"{row['links_at_once_s'] * 1e3:>9.3f} {100 * row['error']:>+5.0f}%  "
              f"{row['slowest_s'] * 1e3:>15.3f}  measured ≈ hierarchical model within "
              f"{100 * tolerance:.0f}%: " + ("holds" if row["holds"] else "does NOT hold"))
    for row in rows:
        share = row["exchange_s"] / row["step_s"]
        print(f"ep {row['ep']}: the {4 * row['layers']} exchanges of the step take "
              f"{row['exchange_s'] * 1e3:.3f} of its {row['step_s'] * 1e3:.3f} A100 ms ({share:.0%})")
        if row["nodes"] > 1 and row["holds"]:
            print(f"  across {row['nodes']} nodes: NVLink and InfiniBand carry their peers' rows at "
                  f"once; pricing every byte at InfiniBand's β (slowest link) would charge "
                  f"{row['slowest_s'] / row['measured_s']:.2f}× the measured dispatch")
        if not row["holds"]:
            follows = abs(row["measured_s"] / row["slowest_s"] - 1) <= tolerance
            print(f"  diagnosis: measured {row['measured_s'] * 1e3:.3f} ms is "
                  + ("the slowest-link form's " if follows else "neither form's ")
                  + f"{row['slowest_s'] * 1e3:.3f} ms "
                  + ("(within the tolerance): the run priced every byte at the group's slowest "
                     "pair" if follows else "— neither pricing explains it"))
    return rows
