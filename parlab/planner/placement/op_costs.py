"""What the operator planner knows of a graph besides its shape: its costs and its memory.

She et al. (2025, arXiv 2503.09357) give every operator a compute cost, every edge a tensor size,
and every device a memory capacity that the placed operators' weights and in-flight activations
must fit. `OpGraph` is a graph given by those costs alone (tests; the bi-level decomposition's
merged graphs); `Memory` the bytes of each op — weights (parameters and gradients, all step) and
what one micro-batch's forward holds until its backward (its W where the backward is split) —
measured on the chapter's graph by `measure_memory`; `peak_memory` the most a rank holds along a
plan's order, the quantity the MILP's memory constraint bounds (`parlab.planner.placement.milp`).
"""

from __future__ import annotations

from dataclasses import dataclass

from parlab.planner.placement.measured_graph import Graph


@dataclass(frozen=True)
class OpGraph:
    """A graph of operators given by its costs alone: ops in topological order, edges with the
    bytes of one micro-batch's activation, forward / backward seconds per op. What the planner
    needs of `parlab.planner.placement.measured_graph.Graph`, without the modules (tests; merged graphs)."""

    ops: tuple  # names, topological order
    edge_list: tuple  # ((u, v, bytes), ...)
    microbatches: int
    fwd_s: tuple  # ((op, seconds), ...)
    bwd_s: tuple  # the backward, or its input-gradient part B where `weight_s` is given
    weight_s: tuple = ()  # ((op, seconds), ...) of the weight gradient W: the backward split
    routes: tuple = ()  # ((op, (micro-batches...)), ...): ops that compute only some of them
    wire: object = None  # a `Link` the messages cross (default: this machine's loopback)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.ops)

    @property
    def split_backward(self) -> bool:
        return bool(self.weight_s)

    def edges(self) -> list[tuple[str, str, int]]:
        return list(self.edge_list)

    def times(self) -> tuple[dict[str, float], dict[str, float]]:
        return dict(self.fwd_s), dict(self.bwd_s)

    def wtimes(self) -> dict[str, float]:
        return dict(self.weight_s)

    def micro_of(self, op: str):
        return dict(self.routes).get(op, range(self.microbatches))


def op_graph(edges: list, fwd: dict, bwd: dict, microbatches: int = 1,
             weight_s: dict | None = None, routes: dict | None = None, wire=None) -> OpGraph:
    """An `OpGraph` from edges (u, v, bytes) and times; ops in the order `fwd` lists them, which
    must be topological. `weight_s`: W seconds per op (the backward split, `bwd` then B's);
    `routes`: {op: micro-batches} for ops that compute only some; `wire`: the messages' Link."""
    names = tuple(fwd)
    index = {n: i for i, n in enumerate(names)}
    bad = [(u, v) for u, v, _ in edges if u not in index or v not in index or index[u] >= index[v]]
    if bad:
        raise ValueError(f"edges {bad} do not go forward in the op order {names}")
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
        raise ValueError(f"microbatches={microbatches!r} must be an int >= 1")
    bad = [n for n, ks in (routes or {}).items() if n not in index or not ks
           or any(not 0 <= k < microbatches for k in ks)]
    if bad:
        raise ValueError(f"routes of {bad} name no op or no micro-batch in 0..{microbatches - 1}")
    return OpGraph(names, tuple((u, v, int(b)) for u, v, b in edges), microbatches,
                   tuple((n, float(fwd[n])) for n in names),
                   tuple((n, float(bwd[n])) for n in names),
                   tuple((n, float(weight_s[n])) for n in names) if weight_s else (),
                   tuple((n, tuple(sorted(ks))) for n, ks in (routes or {}).items()), wire)


# ----------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class Memory:
    """Bytes per op: `weights`, held all step (parameters and their gradients, fp32; SGD keeps no
    other state), and `acts`, what one micro-batch's forward holds until its backward ends."""

    weights: tuple  # ((op, bytes), ...)
    acts: tuple

    @property
    def w(self) -> dict[str, float]:
        return dict(self.weights)

    @property
    def a(self) -> dict[str, float]:
        return dict(self.acts)


def memory_of(weights: dict, acts: dict) -> Memory:
    """A `Memory` of given bytes per op (tests and what-if questions)."""
    if set(weights) != set(acts):
        raise ValueError(f"weights name {sorted(weights)}, acts {sorted(acts)}: the same ops")
    return Memory(tuple((n, float(weights[n])) for n in weights),
                  tuple((n, float(acts[n])) for n in acts))


def tensor_key(t) -> tuple:
    """A tensor's memory: where its data starts and how many bytes it spans (views of one
    buffer at one offset count once; a slice of a batch counts as its own rows)."""
    return (t.data_ptr(), t.numel() * t.element_size())


def measure_memory(graph: Graph) -> Memory:
    """Each op's weights (parameters + gradients) and what its forward on one micro-batch holds
    for its backward: the tensors autograd saves (`torch.autograd.graph.saved_tensors_hooks`),
    parameters left out, plus the op's output (the executor keeps it until the op's backward),
    each distinct buffer once. Counted per op in isolation, so a buffer two ops save (a producer's
    output that its consumer saves as input) counts for both: an upper bound of what a rank holds."""
    from torch.autograd.graph import saved_tensors_hooks

    from parlab.models.op_graph import DATA
    from parlab.planner.placement.measured_graph import first_micro_values
    modules, values = first_micro_values(graph)
    weights, acts = {}, {}
    for op in graph.ops:
        params = list(modules[op.name].parameters())
        weights[op.name] = 2 * sum(p.numel() * p.element_size() for p in params)
        owned = {p.data_ptr() for p in params}
        xs = [values[u].detach().clone().requires_grad_(u not in DATA) for u in op.inputs]
        seen: dict = {}

        def pack(t, seen=seen, owned=owned):
            if t.data_ptr() not in owned:
                seen[tensor_key(t)] = t.numel() * t.element_size()
            return t

        with saved_tensors_hooks(pack, lambda t: t):
            out = modules[op.name](*xs)
        seen[tensor_key(out)] = out.numel() * out.element_size()
        acts[op.name] = sum(seen.values())
    return memory_of(weights, acts)


def peak_memory(plan, memory: Memory) -> tuple[float, ...]:
    """Per rank of `plan` (a `placement.PlacementPlan`): its ops' weights + the most activation
    bytes it holds along its order (an F adds its op's bytes when it starts, the matching B frees
    them when it ends)."""
    w, a, place = memory.w, memory.a, plan.placement
    free = "W" if any(t.kind == "W" for seq in plan.order for t in seq) else "B"  # split: W frees
    out = []
    for r, seq in enumerate(plan.order):
        held = peak = 0.0
        for t in seq:
            if t.kind == "F":
                held += a[t.op]
                peak = max(peak, held)
            elif t.kind == free:
                held -= a[t.op]
        out.append(sum(w[n] for n, rank in place.items() if rank == r) + peak)
    return tuple(out)
