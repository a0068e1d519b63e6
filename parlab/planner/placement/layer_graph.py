"""Real transformer layers as an operator graph, priced at a real accelerator: what She et al.'s
planner places when it meets DualPipe.

She et al. (2025, arXiv 2503.09357, §3) plan a graph of operators with compute costs, tensor
sizes and memory. Here each layer of a preset (e.g. gpt2-xl) is two ops, attention and MLP,
chained, the backward split into B and W as zero bubble and DualPipe split it (Qi et al., ICLR
2024). Per op (`op_costs`): FLOPs from `parlab.planner.profile.block_flops` (Kaplan et al. 2020:
B + W = 2 × forward), weights at 16 bytes a parameter (`parlab.zero.cost.mixed_precision_formula`),
activations held F→W after Korthikanti et al. (MLSys 2023, §4.1), seconds by
`parlab.core.clock.Clock.seconds` on the accelerator, messages over its NVLink. Simplification:
every kernel compute-bound. Each formula: docs/planner.md, `parlab.planner.placement.layer_graph`.
"""

from __future__ import annotations

from parlab.core.clock import real_link
from parlab.core.clock import resolve as resolve_clock
from parlab.models.presets import PRESETS
from parlab.planner.placement.op_costs import Memory, OpGraph, memory_of, op_graph
from parlab.planner.profile import block_flops
from parlab.zero.cost import mixed_precision_formula

BF16 = 2  # bytes per activation element
# kernels per task: F, B, W (attention: LN, QKV, QKᵀ, softmax, ·V, out, add; its B one more for
# the attention core's four products, its W the two weight matrices and LN's γ; MLP: LN, up,
# GELU, down, add; B: down, GELU, up, LN; W: down, up, γ)
KERNELS = {"attn": (7, 8, 3), "mlp": (5, 4, 3)}


def _shape(preset: str) -> dict:
    if preset not in PRESETS or "mlp" in PRESETS[preset]:
        names = sorted(k for k, v in PRESETS.items() if "mlp" not in v)
        raise ValueError(f"preset={preset!r} must be one of {names} (GPT-2 style layers)")
    return PRESETS[preset]


def op_costs(preset: str = "gpt2-xl", rows: int = 1) -> dict[str, dict]:
    """Per op kind ("attn", "mlp") for one micro-batch of `rows` sequences: FLOPs of F, B, W,
    parameters, weight bytes and activation bytes (module docstring's closed forms)."""
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows={rows!r} must be an int >= 1 (sequences per micro-batch)")
    shape = _shape(preset)
    T, C, a = shape["block_size"], shape["n_embd"], shape["n_head"]
    t = rows * T
    core = block_flops(rows, T, C) - 2 * t * 12 * C * C  # QKᵀ and ·V: 4·t·T·C
    out = {}
    for kind, matmul, params, acts in (("attn", 2 * t * 4 * C * C, 4 * C * C + 2 * C,
                                        13 * t * C + 5 * a * T * t),
                                       ("mlp", 2 * t * 8 * C * C, 8 * C * C + 2 * C, 21 * t * C)):
        fwd = matmul + (core if kind == "attn" else 0)
        b = matmul + (2 * core if kind == "attn" else 0)
        weights = sum(mixed_precision_formula(0, params, 1).values())
        out[kind] = {"F": fwd, "B": b, "W": matmul, "params": params, "weights": weights,
                     "acts": acts}  # Korthikanti's counts are bytes (2-byte elements) already
    return out


def layer_graph(preset: str = "gpt2-xl", layers: int = 2, microbatches: int = 4, rows: int = 1,
                accelerator: str = "H100") -> tuple[OpGraph, Memory]:
    """`layers` layers of `preset` as ops attn0, mlp0, attn1, … (chained), B and W split, priced
    on `accelerator`; messages over its real NVLink. Returns the graph and its ops' memory."""
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers={layers!r} must be an int >= 1")
    costs, clock = op_costs(preset, rows), resolve_clock(accelerator)
    if not clock.paced:
        raise ValueError(f"accelerator={accelerator!r} must name an accelerator, not the wall clock")
    names = [f"{kind}{i}" for i in range(layers) for kind in ("attn", "mlp")]
    kind_of = {n: n.rstrip("0123456789") for n in names}
    secs = {k: {n: clock.seconds(KERNELS[kind_of[n]]["FBW".index(k)], costs[kind_of[n]][k])
                for n in names} for k in "FBW"}
    edge = BF16 * rows * _shape(preset)["block_size"] * _shape(preset)["n_embd"]
    graph = op_graph([(u, v, edge) for u, v in zip(names, names[1:])], secs["F"], secs["B"],
                     microbatches, weight_s=secs["W"],
                     wire=real_link("NVLink", clock.accelerator))
    memory = memory_of({n: costs[kind_of[n]]["weights"] for n in names},
                       {n: costs[kind_of[n]]["acts"] for n in names})
    return graph, memory


REVERSE = "~"  # suffix of the second model copy's ops (DualPipe's reverse direction)


def dual_graph(graph: OpGraph, memory: Memory) -> tuple[OpGraph, Memory]:
    """DualPipe's graph: two copies of the model, the first computing micro-batches 0..m/2−1, the
    copy (ops suffixed `REVERSE`) the others (DeepSeek-V3 report §3.2.1; `parlab.pipeline.dualpipe`)."""
    m = graph.microbatches
    if m % 2:
        raise ValueError(f"microbatches={m} must be even: DualPipe feeds m/2 from each end")
    fwd, bwd = graph.times()
    wts = graph.wtimes()

    def both(d):
        return {**d, **{n + REVERSE: v for n, v in d.items()}}

    edges = graph.edges() + [(u + REVERSE, v + REVERSE, b) for u, v, b in graph.edges()]
    routes = {n: range(m // 2) for n in graph.names}
    routes.update({n + REVERSE: range(m // 2, m) for n in graph.names})
    dual = op_graph(edges, both(fwd), both(bwd), m, weight_s=both(wts), routes=routes,
                    wire=graph.wire)
    return dual, memory_of(both(memory.w), both(memory.a))
