"""The branchy operator graph with measured costs: what an operator-level planner places.

She et al., "Automatic Operator-level Parallelism Planning for Distributed Deep Learning — A
Mixed-Integer Programming Approach" (2025, arXiv 2503.09357) plan at the granularity of
operators: a model is a directed acyclic graph whose nodes have a compute cost (forward and
backward) and whose edges carry an activation of known size; a placement puts every node on a
device and an order runs them. The model itself (its ops, modules and data) is
`parlab.models.op_graph`; this file adds what the planner needs:

    x ─ stem ─┬─ mlp_up ─ mlp_down ─┐
              ├─ attn ──────────────┼─ merge ─ head ─ loss(y)
              └─ conv ──────────────┘

the global batch and its micro-batches (each edge's size exact, from the shapes: bytes of one
micro-batch's activation; its gradient has the same size) and each node's forward and backward
times MEASURED once on this machine (`profile`). The reference every placement must reproduce is
`parlab.run("single", **graph.run_options())`: the same model, data and optimizer on one process.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace

import torch

from parlab import models
from parlab.models import data as model_data
from parlab.models.op_graph import DATA, Op, OpGraphConfig, OpStructure  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class Graph(OpStructure):
    """The branchy model (`parlab.models.op_graph`) at a global batch split into micro-batches,
    with measured op times: ops in topological order, shapes per micro-batch (`OpStructure`)."""

    batch: int = 16
    seq: int = 64
    width: int = 128
    heads: int = 4
    kernel: int = 5
    microbatches: int = 2
    seed: int = 0
    fwd_s: tuple = ()  # ((op, seconds), ...) measured by `profile`
    bwd_s: tuple = ()

    def __post_init__(self):
        for name in ("batch", "microbatches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        if self.batch % self.microbatches:
            raise ValueError(f"batch={self.batch} is not divisible by "
                             f"microbatches={self.microbatches}")
        self.config.validate()  # seq, width, heads, kernel: the model's own checks

    @property
    def config(self) -> OpGraphConfig:
        return OpGraphConfig(block_size=self.seq, width=self.width, heads=self.heads,
                             kernel=self.kernel)

    def run_options(self, steps: int = 2, lr: float = 0.1) -> dict:
        """The keyword arguments of `parlab.run` for this graph: model, its config, the global
        batch, the seed, SGD at `lr` (the placed scheme adds `plan=` and `microbatches=`)."""
        return {"model": "op-graph", "model_config": {"block_size": self.seq, "width": self.width,
                                                      "heads": self.heads, "kernel": self.kernel},
                "batch_size": self.batch, "seed": self.seed, "steps": steps, "optimizer": "sgd",
                "lr": lr}

    # ------------------------------------------------------------------ modules and data
    def modules(self):
        """Every op's module (`model[op]`), initialised from `seed` (the same on every rank)."""
        return models.build_model("op-graph", self.config, self.seed)

    def data(self, step: int) -> dict[str, torch.Tensor]:
        """The global batch of `step`: x (B, T, D_IN) and a target y (B, T, D_OUT)."""
        x, y = model_data.global_batch("op-graph", step, self.batch, self.seed, self.seq)
        return {"x": x, "y": y}  # (B, T, D_IN), (B, T, D_OUT)

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
            raise ValueError("the graph has no measured op times: call "
                             "parlab.planner.placement.measured_graph.profile")
        return dict(self.fwd_s), dict(self.bwd_s)


def forward(graph: Graph, modules, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every op's output for `inputs` (x, y of any number of rows), in topological order."""
    return modules.outputs(inputs)


def first_micro_values(graph: Graph):
    """(the graph's modules, every op's output on micro-batch 0 of step 0, without autograd):
    what profiling and memory measurement feed each op in isolation."""
    modules = graph.modules()
    with torch.no_grad():
        return modules, forward(graph, modules, graph.micro(graph.data(0), 0))


def profile(graph: Graph, reps: int = 7, threads: int = 1) -> Graph:
    """The graph with each op's forward and backward time on one micro-batch MEASURED here
    (median of `reps`, on `threads` intra-op threads: one, as every launched rank runs)."""
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps={reps!r} must be an int >= 1")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        modules, values = first_micro_values(graph)
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
