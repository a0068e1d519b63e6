"""Closed forms for chapter 13: the bytes of a composed plan, every dimension's chapter closed
form applied to the slice it sees.

Narayanan et al. (SC 2021, §3) reason about PTD-P traffic dimension by dimension: each
dimension's communication is its own chapter's formula evaluated on the part of the problem that
dimension sees after the others have cut it. For one rank at coordinates (pp, dp, cp, tp) of a
plan (`parlab.planner.plan.Plan`): tp `parlab.tensor_parallel.cost.closed_form_bytes`, cp
`parlab.context_parallel.cost.ring_bytes`, pp `parlab.pipeline.cost.p2p_messages` and
`tie_messages`, dp × cp the plan's reducer (`parlab.data_parallel.cost.dp_messages`),
compressor (`parlab.compression.cost`) or ZeRO (`parlab.zero.cost.phase_bytes`), ep the
routing counts' all-gather and the experts' own gradient sync — each a sum of its chapter's
message list (`parlab.core.messages`). Which slice each dimension sees, phase by phase:
docs/messages.md. Every number here is tested equal to the ledger of a real run
(tests/test_planner_compose.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from parlab.compression.compressed_reducers import step_bytes as compressed_bytes
from parlab.context_parallel.cost import ring_bytes
from parlab.core.cost import FP32_BYTES
from parlab.core.messages import bytes_by, total_bytes
from parlab.data_parallel.cost import REDUCER_MESSAGES, bytes_per_step, dp_messages, flat_messages
from parlab.engine.prediction import Prediction
from parlab.expert_parallel.cost import all_to_all_layer_bytes, counts_bytes
from parlab.pipeline.cost import p2p_messages, tie_messages
from parlab.pipeline.stages import even_partition
from parlab.tensor_parallel.cost import closed_form_bytes as tp_bytes
from parlab.zero.cost import phase_bytes as zero_phase_bytes

PHASES = ("tp-forward", "tp-backward", "cp-forward", "cp-backward", "pp-fwd", "pp-bwd",
          "embed-tie", "dp-grad-sync", "grad-reduce-scatter", "param-all-gather",
          "param-gather-fwd", "param-gather-bwd", "counts", "expert-grad-sync")
ROUTING_PHASES = ("dispatch", "combine", "dispatch-backward", "combine-backward")
DIMENSION = {"tp-forward": "tp", "tp-backward": "tp", "cp-forward": "cp", "cp-backward": "cp",
             "pp-fwd": "pp", "pp-bwd": "pp", "embed-tie": "pp", "dp-grad-sync": "dp",
             "grad-reduce-scatter": "dp", "param-all-gather": "dp", "param-gather-fwd": "dp",
             "param-gather-bwd": "dp", "counts": "ep", "expert-grad-sync": "ep",
             **dict.fromkeys(ROUTING_PHASES, "ep")}  # ledger phase -> the dimension that sent it


def by_dimension(table: dict[str, list[int]]) -> dict[str, list[int]]:
    """{phase: per-rank bytes} (a ledger's or `nd_closed_form_bytes`) -> {dimension: per-rank
    bytes}; dp includes ZeRO's collectives, pp the tied embedding's all-reduce."""
    out: dict[str, list[int]] = {}
    for phase, row in table.items():
        dim = DIMENSION[phase]
        out[dim] = [a + b for a, b in zip(out.get(dim, [0] * len(row)), row)]
    return out


def coordinates(plan, rank: int) -> dict[str, int]:
    """World rank -> its mesh coordinates (order pp, dp, cp, tp; tp fastest)."""
    dims = plan.mesh_dims()
    out = {}
    for name, size in reversed(dims):
        out[name] = rank % size
        rank //= size
    return out


def is_moe_block(model_config, index: int) -> bool:
    """Whether block `index` holds a mixture of experts (gpt-moe: every `moe_every`-th)."""
    every = getattr(model_config, "moe_every", None)
    return every is not None and (index + 1) % every == 0


def block_dense_expert_numels(plan, model_config, index: int) -> tuple[int, int]:
    """(dense, expert) elements of block `index` on one rank: LayerNorms, attention (÷ tp), a
    dense MLP (÷ tp) or a router (+ shared expert) and E/ep experts (held whole by the tp ranks)."""
    C = model_config.n_embd
    dense = 4 * C + 4 * C * C // plan.tp  # ln_1, ln_2; c_attn + c_proj
    if not is_moe_block(model_config, index):
        return dense + 8 * C * C // plan.tp, 0  # c_fc + c_proj
    E = model_config.n_experts
    dense += C * E + (8 * C * C if model_config.shared_expert else 0)
    return dense, E // plan.ep * 2 * C * model_config.hidden


def unit_numels(plan, model_config, pp_rank: int) -> list[int]:
    """Elements of each parameter unit this rank holds (ZeRO's units: one per local block, then
    the root): its stage's blocks, tp-sliced, and the embeddings / final norm of its stage."""
    C, V, T = model_config.n_embd, model_config.vocab_size, model_config.block_size
    counts = even_partition(model_config.n_layer, plan.pp)
    lo = sum(counts[:pp_rank])
    first, last = pp_rank == 0, pp_rank == plan.pp - 1
    root = (V * C if first or last else 0) + (T * C if first else 0) + (2 * C if last else 0)
    return [sum(block_dense_expert_numels(plan, model_config, i)) for i in range(lo, lo + counts[pp_rank])] \
        + ([root] if root else [])


def dp_param_shapes(plan, model_config, pp_rank: int) -> list[tuple[int, ...]]:
    """Shapes of the parameters a rank of stage `pp_rank` averages over dp × cp, in its model's
    parameter order (`parlab.data_parallel.apply.synced_parameters`, the reference's): the stage's
    wte, wpe, then per block ln_1 (weight, bias), c_attn, c_proj, ln_2, c_fc, c_proj (tp-sliced:
    column-parallel rows, row-parallel columns), then ln_f — what chapter 01's per-tensor and
    bucketed closed forms and chapter 08's compressors take. Dense GPT (Plan.problems refuses the
    rest)."""
    C, V, T, tp = model_config.n_embd, model_config.vocab_size, model_config.block_size, plan.tp
    counts = even_partition(model_config.n_layer, plan.pp)
    first, last = pp_rank == 0, pp_rank == plan.pp - 1
    embeddings = ([(V, C)] if first or last else []) + ([(T, C)] if first else [])
    block = [(C,), (C,), (3 * C // tp, C), (C, C // tp), (C,), (C,), (4 * C // tp, C),
             (C, 4 * C // tp)]
    return embeddings + block * counts[pp_rank] + ([(C,), (C,)] if last else [])


def dp_param_numels(plan, model_config, pp_rank: int) -> list[int]:
    """Elements of each parameter of `dp_param_shapes`, in the same order."""
    return [math.prod(shape) for shape in dp_param_shapes(plan, model_config, pp_rank)]


def rank_bytes(plan, cfg, rank: int, steps: int) -> dict[str, int]:
    """Bytes world rank `rank` sends in `steps` steps, by ledger phase (see the module doc)."""
    mc, m = cfg.model_config, plan.microbatches
    c = coordinates(plan, rank)
    rows = cfg.batch_size // plan.dp // m  # rows of one micro-batch
    T_local = mc.block_size // plan.cp
    layers = even_partition(mc.n_layer, plan.pp)[c["pp"]]
    out = dict.fromkeys(PHASES, 0)
    # tp: Megatron's f and g on the stage's blocks, T/cp tokens of each micro-batch
    stage_cfg = dataclasses.replace(mc, n_layer=layers, block_size=T_local)
    tp = tp_bytes(stage_cfg, rows, plan.tp, c["tp"], steps * m, sequence_parallel=False,
                  checkpoint=plan.checkpoint)
    lo = sum(even_partition(mc.n_layer, plan.pp)[:c["pp"]])
    moe_local = sum(is_moe_block(mc, i) for i in range(lo, lo + layers))
    # an MoE block splits only its attention: one f and one g, half a dense block's
    moe = tp_bytes(dataclasses.replace(stage_cfg, n_layer=moe_local), rows, plan.tp, c["tp"],
                   steps * m, sequence_parallel=False) if moe_local else dict.fromkeys(tp, 0)
    for phase in ("tp-forward", "tp-backward"):
        out[phase] = tp[phase] - moe[phase] // 2
    # cp: ring attention on this rank's heads
    if plan.cp > 1:
        ring = ring_bytes(rows, mc.n_head // plan.tp, mc.block_size, mc.head_dim, plan.cp, layers)
        out["cp-forward"] = steps * m * ring["cp-forward"] * (2 if plan.checkpoint else 1)
        out["cp-backward"] = steps * m * ring["cp-backward"]
    # pp: boundary activations forward, gradients back, the tied embedding's all-reduce
    if plan.pp > 1:
        boundary = rows * T_local * mc.n_embd  # (B/(dp·m), T/cp, C)
        for phase, sent in bytes_by(p2p_messages(plan.pp, 1, c["pp"], boundary), "phase",
                                    m).items():
            out[phase] = steps * sent
        out["embed-tie"] = steps * total_bytes(tie_messages(mc.vocab_size, mc.n_embd, plan.pp,
                                                            c["pp"]), rank=int(c["pp"] > 0))
    # dp × cp: the gradients of one slice averaged, or ZeRO's collectives
    n = plan.dp * plan.cp
    if n > 1:
        data_rank = c["dp"] * plan.cp + c["cp"]
        units = unit_numels(plan, mc, c["pp"])
        if plan.zero == 0 and plan.dp_compressor != "none":  # chapter 08's compressor's form
            shapes = dp_param_shapes(plan, mc, c["pp"])
            out["dp-grad-sync"] = sum(sum(compressed_bytes(
                plan.dp_compressor, shapes, n, data_rank, step, steps,
                plan.compressor_options()).values()) for step in range(steps))
        elif plan.zero == 0 and plan.dp_sync != "flat":  # chapter 01's per-tensor / bucket form
            sent = bytes_per_step(REDUCER_MESSAGES[plan.dp_sync],
                                  dp_param_numels(plan, mc, c["pp"]), n, data_rank,
                                  **plan.reducer_options())
            out["dp-grad-sync"] = steps * sum(sent.values())
        elif plan.zero == 0:
            experts = sum(block_dense_expert_numels(plan, mc, i)[1] for i in range(lo, lo + layers)) \
                if plan.ep > 1 else 0  # the stage's sharded experts sync apart
            dense = dp_messages(flat_messages, [sum(units) - experts], n)
            out["dp-grad-sync"] = steps * total_bytes(dense, rank=data_rank)
            replicas = plan.dp * plan.cp // plan.ep  # the same experts: d mod ep, any cp shard
            if experts and replicas > 1:  # summed over them (world-rank order: dp, then cp)
                sync = dp_messages(flat_messages, [experts], replicas, phase="expert-grad-sync")
                out["expert-grad-sync"] = steps * total_bytes(
                    sync, rank=c["dp"] // plan.ep * plan.cp + c["cp"])
        else:  # ZeRO's reduce-scatter and all-gathers of the padded flat units
            for phase, sent in zero_phase_bytes(plan.zero, units, n, FP32_BYTES).items():
                out[phase] = steps * sent
    # gpt-moe: every MoE layer of the stage all-gathers the dp ranks' (k, E) routing counts
    # (int64) in each micro-batch's forward
    if moe_local and plan.dp > 1:
        out["counts"] = steps * m * moe_local * counts_bytes(plan.dp, c["dp"], mc.top_k,
                                                             mc.n_experts)
    return out


def nd_routing_bytes(plan, cfg, outputs) -> dict[str, list[int]]:
    """gpt-moe with ep > 1: what the all-to-alls sent, per rank and phase, from the routing each
    rank logged (extras "routing": per MoE layer, per step, the kept (dp, E) counts) —
    `parlab.expert_parallel.cost.all_to_all_layer_bytes`, which depends on the routing."""
    table = {phase: [0] * plan.world_size for phase in ROUTING_PHASES}
    for rank, out in enumerate(outputs):
        c = coordinates(plan, rank)
        if plan.ep == 1 or plan.dp == 1:
            continue
        first = c["dp"] // plan.ep * plan.ep
        group = list(range(first, first + plan.ep))  # ep peers' rows in the dp-ordered counts
        for layer in out.extras["routing"]:
            for log in layer:
                sent = all_to_all_layer_bytes(log["kept"], c["dp"], group, cfg.model_config.n_embd,
                                              cfg.model_config.top_k)
                for phase in ROUTING_PHASES:
                    table[phase][rank] += sent[phase]
    return {phase: row for phase, row in table.items() if any(row)}


def nd_closed_form_bytes(plan, cfg, steps: int | None = None) -> dict[str, list[int]]:
    """{phase: [bytes world rank r sends, for r in 0..world-1]} over `steps` steps (default
    cfg.steps; pass steps=1 for one step). cfg: a RunConfig or anything with model_config,
    batch_size and steps. Phases with no traffic on any rank are left out."""
    steps = cfg.steps if steps is None else steps
    per_rank = [rank_bytes(plan, cfg, r, steps) for r in range(plan.world_size)]
    return {phase: [row[phase] for row in per_rank] for phase in PHASES
            if any(row[phase] for row in per_rank)}


def nd_prediction(cfg) -> Prediction:
    """The scheme `nd`'s bytes per rank over the run (a `cost=` for the registry)."""
    from parlab.planner.plan import Plan

    plan = Plan(**{f.name: cfg.options[f.name] for f in dataclasses.fields(Plan)
                   if f.name != "checkpoint"}, checkpoint=cfg.checkpoint)
    table = nd_closed_form_bytes(plan, cfg)
    totals = [sum(col) for col in itertools.zip_longest(*table.values(), fillvalue=0)]
    return Prediction(totals or [0] * plan.world_size,
                      "parlab.planner.cost.nd_closed_form_bytes: each chapter's closed "
                      "form on the slice its dimension sees")
