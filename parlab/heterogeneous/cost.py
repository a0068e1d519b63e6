"""Chapter 11's closed forms: bytes each rank sends, and the step time of a sharding on unequal devices.

Bytes. `hetero-dp` all-reduces the flat gradient (Ψ fp32 elements) once per step with gloo's ring:
2(N−1)/N·Ψ elements out of every rank, whatever the shares (`parlab.core.cost.ring_all_reduce`);
uneven shares change the time, never the bytes. `backup-workers` (Chen et al., "Revisiting
Distributed Synchronous SGD", 2016) adds one all-gather of N arrival times (fp64) per step.

Time (seconds; `parlab.heterogeneous.shares` has the model): rank r at speed s_r with b_r rows
computes (f + b_r)·t/s_r, then the all-reduce takes c on the run's link (the group's slowest link
for a topology), so a step lasts max_r (f + b_r)·t/s_r + c. t = 6·Ψ·T / F: forward 2Ψ and backward
4Ψ FLOPs per token (Kaplan et al., "Scaling Laws for Neural Language Models", 2020) at F = 9 GFLOP/s,
the rate docs/measurements.md measured for the default GPT on one thread.

`hetero-tp` (uneven tensor + sequence parallelism, `parlab.heterogeneous.tp_layers`). Per block
and step: 2 all-gathers and 2 reduce-scatters of the (B, T, C) activations along the sequence in
forward, 2 reduce-scatters and 2 all-gathers in backward, each cut into the ranks' positions t_r
(S_r = B·t_r·C elements of S = B·T·C): `uneven_bytes` gives each rank's bytes, padded ((N−1)·M,
M = max_r S_r) or exact (all-gather S − S_{r+1}, reduce-scatter S − S_r; Zhang et al., "HAP",
EuroSys 2024, §5); plus one ring all-reduce of the replicated parameters' gradients (embeddings,
LayerNorms: they saw only the rank's tokens). Its step: max_r (f + w_r)·W/s_r + the collectives'
time on the link, a ring collective as slow as its largest sender (`tp_step_time`).
"""

from __future__ import annotations

from parlab.core import cost as core_cost
from parlab.core.link import Link
from parlab.core.topology import Topology
from parlab.engine.prediction import Prediction, param_numels
from parlab.heterogeneous import shares as shares_mod
from parlab.heterogeneous import tp_shares
from parlab.heterogeneous.programs import WIDTHS, D, edges, feature_dimension, partial_gradients, step_kind
from parlab.tensor_parallel.cost import replicated_numels

# F of the wall-clock model: forward + backward of the default GPT as docs/measurements.md recorded
# it, a fixed model constant (the LP's shares must not move with the load); this run's own rate is
# printed beside it (`parlab.core.link.cpu_flops_line`), the diagnosis says what the run achieved
CPU_FLOPS = 9e9
TIME_BYTES = 8  # an arrival time travels as one float64


def speeds_of(cfg) -> list[float]:
    return list(cfg.speeds) if cfg.speeds is not None else [1.0] * cfg.world_size


def row_seconds(cfg) -> float:
    """t: one row's forward + backward at speed 1, 6·Ψ·T / F (T = 1 for the MLP)."""
    tokens = getattr(cfg.model_config, "block_size", 1)
    return 6 * sum(param_numels(cfg)) * tokens / CPU_FLOPS


def all_reduce_link(cfg) -> Link | None:
    """The link the all-reduce of the world group runs at: the run's Link, or a topology's slowest."""
    if isinstance(cfg.link, Topology):
        return cfg.link.link_for(range(cfg.world_size))
    return cfg.link


def comm_seconds(cfg) -> float:
    """c: the ring all-reduce of Ψ fp32 on the run's link, k·α + bytes/β (0 on the bare loopback)."""
    link = all_reduce_link(cfg)
    if link is None or cfg.world_size == 1:
        return 0.0
    sent, _, rounds = core_cost.ring_all_reduce(sum(param_numels(cfg)), cfg.world_size, 0)
    return link.cost(sent * core_cost.FP32_BYTES, rounds)


def rows_of(cfg) -> list[int]:
    """The rows per rank `hetero-dp` takes under this configuration's `shard` option."""
    o = cfg.options
    return shares_mod.shares(o.get("shard", "even"), cfg.batch_size, speeds_of(cfg),
                             o.get("fixed_rows", 0.0), comm_seconds(cfg) / row_seconds(cfg))


def step_time(rows: list[int], speeds, fixed_rows: float, row_s: float, comm_s: float = 0.0) -> float:
    """Predicted seconds per step: max_r (f + b_r)·t/s_r + c."""
    return max(shares_mod.rank_time(b, s, fixed_rows) for b, s in zip(rows, speeds)) * row_s + comm_s


def ideal_step_time(cfg) -> float:
    """T* of HAP's LP in seconds: no sharding of whole rows is faster under the model."""
    _, t_rows = shares_mod.solve_lp(cfg.batch_size, speeds_of(cfg), cfg.options.get("fixed_rows", 0.0))
    return t_rows * row_seconds(cfg) + comm_seconds(cfg)


def grad_sync_bytes(numel: int, world_size: int, rank: int) -> int:
    """Bytes rank `rank` sends in one ring all-reduce of `numel` fp32 elements."""
    return core_cost.ring_all_reduce(numel, world_size, rank)[0] * core_cost.FP32_BYTES


def arrival_bytes(world_size: int, rank: int) -> int:
    """Bytes rank `rank` sends in the all-gather of N arrival times (one fp64 each)."""
    return core_cost.ring_all_gather(world_size, world_size, rank)[0] * TIME_BYTES


def hetero_dp_prediction(cfg) -> Prediction:
    psi, n = sum(param_numels(cfg)), cfg.world_size
    return Prediction([cfg.steps * grad_sync_bytes(psi, n, r) for r in range(n)],
                      "steps × ring all-reduce of Ψ fp32: 2(N−1)/N·Ψ·4 bytes, whatever the shares")


def backup_prediction(cfg) -> Prediction:
    psi, n = sum(param_numels(cfg)), cfg.world_size
    return Prediction([cfg.steps * (grad_sync_bytes(psi, n, r) + arrival_bytes(n, r)) for r in range(n)],
                      "steps × (ring all-reduce of Ψ fp32 + all-gather of N fp64 arrival times)")


# ----------------------------------------------------------------------------- hetero-tp
def uneven_bytes(op: str, variant: str, sizes: list[int], inner: int, rank: int) -> int:
    """Bytes rank `rank` sends in one ring all-gather / reduce-scatter of chunks of `sizes` rows of
    `inner` fp32 elements: padded (N−1)·M·inner, exact S − S_{r+1} (all-gather) or S − S_r
    (reduce-scatter) rows. One rank: nothing."""
    n = len(sizes)
    if n == 1:
        return 0
    if variant == "padded":
        rows = (n - 1) * max(sizes)
    elif op == "all_gather":
        rows = sum(sizes) - sizes[(rank + 1) % n]
    else:
        rows = sum(sizes) - sizes[rank]
    return rows * inner * core_cost.FP32_BYTES


def tp_ratios(cfg) -> list[float]:
    """w: each rank's sharding ratio under the configuration's `shard`, `fixed`, `collective`."""
    o = cfg.options
    return tp_shares.ratios(o.get("shard", "lp"), speeds_of(cfg), o.get("fixed", 0.0),
                            tp_kappa(cfg), o.get("collective", "exact"))


def tp_split(cfg) -> dict[str, list[int]]:
    """Heads, MLP columns and sequence positions per rank under the configuration's options."""
    return tp_shares.split(cfg.model_config, tp_ratios(cfg))


def tp_bytes(cfg, split: dict | None = None) -> list[dict[str, int]]:
    """Bytes each rank sends over the run, by ledger phase (tp-forward, tp-backward, sp-grad-sync)."""
    split = split or tp_split(cfg)
    m, n, variant = cfg.model_config, cfg.world_size, cfg.options.get("collective", "exact")
    inner = cfg.batch_size * m.n_embd  # a position's elements: B·C
    per = cfg.steps * m.n_layer * 2  # attention and MLP: one all-gather and one reduce-scatter each
    out = []
    for r in range(n):
        ag = uneven_bytes("all_gather", variant, split["tokens"], inner, r)
        rs = uneven_bytes("reduce_scatter", variant, split["tokens"], inner, r)
        sync = core_cost.ring_all_reduce(sum(replicated_numels(m)), n, r)[0] if n > 1 else 0
        out.append({"tp-forward": per * (ag + rs), "tp-backward": per * (ag + rs),
                    "sp-grad-sync": cfg.steps * sync * core_cost.FP32_BYTES})
    return out


def hetero_tp_prediction(cfg) -> Prediction:
    return Prediction([sum(b.values()) for b in tp_bytes(cfg)],
                      "steps × (4·n_layer uneven all-gathers / reduce-scatters of B·t_r·C fp32, "
                      "padded (N−1)·M or exact S − S_{r±1}, + ring all-reduce of the replicated "
                      "gradients)")


def tp_work_seconds(cfg) -> float:
    """W: the whole step's forward + backward at speed 1, 6·Ψ·B·T / F (Kaplan et al. 2020), F the
    paced clock's sustained FLOP/s (`parlab.core.link.ACCELERATORS`), on the wall clock CPU_FLOPS."""
    work = cfg.batch_size * row_seconds(cfg)
    return work * CPU_FLOPS / cfg.clock.accelerator.flops if cfg.clock.paced else work


def tp_comm_seconds(cfg, split: dict | None = None) -> float:
    """The step's collectives on the run's link, each ring as slow as its largest sender:
    4·n_layer × (k·α + max_r all-gather bytes/β) + the same for the reduce-scatters, + the
    replicated gradients' all-reduce; 0 without a link."""
    link, n = all_reduce_link(cfg), cfg.world_size
    if link is None or n == 1:
        return 0.0
    split = split or tp_split(cfg)
    m, variant = cfg.model_config, cfg.options.get("collective", "exact")
    inner = cfg.batch_size * m.n_embd
    ag, rs = (max(uneven_bytes(op, variant, split["tokens"], inner, r) for r in range(n))
              for op in ("all_gather", "reduce_scatter"))
    sync = max(core_cost.ring_all_reduce(sum(replicated_numels(m)), n, r)[0] for r in range(n))
    return (4 * m.n_layer * (link.cost(ag, n - 1) + link.cost(rs, n - 1))
            + link.cost(sync * core_cost.FP32_BYTES, 2 * (n - 1)))


def tp_kappa(cfg) -> float:
    """κ of `parlab.heterogeneous.tp_shares`: the collectives' β-seconds per step for whole (B, T, C)
    messages, over W (0 without a link)."""
    link = all_reduce_link(cfg)
    if link is None or cfg.world_size == 1:
        return 0.0
    m = cfg.model_config
    whole = cfg.batch_size * m.block_size * m.n_embd * core_cost.FP32_BYTES
    return 8 * m.n_layer * link.cost(whole, 0) / tp_work_seconds(cfg)


def tp_step_time(cfg, split: dict, fixed: float) -> float:
    """Predicted seconds per step of `hetero-tp` for `split`: max_r (f + w_r)·W/s_r + comm, w_r the
    rank's share of the heads, columns and positions weighted by the work each carries."""
    W = tp_work_seconds(cfg)
    return max((fixed + w) * W / s for w, s in zip(work_shares(cfg.model_config, split),
                                                     speeds_of(cfg))) + tp_comm_seconds(cfg, split)


def work_shares(m, split: dict) -> list[float]:
    """Each rank's fraction of the step's flops: per token and block 4C² (q, k, v, output: heads),
    8C² (MLP: columns), 2·T·C (scores and their product with v: heads); per token V·C for the
    tied head (positions)."""
    C, T = m.n_embd, m.block_size
    parts = [(m.n_layer * (4 * C * C + 2 * T * C), split["heads"]),
             (m.n_layer * 8 * C * C, split["columns"]), (m.vocab_size * C, split["tokens"])]
    total = sum(weight for weight, _ in parts)
    n = len(split["heads"])
    return [sum(weight * sizes[r] / sum(sizes) for weight, sizes in parts) / total for r in range(n)]


# ----------------------------------------------------------------------------- hetero-hap
def hap_units(layout: str, width: int, m, batch: int) -> tuple[str, int]:
    """(split, elements per unit) of a (B, T, width·C) tensor split along `layout`: batch rows
    (D: T·width·C each), whole heads (F of a C- or 3C-wide tensor: B·T·hs, ×3 for q, k, v) or
    hidden columns (F of the 4C hidden: B·T each)."""
    if layout == D:
        return "rows", m.block_size * width * m.n_embd
    if feature_dimension(width) == "heads":
        return "heads", batch * m.block_size * m.head_dim * width
    return "columns", batch * m.block_size


def hap_step_bytes(kind: str, layout: str | None, width: int, m, batch: int, split: dict, n: int,
                   rank: int) -> int:
    """Bytes `rank` sends in one resharding step (`parlab.heterogeneous.programs.resharding`) of a
    (B, T, width·C) fp32 tensor: an exact-size ring all-gather / reduce-scatter of the chunks of
    `hap_units` (S − S_{r+1} / S − S_r units), a ring all-reduce of all of it, or a slice (none)."""
    if n == 1 or kind == "slice":
        return 0
    if kind == "all_reduce":
        return core_cost.ring_all_reduce(batch * m.block_size * width * m.n_embd, n, rank)[0] \
            * core_cost.FP32_BYTES
    dim, inner = hap_units(layout, width, m, batch)
    return uneven_bytes(kind, "exact", split[dim], inner, rank)


def hap_sync_numel(m, program) -> int:
    """Elements of the one flat all-reduce after backward: the stream's parameters (embeddings,
    LayerNorms) if the stream is data-parallel, and the data-parallel linears' weights."""
    stream, linears = partial_gradients(program)
    C = m.n_embd
    numel = (m.vocab_size * C + m.block_size * C + (4 * m.n_layer + 2) * C) if stream else 0
    return numel + m.n_layer * sum(WIDTHS[op][0] * WIDTHS[op][1] * C * C for op in linears)


def hap_bytes(cfg, program, split: dict) -> list[dict[str, int]]:
    """Bytes each rank sends over the run under `program` and `split`, by ledger phase: every
    block's reshardings forward (hap-forward) and backward (hap-backward), and the flat all-reduce
    of the partial gradients (hap-grad-sync)."""
    m, n = cfg.model_config, cfg.world_size
    out = []
    for r in range(n):
        per = {"hap-forward": 0, "hap-backward": 0}
        for e in edges(program):
            for phase, steps in (("hap-forward", e.forward), ("hap-backward", e.backward)):
                per[phase] += sum(hap_step_bytes(*step_kind(step), e.width, m, cfg.batch_size, split,
                                                 n, r) for step in steps)
        sync = hap_sync_numel(m, program)
        out.append({phase: cfg.steps * m.n_layer * b for phase, b in per.items()}
                   | {"hap-grad-sync": cfg.steps * core_cost.ring_all_reduce(sync, n, r)[0]
                      * core_cost.FP32_BYTES if n > 1 and sync else 0})
    return out
