"""Chapter 03, section 10: tensor parallelism stops paying past the NVLink domain, measured.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC 2021, §3.2 and takeaway #1): keep the tensor-parallel degree ≤ the GPUs of one
server, because TP's all-reduces of the (B, T, C) activations — 4 per block and step, Shoeybi et
al. 2019, §3 — run on every layer and past the server they cross InfiniBand instead of NVLink.

Here each degree is a real run: Megatron-LM's 7.5B GPT (Narayanan et al., Table 1; its 32 heads
divide 16 ways — Llama 3 8B's 8 key/value heads do not, `parlab.tensor_parallel.gqa`) run
shapes-only (`parlab.core.shapes`) on the paced A100 clock, one block (`n_layer=1`) and the
vocabulary-parallel head (`vocab_parallel=True`) so that every matmul is cut tp ways. Up to 8
ranks: one DGX A100 (NVLink 3 between all pairs); 16 ranks: two nodes of 8 joined by HDR
InfiniBand (`parlab.core.topology.nodes`). Beside each measured step: the α-β estimate — matmul
FLOPs 6·B·T·(12C² + V·C)/tp at the A100's sustained rate (`cost.block_times` for the block, the
head alike) plus 4 + 2 ring all-reduces of B·T·C fp32 (the block's and the vocabulary head's),
priced on the slowest link the ring crosses.
"""

from __future__ import annotations

PRESET = "megatron-7.5b"
DEGREES = (1, 8, 16)  # alone, one full node, two nodes
PER_NODE = 8  # a DGX A100: NVLink inside, HDR InfiniBand between (Narayanan et al. §5.1)
ACCELERATOR = "A100"
INTRA, INTER = "NVLink", "HDR-IB"


def cluster(tp: int):
    """The link of a tp group of `tp` A100s: none alone, NVLink inside one node, nodes beyond."""
    from parlab.core.topology import nodes

    if tp == 1:
        return None
    return INTRA if tp <= PER_NODE else nodes(tp, PER_NODE, INTRA, INTER)


def slowest_link(tp: int):
    """The real link (`parlab.core.link.real`) a ring over `tp` ranks waits on: NVLink inside one
    node, HDR InfiniBand once the ring leaves it (each ring step is as slow as its slowest hop)."""
    from parlab.core.link import real

    return real(INTRA if tp <= PER_NODE else INTER, ACCELERATOR)


def estimate_ms(tp: int, batch_rows: int, seq_len: int, n_embd: int, vocab: int) -> dict:
    """Closed-form ms of one step of one block and the vocabulary-parallel head at degree tp:
    `cost.block_times` (compute ÷ tp + 4 all-reduces) plus the head's 6·B·T·V·C/tp FLOPs and its
    2 all-reduces of B·T·C (embedding forward, head backward)."""
    from parlab.core import cost
    from parlab.core.link import ACCELERATORS
    from parlab.tensor_parallel.cost import FP32, block_times

    link, flops = slowest_link(tp), ACCELERATORS[ACCELERATOR].flops
    t = block_times(batch_rows, seq_len, n_embd, tp, flops, link.latency_s, link.bandwidth_Bps)
    head_s = 6 * batch_rows * seq_len * vocab * n_embd / tp / flops
    head_comm = 2 * cost.all_reduce_time(batch_rows * seq_len * n_embd * FP32, tp,
                                         link.latency_s, link.bandwidth_Bps) if tp > 1 else 0.0
    compute, comm = t["compute_s"] + head_s, t["comm_s"] + head_comm
    return {"compute_ms": compute * 1e3, "comm_ms": comm * 1e3, "estimate_ms": (compute + comm) * 1e3}


def domain_rows(preset: str = PRESET, degrees=DEGREES, batch_rows: int = 1,
                n_layer: int = 1) -> list[dict]:
    """One paced shapes-only run of `tp` per degree: the measured step (A100 ms, one block)
    beside `estimate_ms`, and the speed-up over tp = 1 measured."""
    import parlab
    from parlab.models.presets import PRESETS

    shape = PRESETS[preset]
    rows = []
    for tp in degrees:
        scheme, options = ("single", {}) if tp == 1 else ("tp", {"tp": tp, "vocab_parallel": True})
        r = parlab.run(scheme, world_size=tp, steps=1, batch_size=batch_rows, model=preset,
                       shapes_only=True, clock=ACCELERATOR, link=cluster(tp),
                       model_config={"n_layer": n_layer}, timeout=900.0, **options)
        est = estimate_ms(tp, batch_rows, shape["block_size"], shape["n_embd"], shape["vocab_size"])
        rows.append({"tp": tp, "nodes": -(-tp // PER_NODE),
                     "ring_on": "-" if tp == 1 else slowest_link(tp).name,
                     "measured_ms": r.step_times[-1] * 1e3, **est, "clock": r.clock.label})
    base = rows[0]["measured_ms"]
    for row in rows:
        row["speedup"] = base / row["measured_ms"]
    return rows


def verdict(rows: list[dict], tolerance: float = 0.05) -> dict:
    """Does TP stop paying past one node? Computed from the rows: the fastest measured degree,
    and whether the first degree past PER_NODE is slower than the degree at PER_NODE by more
    than `tolerance` (and the estimate agrees in direction)."""
    by_tp = {row["tp"]: row for row in rows}
    best = min(rows, key=lambda row: row["measured_ms"])
    inside = by_tp.get(PER_NODE)
    past = min((row for row in rows if row["tp"] > PER_NODE), key=lambda row: row["tp"],
               default=None)
    out = {"best_tp": best["tp"], "holds": None}
    if inside and past:
        ratio = past["measured_ms"] / inside["measured_ms"]
        est_ratio = past["estimate_ms"] / inside["estimate_ms"]
        out.update(ratio=ratio, estimate_ratio=est_ratio,
                   holds=ratio > 1 + tolerance and est_ratio > 1 and best["tp"] <= PER_NODE)
    return out


def show(rows: list[dict], tolerance: float = 0.05) -> dict:
    """Print the table and the computed verdict "TP ≤ the NVLink domain"."""
    print(f"{PRESET} (Narayanan et al. Table 1's shapes), one block + the vocabulary-parallel head, "
          f"B=1, shapes-only, "
          f"{rows[0]['clock']}; NVLink 3 inside a node of {PER_NODE}, HDR InfiniBand between nodes")
    print(f"{'tp':>3} {'nodes':>5} {'ring waits on':<22} {'measured ms':>11} {'estimate ms':>11} "
          f"{'(compute':>9} {'+ comm)':>8} {'speed-up':>8}")
    for row in rows:
        print(f"{row['tp']:>3} {row['nodes']:>5} {row['ring_on']:<22} {row['measured_ms']:>11.3f} "
              f"{row['estimate_ms']:>11.3f} {row['compute_ms']:>9.3f} {row['comm_ms']:>8.3f} "
              f"{row['speedup']:>7.2f}×")
    v = verdict(rows, tolerance)
    if v["holds"] is None:
        print(f"fastest degree measured: tp={v['best_tp']} (no degree past one node was run)")
    else:
        print(f"tp={2 * PER_NODE} across 2 nodes took {v['ratio']:.2f}× tp={PER_NODE}'s step in one "
              f"node (estimate {v['estimate_ratio']:.2f}×); fastest measured: tp={v['best_tp']} — "
              + ("TP ≤ the NVLink domain: HOLDS" if v["holds"] else
                 "TP ≤ the NVLink domain: does NOT hold here")
              + f" (past the node slower by > {tolerance:.0%}, estimate agrees in direction)")
    return v
