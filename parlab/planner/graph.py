"""A small branchy model as a graph of operators: what an operator-level planner places.

She et al., "Automatic Operator-level Parallelism Planning for Distributed Deep Learning — A
Mixed-Integer Programming Approach" (2025, arXiv 2503.09357) plan at the granularity of
operators: a model is a directed acyclic graph whose nodes have a compute cost (forward and
backward) and whose edges carry an activation of known size; a placement puts every node on a
device and an order runs them. This file is that graph for a model small enough to solve exactly:

    x ─ stem ─┬─ mlp_up ─ mlp_down ─┐
              ├─ attn ──────────────┼─ merge ─ head ─ loss(y)
              └─ conv ──────────────┘

three branches of different cost (an MLP, self-attention, a 1-D convolution over the sequence)
that can run on different ranks. Each edge's size is exact, from the shapes (bytes of one
micro-batch's activation; its gradient has the same size); each node's forward and backward
times are MEASURED once on this machine (`profile`). `reference` is the single-process forward /
backward of the same graph on the whole batch: what every placement must reproduce.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from parlab.core.cost import FP32_BYTES
from parlab.models.gpt import multi_head, split_qkv

DATA = ("x", "y")  # external inputs: every rank can make them (seeded)


@dataclass(frozen=True)
class Op:
    """One operator: its name, its inputs (producer ops or DATA) and what it computes."""

    name: str
    inputs: tuple[str, ...]
    what: str


class Mlp(nn.Module):
    def __init__(self, d_in, d_out, act=True):
        super().__init__()
        self.lin, self.act = nn.Linear(d_in, d_out), act

    def forward(self, h):  # (mb, T, d_in) -> (mb, T, d_out)
        h = self.lin(h)
        return F.gelu(h) if self.act else h


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, h):  # (mb, T, d)
        q, k, v = split_qkv(self.qkv(h))  # 3 × (mb, T, d)
        a = multi_head(q, k, v, h.size(-1) // self.heads,
                       F.scaled_dot_product_attention)  # (mb, T, d): not causal
        return self.out(a)  # (mb, T, d)


class Conv(nn.Module):
    def __init__(self, d, kernel):
        super().__init__()
        self.conv = nn.Conv1d(d, d, kernel, padding=kernel // 2)

    def forward(self, h):  # (mb, T, d)
        return F.gelu(self.conv(h.transpose(1, 2))).transpose(1, 2)  # (mb, T, d)


class Merge(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)

    def forward(self, a, b, c):  # 3 × (mb, T, d) -> (mb, T, d)
        return self.norm(a + b + c)


class Head(nn.Module):
    def __init__(self, d, d_out):
        super().__init__()
        self.lin = nn.Linear(d, d_out)

    def forward(self, h, y):  # (mb, T, d), (mb, T, d_out) -> () mean squared error
        return F.mse_loss(self.lin(h), y)


@dataclass(frozen=True)
class Graph:
    """The branchy model: ops in topological order, shapes per micro-batch, measured times."""

    batch: int = 16
    seq: int = 64
    width: int = 128
    d_in: int = 16
    d_out: int = 8
    heads: int = 4
    kernel: int = 5
    microbatches: int = 2
    seed: int = 0
    fwd_s: tuple = ()  # ((op, seconds), ...) measured by `profile`
    bwd_s: tuple = ()

    def __post_init__(self):
        for name in ("batch", "seq", "width", "d_in", "d_out", "heads", "kernel", "microbatches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        bad = []
        if self.batch % self.microbatches:
            bad.append(f"batch={self.batch} is not divisible by microbatches={self.microbatches}")
        if self.width % self.heads:
            bad.append(f"width={self.width} is not divisible by heads={self.heads}")
        if self.kernel % 2 == 0:
            bad.append(f"kernel={self.kernel} must be odd (same-length convolution)")
        if bad:
            raise ValueError("; ".join(bad))

    # ------------------------------------------------------------------ structure
    @property
    def ops(self) -> tuple[Op, ...]:
        return (Op("stem", ("x",), "linear d_in→d + GELU"),
                Op("mlp_up", ("stem",), "linear d→4d + GELU"),
                Op("mlp_down", ("mlp_up",), "linear 4d→d"),
                Op("attn", ("stem",), f"self-attention, {self.heads} heads"),
                Op("conv", ("stem",), f"conv1d over T, kernel {self.kernel} + GELU"),
                Op("merge", ("mlp_down", "attn", "conv"), "sum + LayerNorm"),
                Op("head", ("merge", "y"), "linear d→d_out + MSE loss"))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(op.name for op in self.ops)

    def op(self, name: str) -> Op:
        return next(o for o in self.ops if o.name == name)

    @property
    def mb_rows(self) -> int:
        return self.batch // self.microbatches

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape of `name`'s output (an op or DATA) for one micro-batch."""
        widths = {"x": self.d_in, "y": self.d_out, "mlp_up": 4 * self.width}
        if name == "head":
            return ()
        return (self.mb_rows, self.seq, widths.get(name, self.width))

    def nbytes(self, name: str) -> int:
        """Bytes of `name`'s output for one micro-batch (fp32); its gradient has the same size."""
        numel = 1
        for n in self.shape(name):
            numel *= n
        return numel * FP32_BYTES

    def edges(self) -> list[tuple[str, str, int]]:
        """(producer, consumer, bytes per micro-batch) of every op → op edge."""
        return [(u, op.name, self.nbytes(u)) for op in self.ops for u in op.inputs if u not in DATA]

    def consumers(self, name: str) -> list[str]:
        return [op.name for op in self.ops if name in op.inputs]

    # ------------------------------------------------------------------ modules and data
    def modules(self) -> nn.ModuleDict:
        """Every op's module, initialised from `seed` in op order (the same on every rank)."""
        torch.manual_seed(self.seed)
        d = self.width
        return nn.ModuleDict({"stem": Mlp(self.d_in, d), "mlp_up": Mlp(d, 4 * d),
                              "mlp_down": Mlp(4 * d, d, act=False),
                              "attn": Attention(d, self.heads), "conv": Conv(d, self.kernel),
                              "merge": Merge(d), "head": Head(d, self.d_out)})

    def data(self, step: int) -> dict[str, torch.Tensor]:
        """The global batch of `step`: x (B, T, d_in) and a target y (B, T, d_out)."""
        g = torch.Generator().manual_seed((1000 * self.seed + step) % 2**64)
        x = torch.randn(self.batch, self.seq, self.d_in, generator=g)  # (B, T, d_in)
        y = torch.randn(self.batch, self.seq, self.d_out, generator=g)  # (B, T, d_out)
        return {"x": x, "y": y}

    def micro(self, data: dict, mb: int) -> dict[str, torch.Tensor]:
        rows = slice(mb * self.mb_rows, (mb + 1) * self.mb_rows)
        return {k: v[rows] for k, v in data.items()}  # (B/m, T, ·)

    # ------------------------------------------------------------------ measured costs
    @property
    def profiled(self) -> bool:
        return bool(self.fwd_s)

    def times(self) -> tuple[dict[str, float], dict[str, float]]:
        """(forward seconds, backward seconds) per op and micro-batch; `profile` first."""
        if not self.profiled:
            raise ValueError("the graph has no measured op times: call parlab.planner.graph.profile")
        return dict(self.fwd_s), dict(self.bwd_s)


def forward(graph: Graph, modules, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every op's output for `inputs` (x, y of any number of rows), in topological order."""
    values = dict(inputs)
    for op in graph.ops:
        values[op.name] = modules[op.name](*(values[u] for u in op.inputs))
    return values


def profile(graph: Graph, reps: int = 7, threads: int = 1) -> Graph:
    """The graph with each op's forward and backward time on one micro-batch MEASURED here
    (median of `reps`, on `threads` intra-op threads: one, as every launched rank runs)."""
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps={reps!r} must be an int >= 1")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        modules = graph.modules()
        data = graph.micro(graph.data(0), 0)
        with torch.no_grad():
            values = forward(graph, modules, data)
        fwd, bwd = {}, {}
        for op in graph.ops:
            xs = [values[u].detach().requires_grad_(u not in DATA) for u in op.inputs]
            f_times, b_times = [], []
            for _ in range(reps + 1):  # the first is a warm-up
                t0 = time.perf_counter()
                out = modules[op.name](*xs)
                t1 = time.perf_counter()
                out.backward(torch.ones_like(out))
                t2 = time.perf_counter()
                f_times.append(t1 - t0)
                b_times.append(t2 - t1)
            fwd[op.name] = statistics.median(f_times[1:])
            bwd[op.name] = statistics.median(b_times[1:])
    finally:
        torch.set_num_threads(before)
    return replace(graph, fwd_s=tuple(fwd.items()), bwd_s=tuple(bwd.items()))


def demo_graph(microbatches: int = 2, batch: int = 16, seq: int = 64, width: int = 128,
               measure: bool = True, seed: int = 0) -> Graph:
    """The chapter's branchy graph, its op times measured on this machine (`measure=True`)."""
    graph = Graph(batch=batch, seq=seq, width=width, microbatches=microbatches, seed=seed)
    return profile(graph) if measure else graph


def with_times(graph: Graph, fwd: dict[str, float], bwd: dict[str, float]) -> Graph:
    """The graph with given op times (seconds): for tests and what-if questions."""
    missing = [n for n in graph.names if n not in fwd or n not in bwd]
    if missing:
        raise ValueError(f"times missing for ops {missing}")
    return replace(graph, fwd_s=tuple((n, float(fwd[n])) for n in graph.names),
                   bwd_s=tuple((n, float(bwd[n])) for n in graph.names))


def reference(graph: Graph, steps: int = 2, lr: float = 0.1) -> dict:
    """The single-process run: the whole batch forward and backward, SGD(lr) per step.

    Returns losses (per step), grads (the first step's, per parameter) and state (final)."""
    modules = graph.modules()
    opt = torch.optim.SGD(modules.parameters(), lr=lr)
    losses, grads = [], None
    for step in range(steps):
        loss = forward(graph, modules, graph.data(step))["head"]
        loss.backward()
        losses.append(loss.item())
        if grads is None:
            grads = {k: p.grad.detach().clone() for k, p in modules.named_parameters()}
        opt.step()
        opt.zero_grad()
    state = {k: p.detach().clone() for k, p in modules.named_parameters()}
    return {"losses": losses, "grads": grads, "state": state}
