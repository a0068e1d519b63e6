"""The time model of a HAP program (Zhang et al., "HAP: SPMD DNN Training on Heterogeneous GPU
Clusters with Automated Program Synthesis", EuroSys 2024, §5: a program's cost from each device's
computation and communication): what `parlab.heterogeneous.program_search` adds up.

Compute: the paced clock's own price, counted at two share sizes, so a rank holding u units
computes a(u)/s_r, affine in u (`Profile`, `profile`). Communication: each resharding step's
busiest sender, k·α + bytes/β with `parlab.heterogeneous.cost.hap_step_bytes` (`steps_seconds`),
plus the partial gradients' all-reduce (`sync_seconds`). `step_seconds`: a step as the run keeps
time (ranks wait only at collectives), sharper than HAP's per-operator max. In full:
docs/heterogeneous.md, `parlab.heterogeneous.hap_time`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from parlab.core import clock as clocks
from parlab.core import cost as core_cost
from parlab.core.clock import Work
from parlab.core.pacer import count_work
from parlab.heterogeneous import cost
from parlab.heterogeneous import programs as pg
from parlab.models.gpt import multi_head, split_qkv
from parlab.models.gpt_trunk import tied_head

PHASES = ("fwd", "bwd", "opt")


# ----------------------------------------------------------------------------- the compute model
def _units_full(op: str, choice: str, m, batch: int) -> int:
    dim = pg.units_dimension(op, choice)
    if op == "stream" and choice == pg.REPLICATE:
        return batch
    return {"heads": m.n_head, "columns": 4 * m.n_embd, "rows": batch, None: 1}[dim]


def _harness(op: str, choice: str, u: int, m, batch: int):
    """(forward closure -> outputs, parameters) of one operator on a share of u units, at random
    values (the meter counts operators and FLOPs; the values do not matter)."""
    C, T, hs = m.n_embd, m.block_size, m.head_dim
    dim = pg.units_dimension(op, choice)
    rows = u if dim == "rows" or (op == "stream" and choice == pg.REPLICATE) else batch
    if op == "stream":
        ln_1, ln_2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        x, a, b = (torch.randn(rows, T, C, requires_grad=True) for _ in range(3))

        def block():
            h1 = ln_1(x)
            x2 = x + a  # (rows, T, C) the residuals
            return h1, ln_2(x2), x2 + b
        return block, [*ln_1.parameters(), *ln_2.parameters()]
    if op in pg.LINEARS:
        (w_in, w_out), unit = pg.WIDTHS[op], lambda w: 1 if w == 4 else hs * (3 if w == 3 else 1)
        d_in = u * unit(w_in) if choice == pg.ROWS else w_in * C
        d_out = u * unit(w_out) if choice == pg.COLUMNS else w_out * C
        weight = torch.nn.Parameter(torch.randn(d_out, d_in))
        x = torch.randn(rows, T, d_in, requires_grad=True)
        return (lambda: (F.linear(x, weight),)), [weight]
    if op == "core":
        heads = u if choice == pg.COLUMNS else m.n_head
        qkv = torch.randn(rows, T, 3 * heads * hs, requires_grad=True)
        return (lambda: (multi_head(*split_qkv(qkv), hs),)), []
    width = u if choice == pg.COLUMNS else 4 * C  # gelu
    x = torch.randn(rows, T, width, requires_grad=True)
    return (lambda: (F.gelu(x),)), []


def _ends_harness(rows: int, m, batch: int):
    """Embedding, final LayerNorm, tied head and summed cross-entropy on `rows` rows: once a step."""
    wte, wpe = torch.nn.Embedding(m.vocab_size, m.n_embd), torch.nn.Embedding(m.block_size, m.n_embd)
    ln_f = torch.nn.LayerNorm(m.n_embd)
    idx = torch.randint(0, m.vocab_size, (rows, m.block_size))

    def run():
        x = wte(idx) + wpe(torch.arange(m.block_size))  # (rows, T, C)
        logits = tied_head(ln_f, wte, x)  # (rows, T, V)
        return (F.cross_entropy(logits.reshape(-1, m.vocab_size), idx.reshape(-1), reduction="sum")
                / (batch * m.block_size),)
    return run, [*wte.parameters(), *wpe.parameters(), *ln_f.parameters()]


def _count(run, params, optimizer_cfg) -> dict[str, Work]:
    """The `Work` of forward, backward and the second AdamW step (the first creates the state)."""
    from parlab.engine.loop import make_optimizer

    holder = {}
    work = {"fwd": count_work(lambda: holder.update(out=run()))}
    outs = holder["out"]
    grads = [torch.ones_like(o) for o in outs]
    work["bwd"] = count_work(lambda: torch.autograd.backward(list(outs), grads))
    work["opt"] = Work()
    if params:
        optimizer = make_optimizer(params, optimizer_cfg)
        optimizer.step()
        work["opt"] = count_work(optimizer.step)
    return work


@dataclass
class Profile:
    """Each operator choice's accelerator seconds at speed 1 as a function of its units u, by phase:
    seconds(u) = a + b·u (FLOPs and bytes affine in u, operator count fixed), the line through the
    counts at `count_points` (u = half and all of the operator's units)."""

    clock: object
    affine: dict = field(default_factory=dict)  # (op, choice, phase) -> (a, b)
    full: dict = field(default_factory=dict)  # (op, choice) -> units of the whole operator

    def seconds(self, op: str, choice: str, phase: str, units: float) -> float:
        a, b = self.affine[(op, choice, phase)]
        return a + b * units


def profile(cfg) -> Profile:
    """The compute model of `cfg`'s model on `cfg`'s clock (the A100 one on the wall clock); the
    operator and FLOP counts are cached per model, the pricing is the clock's."""
    key = (cfg.model, repr(cfg.model_config), cfg.batch_size, cfg.optimizer, cfg.lr)
    if key not in _COUNTS:
        _COUNTS[key] = _count_all(cfg)
    clock, counts = model_clock(cfg), _COUNTS[key]
    out = Profile(clock, full=dict(counts["full"]))
    for (op, choice, phase), (lo, hi) in counts["work"].items():
        u_lo, u_hi = count_points(out.full[(op, choice)])
        s_lo, s_hi = (sum(weight * clock.price(work) for work, weight in terms) for terms in (lo, hi))
        slope = (s_hi - s_lo) / (u_hi - u_lo)  # per unit
        out.affine[(op, choice, phase)] = (s_hi - u_hi * slope, slope)
    return out


def count_points(full: int) -> tuple[int, int]:
    """The two shares an operator is counted at: half and all of its `full` units (at least 1 and
    2). A kernel's roofline price is affine in u on either side of its ridge point, so the line is
    exact for every share on the side these two are on: at a real width a slow rank's share of
    heads, columns or 1024-token rows keeps its matmuls compute-bound, as a half and a whole do
    (counting at 2 and 3 hidden columns of 6400 would price them memory-bound)."""
    hi = max(full, 2)
    return max(1, hi // 2), hi


_COUNTS: dict = {}


def model_clock(cfg):
    """The clock the model prices compute on: the run's if paced, else A100's (relative costs only)."""
    return cfg.clock if cfg.clock.paced else clocks.resolve("A100", cfg.world_size)


def _count_all(cfg) -> dict:
    """The counted work of every operator choice and phase at its two `count_points`, each a list
    of (Work, weight) terms: its price is Σ weight · Clock.price(Work). Counted on fake tensors
    (`parlab.core.shapes`: the same operators, FLOPs and bytes, no numbers), so a real width costs
    this machine no arithmetic."""
    from parlab.core.shapes import shapes

    with shapes():
        return _count_fake(cfg)


def _count_fake(cfg) -> dict:
    m, batch = cfg.model_config, cfg.batch_size
    full, work = {}, {}
    for op in pg.OPS:
        for choice in pg.CHOICES[op]:
            full[(op, choice)] = _units_full(op, choice, m, batch)
            points = count_points(full[(op, choice)])
            counted = {}
            for u in points:
                counted[u] = {k: [(v, 1.0)] for k, v in
                              _count(*_harness(op, choice, u, m, batch), cfg).items()}
                if op == "stream":  # the embedding and head, once a step, on the stream's rows
                    ends = _count(*_ends_harness(u, m, batch), cfg)
                    counted[u] = {k: v + [(ends[k], 1.0 / m.n_layer)]
                                  for k, v in counted[u].items()}
            for phase in PHASES:
                work[(op, choice, phase)] = tuple(counted[u][phase] for u in points)
    return {"full": full, "work": work}


# ----------------------------------------------------------------------------- a program's parts
def units_of(op: str, choice: str, split: dict, prof: Profile) -> list[int]:
    dim = pg.units_dimension(op, choice)
    n = len(split["rows"])
    return list(split[dim]) if dim is not None else [prof.full[(op, choice)]] * n


def op_cost(op: str, choice: str, split: dict, speeds, prof: Profile, layers: int) -> float:
    """Σ_phase max_r seconds of this operator choice on rank r, over every block (the stream's
    share of the embedding and head is counted per block: L of them make one)."""
    units = units_of(op, choice, split, prof)
    return layers * sum(max(prof.seconds(op, choice, ph, u) / s for u, s in zip(units, speeds))
                        for ph in PHASES)


def steps_seconds(steps, width: int, cfg, split: dict) -> float:
    """Seconds of resharding steps on the run's link: each step's busiest sender, k·α + bytes/β."""
    link, n = cost.all_reduce_link(cfg), cfg.world_size
    if link is None or n == 1:
        return 0.0
    total = 0.0
    for step in steps:
        kind, layout = pg.step_kind(step)
        if kind == "slice":
            continue
        busiest = max(cost.hap_step_bytes(kind, layout, width, cfg.model_config, cfg.batch_size,
                                          split, n, r) for r in range(n))
        total += link.cost(busiest, 2 * (n - 1) if kind == "all_reduce" else n - 1)
    return total


def sync_seconds(program: pg.Program, cfg) -> float:
    """The flat all-reduce of the partial gradients on the run's link (0 if none)."""
    link, n = cost.all_reduce_link(cfg), cfg.world_size
    numel = cost.hap_sync_numel(cfg.model_config, program)
    if link is None or n == 1 or numel == 0:
        return 0.0
    busiest = max(core_cost.ring_all_reduce(numel, n, r)[0] for r in range(n)) * core_cost.FP32_BYTES
    return link.cost(busiest, 2 * (n - 1))


# ----------------------------------------------------------------------------- the sharper model
def step_seconds(cfg, program: pg.Program, split: dict) -> float:
    """A step of `program` as the run keeps time: each rank computes its operators in order and
    waits only at a collective, so a step is Σ over the stretches between collectives (cyclic: the
    optimizer runs into the next forward) of the slowest rank's compute, plus the collectives."""
    prof, speeds, layers = profile(cfg), cost.speeds_of(cfg), cfg.model_config.n_layer
    n = cfg.world_size

    def compute(op, phase):
        units = units_of(op, program[op], split, prof)
        return [prof.seconds(op, program[op], phase, u) / s for u, s in zip(units, speeds)]

    by = {e.name: e for e in pg.edges(program)}
    order = ("stream", "ln_1", "c_attn", "qkv", "core", "heads", "attn_proj", "attn_out", "ln_2",
             "c_fc", "hidden", "gelu", "act", "mlp_proj", "mlp_out")
    items = []  # ("c", per-rank seconds) or ("m", seconds)
    for phase, names in (("fwd", order), ("bwd", order[::-1])):
        for _ in range(layers):
            for name in names:
                if name in by:
                    e = by[name]
                    steps = e.forward if phase == "fwd" else e.backward
                    if pg.communicates(steps):
                        items.append(("m", steps_seconds(steps, e.width, cfg, split)))
                else:
                    items.append(("c", compute(name, phase)))
    if n > 1 and cost.hap_sync_numel(cfg.model_config, program):
        items.append(("m", sync_seconds(program, cfg)))
    items.append(("c", [layers * sum(x) for x in zip(*(compute(op, "opt") for op in pg.OPS))]))
    comm = sum(v for kind, v in items if kind == "m")
    if not any(kind == "m" for kind, _ in items):
        return max(sum(col) for col in zip(*(v for kind, v in items if kind == "c")))
    first = next(i for i, (kind, _) in enumerate(items) if kind == "m")
    rotated = items[first:] + items[:first]  # start at a collective: stretches are cyclic
    total, open_ = comm, [0.0] * n
    for kind, v in rotated + [("m", 0.0)]:
        if kind == "m":
            total += max(open_)
            open_ = [0.0] * n
        else:
            open_ = [a + b for a, b in zip(open_, v)]
    return total
