"""A small branchy model as a graph of operators: what an operator-level planner places.

She et al., "Automatic Operator-level Parallelism Planning for Distributed Deep Learning — A
Mixed-Integer Programming Approach" (2025, arXiv 2503.09357, §3) plan at the granularity of
operators: a model is a directed acyclic graph whose nodes compute and whose edges carry an
activation of known size. This is that model, small enough to place exactly:

    x ─ stem ─┬─ mlp_up ─ mlp_down ─┐
              ├─ attn ──────────────┼─ merge ─ head ─ loss(y)
              └─ conv ──────────────┘

three branches of different cost (an MLP, self-attention, a 1-D convolution over the sequence).
`OpGraphModel` is an `nn.ModuleDict` of the ops (`model["attn"]`), built from a seed like every
model (`parlab.models.build_model("op-graph", cfg, seed)`), so `parlab.run("single",
model="op-graph")` is the reference every placement reproduces. `OpStructure` is the graph's
structure at one batch split (inputs, consumers, per-micro-batch shapes and bytes), shared by
the executor (`parlab.planner.placement.placed`) and the planner's costed graph
(`parlab.planner.placement.measured_graph`).
Data: x (B, T, D_IN) and a regression target y (B, T, D_OUT), seeded per step
(`parlab.models.data.global_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from parlab.core.cost import FP32_BYTES
from parlab.models.checks import require_positive_ints
from parlab.models.data import OP_GRAPH_D_IN as D_IN  # widths of x and y: fixed, as the data is
from parlab.models.data import OP_GRAPH_D_OUT as D_OUT  # drawn without the model's config
from parlab.models.data import op_graph_batch
from parlab.models.gpt import multi_head, split_qkv
from parlab.models.spec import ModelSpec, register_model

DATA = ("x", "y")  # external inputs: every rank can make them (seeded)


@dataclass(frozen=True)
class Op:
    """One operator: its name, its inputs (producer ops or DATA) and what it computes."""

    name: str
    inputs: tuple[str, ...]
    what: str


@dataclass(frozen=True)
class OpGraphConfig:
    block_size: int = 64  # T, the sequence length
    width: int = 128  # d
    heads: int = 4
    kernel: int = 5

    def validate(self) -> None:
        require_positive_ints(self)
        if self.width % self.heads:
            raise ValueError(f"width={self.width} is not divisible by heads={self.heads}")
        if self.kernel % 2 == 0:
            raise ValueError(f"kernel={self.kernel} must be odd (same-length convolution)")


def graph_ops(cfg: OpGraphConfig) -> tuple[Op, ...]:
    """The ops in topological order."""
    return (Op("stem", ("x",), "linear d_in→d + GELU"),
            Op("mlp_up", ("stem",), "linear d→4d + GELU"),
            Op("mlp_down", ("mlp_up",), "linear 4d→d"),
            Op("attn", ("stem",), f"self-attention, {cfg.heads} heads"),
            Op("conv", ("stem",), f"conv1d over T, kernel {cfg.kernel} + GELU"),
            Op("merge", ("mlp_down", "attn", "conv"), "sum + LayerNorm"),
            Op("head", ("merge", "y"), "linear d→d_out + MSE loss"))


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


class OpGraphModel(nn.ModuleDict):
    """Every op's module by name, initialised from `seed` in op order; `loss(x, y)` runs the graph."""

    activation_checkpointing = False  # set by build_model; nothing to recompute here

    def __init__(self, cfg: OpGraphConfig, seed: int = 0):
        cfg.validate()
        d = cfg.width
        with torch.random.fork_rng(devices=[]):  # the global generator is left as it was
            torch.manual_seed(seed)
            super().__init__({"stem": Mlp(D_IN, d), "mlp_up": Mlp(d, 4 * d),
                              "mlp_down": Mlp(4 * d, d, act=False), "attn": Attention(d, cfg.heads),
                              "conv": Conv(d, cfg.kernel), "merge": Merge(d),
                              "head": Head(d, D_OUT)})
        self.config = cfg

    def outputs(self, inputs: dict) -> dict:
        """Every op's output for `inputs` (x, y of any number of rows), in topological order."""
        values = dict(inputs)
        for op in graph_ops(self.config):
            values[op.name] = self[op.name](*(values[u] for u in op.inputs))
        return values

    def forward(self, x, y):  # (B, T, D_IN), (B, T, D_OUT) -> () the loss
        return self.outputs({"x": x, "y": y})["head"]

    def loss(self, x, y):
        return self(x, y)


def param_count(cfg: OpGraphConfig) -> int:
    """Parameters of the op graph, from the config alone."""
    d, k = cfg.width, cfg.kernel
    return ((D_IN * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + (4 * d * d + 4 * d)
            + (k * d * d + d) + 2 * d + (d * D_OUT + D_OUT))


def activation_count(cfg: OpGraphConfig, batch_size: int) -> int:
    """A generous count of the elements a forward over `batch_size` rows saves (every op's inputs,
    intermediates and outputs, and the attention scores)."""
    tokens = batch_size * cfg.block_size
    return tokens * (D_IN + 2 * D_OUT + 24 * cfg.width) + 3 * batch_size * cfg.heads * cfg.block_size ** 2


class OpStructure:
    """The graph's structure at one batch split: needs `config` (OpGraphConfig), `batch` (the
    global batch) and `microbatches`."""

    config: OpGraphConfig
    batch: int
    microbatches: int

    @property
    def ops(self) -> tuple[Op, ...]:
        return graph_ops(self.config)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(op.name for op in self.ops)

    def op(self, name: str) -> Op:
        return next(o for o in self.ops if o.name == name)

    def consumers(self, name: str) -> list[str]:
        return [op.name for op in self.ops if name in op.inputs]

    @property
    def mb_rows(self) -> int:
        return self.batch // self.microbatches

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape of `name`'s output (an op or DATA) for one micro-batch."""
        widths = {"x": D_IN, "y": D_OUT, "mlp_up": 4 * self.config.width}
        if name == "head":
            return ()
        return (self.mb_rows, self.config.block_size, widths.get(name, self.config.width))

    def nbytes(self, name: str) -> int:
        """Bytes of `name`'s output for one micro-batch (fp32); its gradient has the same size."""
        numel = 1
        for n in self.shape(name):
            numel *= n
        return numel * FP32_BYTES

    def edges(self) -> list[tuple[str, str, int]]:
        """(producer, consumer, bytes per micro-batch) of every op → op edge."""
        return [(u, op.name, self.nbytes(u)) for op in self.ops for u in op.inputs if u not in DATA]


@dataclass(frozen=True)
class OpGraphSplit(OpStructure):
    """The op graph of `config` with a global batch of `batch` rows in `microbatches` parts."""

    config: OpGraphConfig
    batch: int
    microbatches: int

    def __post_init__(self):
        if self.batch % self.microbatches:
            raise ValueError(f"batch_size={self.batch} is not divisible by "
                             f"microbatches={self.microbatches}")


register_model(ModelSpec("op-graph", OpGraphConfig, OpGraphModel, param_count, activation_count,
                         op_graph_batch))
