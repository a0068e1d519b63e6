"""HAP's search space on the tiny GPT block: one sharding choice per operator, the layout each
choice gives its input and output, and the resharding between two operators that disagree.

Zhang et al., "HAP: SPMD DNN Training on Heterogeneous GPU Clusters with Automated Program
Synthesis" (EuroSys 2024, §4) describe a program by the *properties* of its tensors on each
device: Identity (R here), Gather(d) (F: features, D: batch rows), Reduce (P: partial sums).
Each of the block's seven operators (stream, c_attn, core, attn_proj, c_fc, gelu, mlp_proj) picks
replicate, rows, columns (Megatron's names: Shoeybi et al. 2019, §3) or data; `resharding`
converts a producer's layout to its consumer's (slice, all-gather, all-reduce, reduce-scatter),
and the gradients back. A `Program` is one choice per operator, used by every block:
"dp col col row col col row" is Megatron's tensor + sequence parallel block, "dp dp dp dp dp dp
dp" data parallelism. The table of choices and layouts and the resharding rules:
docs/heterogeneous.md, `parlab.heterogeneous.programs`; what it simplifies from HAP:
`parlab.heterogeneous.program_search`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

REPLICATE, ROWS, COLUMNS, DATA = "rep", "row", "col", "dp"
NAMES = {REPLICATE: "replicate", ROWS: "shard rows", COLUMNS: "shard columns", DATA: "data-parallel"}
OPS = ("stream", "c_attn", "core", "attn_proj", "c_fc", "gelu", "mlp_proj")
LINEARS = ("c_attn", "attn_proj", "c_fc", "mlp_proj")
CHOICES = {"stream": (REPLICATE, DATA), "core": (REPLICATE, COLUMNS, DATA),
           "gelu": (REPLICATE, COLUMNS, DATA),
           **{op: (REPLICATE, ROWS, COLUMNS, DATA) for op in LINEARS}}
R, F, P, D = "R", "F", "P", "D"
# (in width, out width) of each operator's tensors, in units of C
WIDTHS = {"stream": (1, 1), "c_attn": (1, 3), "core": (3, 1), "attn_proj": (1, 1), "c_fc": (1, 4),
          "gelu": (4, 4), "mlp_proj": (4, 1)}
# the block's tensors between operators: (name, producer, consumer); the stream's residual adds
# take the branches' outputs back in the stream's layout
EDGES = (("ln_1", "stream", "c_attn"), ("qkv", "c_attn", "core"), ("heads", "core", "attn_proj"),
         ("attn_out", "attn_proj", "stream"), ("ln_2", "stream", "c_fc"), ("hidden", "c_fc", "gelu"),
         ("act", "gelu", "mlp_proj"), ("mlp_out", "mlp_proj", "stream"))


@dataclass(frozen=True)
class Program:
    """One choice per operator of `OPS`, the same in every block. `code`: the choices in `OPS`
    order, space-separated (`parse` reads it back)."""

    choices: tuple

    def __post_init__(self):
        if len(self.choices) != len(OPS) or any(c not in CHOICES[op] for op, c in
                                                zip(OPS, self.choices)):
            raise ValueError(f"program={' '.join(map(str, self.choices))!r} needs one choice per "
                             f"operator {OPS}, each one of {[CHOICES[op] for op in OPS]}")

    def __getitem__(self, op: str) -> str:
        return self.choices[OPS.index(op)]

    @property
    def code(self) -> str:
        return " ".join(self.choices)

    def describe(self) -> str:
        return ", ".join(f"{op} {NAMES[c]}" for op, c in zip(OPS, self.choices))

    def __str__(self) -> str:
        return self.code


def parse(code) -> Program:
    """A `Program` from its code ("dp col col row col col row"); ValueError names a bad one."""
    if isinstance(code, Program):
        return code
    if not isinstance(code, str):
        raise ValueError(f"program={code!r} must be a string of {len(OPS)} choices, one per "
                         f"operator {OPS}")
    return Program(tuple(code.split()))


MEGATRON_SP = parse("dp col col row col col row")  # chapter 03's tp-sp, rows for positions
DATA_PARALLEL = parse("dp dp dp dp dp dp dp")


def every_program():
    """All programs of the space, in a fixed order (2·4⁴·3² = 4608)."""
    for choices in itertools.product(*(CHOICES[op] for op in OPS)):
        yield Program(choices)


def in_layout(op: str, choice: str) -> str:
    if op == "stream":
        return D if choice == DATA else R
    return {REPLICATE: R, ROWS: F, COLUMNS: R if op in LINEARS else F, DATA: D}[choice]


def out_layout(op: str, choice: str) -> str:
    if op == "stream":
        return D if choice == DATA else R
    return {REPLICATE: R, ROWS: P, COLUMNS: F, DATA: D}[choice]


def in_grad(op: str, choice: str) -> str:
    """The layout of the gradient an operator hands back for its input: partial (P) from a
    column-parallel linear (each rank multiplied the whole input by some output features)."""
    return P if op in LINEARS and choice == COLUMNS else in_layout(op, choice)


def out_grad(layout: str) -> str:
    """The layout of the gradient a producer needs for an output of `layout`: a partial sum's
    gradient is the whole gradient, every rank's copy (R)."""
    return R if layout == P else layout


def resharding(src: str, dst: str) -> tuple:
    """The steps that turn layout `src` into `dst`: ("slice", L), ("all_gather", L),
    ("all_reduce",), ("reduce_scatter", L) with L the split layout (F or D) they act along."""
    if src == dst:
        return ()
    if src == R:
        return (("slice", dst),)
    if src == P:
        return (("all_reduce",),) if dst == R else (("reduce_scatter", dst),)
    if dst == R:
        return (("all_gather", src),)
    return (("all_gather", src), ("slice", dst))  # F <-> D through the whole tensor


@dataclass(frozen=True)
class Edge:
    """A tensor between two operators under a program: its name, width (units of C), and the
    steps of its forward and backward resharding."""

    name: str
    width: int
    forward: tuple
    backward: tuple


def edge(name: str, producer: str, consumer: str, made: str, used: str) -> Edge:
    """The resharding of tensor `name` from `producer` (choice `made`) to `consumer` (`used`)."""
    out = out_layout(producer, made)
    return Edge(name, WIDTHS[producer][1], resharding(out, in_layout(consumer, used)),
                resharding(in_grad(consumer, used), out_grad(out)))


def edges(program: Program) -> list[Edge]:
    return [edge(name, p, c, program[p], program[c]) for name, p, c in EDGES]


def step_kind(step: tuple) -> tuple[str, str | None]:
    """(kind, layout) of a resharding step; layout None for an all-reduce."""
    return step[0], step[1] if len(step) > 1 else None


def communicates(steps) -> bool:
    return any(step[0] != "slice" for step in steps)


def feature_dimension(width: int) -> str:
    """The units a tensor of `width`·C is split into along its features: heads (C and 3C: q, k, v
    of whole heads) or columns (the 4C hidden)."""
    return "columns" if width == 4 else "heads"


def units_dimension(op: str, choice: str) -> str | None:
    """Which split ("heads", "columns", "rows") sets an operator's share of the work, None when it
    does all of it (replicate; a replicated stream)."""
    if choice == DATA:
        return "rows"
    if choice == COLUMNS:
        return feature_dimension(WIDTHS[op][1])
    if choice == ROWS:
        return feature_dimension(WIDTHS[op][0])
    return None


def split(model_config, batch_size: int, weights) -> dict[str, list[int]]:
    """Each rank's heads, hidden columns and batch rows for sharding ratios `weights` (one ratio per
    rank, as in `parlab.heterogeneous.tp_shares`: largest remainders, at least one unit each)."""
    from parlab.heterogeneous.tp_shares import cut

    return {"heads": cut(model_config.n_head, weights), "columns": cut(4 * model_config.n_embd, weights),
            "rows": cut(batch_size, weights)}


def dimensions_used(program: Program) -> set[str]:
    """The splits a program's operators and reshardings act along."""
    used = {units_dimension(op, c) for op, c in zip(OPS, program.choices)} - {None}
    for e in edges(program):
        for step in e.forward + e.backward:
            layout = step_kind(step)[1]
            if layout is not None:
                used.add("rows" if layout == D else feature_dimension(e.width))
    return used


def partial_gradients(program: Program) -> tuple[bool, list[str]]:
    """What the program must all-reduce after backward: (the stream's parameters — embeddings,
    LayerNorms — when the stream is data-parallel, the data-parallel linears' weights)."""
    return program["stream"] == DATA, [op for op in LINEARS if program[op] == DATA]
