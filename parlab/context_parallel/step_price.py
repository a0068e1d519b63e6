"""A context-parallel training step priced beside its paced run: counted compute plus the closed
form's messages, every one of them blocking (the serial α-β model).

Messages per rank and step, from the chapter's closed forms (`parlab.context_parallel.cost`):
ring attention (Liu, Zaharia & Abbeel, ICLR 2024, §3: K/V round the ring, `ring_messages`),
Ulysses (Jacobs et al. 2023, §3.1: 4 all-to-alls per layer and direction, `ulysses_messages`),
Llama 3's all-gather of K/V and reduce-scatter of dK/dV (Dubey et al. 2024, §3.3.2,
`allgather_messages`) and USP, Ulysses inside × ring across (Fang & Zhao 2024, arXiv 2405.07719,
`usp_messages`), plus one sum all-reduce per parameter over the dp × cp ranks (the gradients).
Each costs k·α + bytes/β on the run's link (Hockney 1994; `parlab.core.messages.message_time`).

The compute is what the paced clock counted in each rank's forward and backward spans (its
operator meter: deterministic), less the waits inside them (`counted_compute`).
model = max over ranks of compute + Σ messages. A scheme whose every message blocks (Ulysses, the
all-gather) should measure the model; the ring posts its next K/V before it computes on the
current block, so the run may come in under the model by at most the ring's own link time.
"""

from __future__ import annotations

import statistics

from parlab.context_parallel import cost
from parlab.core.messages import Message, message_time


def allgather_messages(batch: int, n_head: int, seq_len: int, head_dim: int, cp: int,
                       n_layer: int, itemsize: int = 4) -> list:
    """Llama 3's collectives per rank and step (Dubey et al. 2024, §3.3.2): per layer one
    all-gather of the stacked K/V, a full (2, B, nh, T, hs) tensor, forward, and one
    reduce-scatter of dK/dV, the same size, backward (`cost.allgather_bytes` summed)."""
    if cp == 1:
        return []
    full = 2 * batch * n_head * seq_len * head_dim  # (2, B, nh, T, hs) gathered
    return [Message("cp", "all_gather", cp, full, n_layer, False, itemsize, "cp-forward"),
            Message("cp", "reduce_scatter", cp, full, n_layer, False, itemsize, "cp-backward")]


def attention_messages(method: str, recompute: bool, batch: int, n_head: int, seq_len: int,
                       head_dim: int, cp: int, n_layer: int, itemsize: int = 4,
                       ulysses: int = 1) -> list:
    """The attention messages of one cp rank per step for the strategy's `method` ("ring",
    "ulysses", "allgather", "usp" with Ulysses degree `ulysses`); `batch`: the rows this rank's
    dp group trains, B/dp."""
    args = (batch, n_head, seq_len, head_dim)
    if method == "ring":
        return cost.ring_messages(*args, cp, n_layer, itemsize, "ring" if recompute else "none")
    if method == "ulysses":
        return cost.ulysses_messages(*args, cp, n_layer, itemsize)
    if method == "allgather":
        return allgather_messages(*args, cp, n_layer, itemsize)
    if method == "usp":
        return cost.usp_messages(*args, ulysses, cp // ulysses, n_layer, itemsize)
    raise ValueError(f"method={method!r} must be ring, ulysses, allgather or usp")


def grad_messages(numels: list[int], world_size: int) -> list:
    """One sum all-reduce per parameter over all dp × cp ranks, fp32 (the scheme's `sync`)."""
    return [Message("dp", "all_reduce", world_size, n, 1, False, 4, "grad-sync") for n in numels]


def parameter_numels(model_config) -> list[int]:
    """Elements of each parameter of the GPT under `model_config` (built on the meta device)."""
    from dataclasses import asdict

    import torch

    from parlab import models

    with torch.device("meta"):
        net = models.build_model("gpt", models.model_config("gpt", asdict(model_config)), 0)
    return [p.numel() for p in net.parameters()]


def counted_compute(result, rank: int, step: int) -> float:
    """Seconds rank `rank` computed in step `step`: its compute spans (forward, backward,
    optimizer) less the time it waited inside them."""
    mine = [e for e in result.timeline if e["rank"] == rank]
    spans = [e for e in mine if e["kind"] == "compute" and e["args"].get("step") == step]
    waits = [e for e in mine if e["kind"] == "wait"]
    inside = sum(max(0.0, min(w["t1"], s["t1"]) - max(w["t0"], s["t0"]))
                 for s in spans for w in waits)
    return sum(s["t1"] - s["t0"] for s in spans) - inside


def price(result) -> dict:
    """The serial α-β model of `result` (a cp-* run on a paced clock and a link) beside what it
    measured, per step after the first (medians): "paced_s" (the run's step), "compute_s" (the
    slowest rank's counted compute), "comm_s" (one rank's closed-form messages on the link),
    "model_s" (their sum), "ledger_comm_s" (the ledger's sends priced the same way: must equal
    comm_s; a send and its receive share the full-duplex link), "ring_comm_s" (the part sent
    round a ring, the only part that can hide) and "attn_bytes" / "closed_attn_bytes" (rank 0's
    attention bytes per step, ledger and closed form)."""
    cfg, link = result.config, result.config.link
    extras = result.outputs[0].extras  # the strategy's: "degrees" {"dp", "cp", ...}, "method"
    dims = extras["degrees"]
    g, n, steps = cfg.model_config, cfg.world_size, len(result.step_times)
    itemsize = 2 if cfg.precision == "bf16-mixed" else 4
    attn = attention_messages(extras["method"], extras["recompute"], cfg.batch_size // dims["dp"],
                              g.n_head, g.block_size, g.n_embd // g.n_head, dims["cp"],
                              g.n_layer, itemsize, dims.get("ulysses", 1))
    msgs = attn + grad_messages(parameter_numels(g), n)
    comm = sum(message_time(x, None, link) * x.count for x in msgs)
    ring = sum(message_time(x, None, link) * x.count for x in attn if x.op == "p2p")
    later = range(1, steps) if steps > 1 else range(steps)
    compute = statistics.median(max(counted_compute(result, k, s) for k in range(n))
                                for s in later)
    ledger = statistics.median(sum(link.cost(max(x["bytes_sent"], x["bytes_recv"]), x["rounds"])
                                   for x in result.ledger if x["rank"] == 0 and x["step"] == s
                                   and x["op"] != "recv") for s in later)
    measured = sum(x["bytes_sent"] for x in result.ledger if x["rank"] == 0
                   and str(x["phase"]).startswith("cp-")) / steps
    return {"paced_s": result.step_time(warmup=1), "compute_s": compute, "comm_s": comm,
            "model_s": compute + comm, "ledger_comm_s": ledger, "ring_comm_s": ring,
            "attn_bytes": measured, "closed_attn_bytes": sum(x.total() for x in attn)}
