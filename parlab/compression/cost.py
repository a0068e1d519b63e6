"""Closed forms for chapter 08: bytes per rank per step of every compressor, and the ratio to DDP.

A message of P bytes all-gathered over N ranks (ring) costs each rank (N-1)·P sent
(`parlab.core.cost.ring_all_gather` of N·P one-byte elements); an all-reduce of S float32 costs
2(N-1)/N·S·4 (`ring_all_reduce`, exact per chunk). Per tensor of n elements:

    top-k      P = k·(4 + 4), k = ⌈ratio·n⌉      (int32 index + float32 value; Lin et al. 2018)
    random-k   P = k·4                           (positions from a shared seed; Stich et al. 2018)
    qsgd       P = ⌈n·bits/8⌉ + 4                (packed sign+level codes, float32 norm; Alistarh 2017)
    signsgd    P = ⌈n/8⌉ + 4                     (packed sign bits, float32 scale; Karimireddy 2019)
    powersgd   all-reduce (n + m)·r floats per matrix, the vectors whole (Vogels et al. 2019)
    local-sgd  all-reduce Ψ floats after every H-th step and the last (Stich 2019); DiLoCo alike
    torch-powersgd  PyTorch's hook, per DDP bucket: before `start_iter` one all-reduce of the bucket;
               then three — the tensors `_should_compress` rejects whole, Σ n·r, Σ m·r
               (r = min(n, m, rank); compress iff (n + m)·r·min_compression_rate < n·m)

Each scheme registers its closed form as its `cost=` (`register(..., cost=TOPK)`): a
`CompressionCost` whose `step_bytes` is the formula above, so `bytes_per_step(scheme, ...)` looks
the scheme up in the registry instead of branching on its name, and a new compressor is one more
`Gathered(...)` beside its registration.

The all-gather grows with N while the all-reduce does not: top-k's ratio to DDP is
2/N·Ψ·4 / P per rank per step — sparsification pays most on few ranks (the survey's caveat,
Ouyang et al. 2020).
"""

from __future__ import annotations

import math

from parlab.compression.compressors import QSGD, RandomK, Sign, TopK
from parlab.compression.local_sgd import sync_steps
from parlab.compression.powersgd import factor_rank
from parlab.core import cost
from parlab.core.messages import Message, bytes_by
from parlab.engine.loop import build_model
from parlab.engine.prediction import Prediction

FLOAT_BYTES = 4


def as_messages(triples, n: int, dim: str = "dp", phase: str = "dp-grad-sync") -> list[Message]:
    """A compressor's (op, elements, bytes per element) triples as `Message`s over `n` ranks."""
    return [Message(dim, op, n, elements, element_bytes=width, phase=phase)
            for op, elements, width in triples]


class CompressionCost:
    """A scheme's closed form (`register(..., cost=)`): `step_bytes`, what rank `sender` sends in
    `step` of `steps`, by op; called with a configuration, the run's `Prediction`."""

    def step_bytes(self, shapes, n: int, sender: int = 0, step: int = 0, steps: int = 1,
                   **options) -> dict[str, int]:
        """{op: bytes} of `messages`, ring-counted for rank `sender` of `n`."""
        return bytes_by(as_messages(self.messages(shapes, n, **options), n), "op", rank=sender)

    def messages(self, shapes, n: int, **options) -> list[tuple[str, int, int]]:
        """(op, elements, bytes per element) of every collective one step issues, in order: what
        the planner's time model prices (`parlab.planner.costmodel`)."""
        raise NotImplementedError(f"{self.name}: no fixed per-step messages")

    def __call__(self, cfg) -> Prediction:
        shapes = [tuple(p.shape) for p in build_model(cfg).parameters()]
        return Prediction([sum(sum(self.step_bytes(shapes, cfg.world_size, rank, s, cfg.steps,
                                                   **cfg.options).values())
                               for s in range(cfg.steps)) for rank in range(cfg.world_size)],
                          f"parlab.compression.cost.{self.name}.step_bytes")


class Gathered(CompressionCost):
    """One ring all-gather of every rank's compressed message of P bytes (uint8 elements):
    (N-1)·P per rank. `make(options)`: the scheme's compressor, its options as registered."""

    def __init__(self, name: str, make):
        self.name, self.make = name, make

    def compressor(self, **options):
        return self.make(options)

    def payload_bytes(self, numels: list[int], **options) -> int:
        """P: bytes of one rank's message for the whole model."""
        encoder = self.compressor(**options)
        return sum(encoder.payload_bytes(n) for n in numels)

    def messages(self, shapes, n, **options):
        size = self.payload_bytes([math.prod(s) for s in shapes], **options)
        return [("all_gather", n * size, 1)]  # every rank's P bytes, uint8 elements


class PowerSGDCost(CompressionCost):
    """Two ring all-reduces of float32: Σ n·r (+ the vectors whole), then Σ m·r (`rank` r)."""

    name = "POWERSGD"

    def messages(self, shapes, n, **options):
        first, second = powersgd_elements(shapes, options.get("rank", 4))
        return [("all_reduce", first, FLOAT_BYTES), ("all_reduce", second, FLOAT_BYTES)]


class PeriodicAverage(CompressionCost):
    """One ring all-reduce of Ψ float32 after every `sync_every`-th step and the last."""

    name = "PERIODIC"

    def step_bytes(self, shapes, n, sender=0, step=0, steps=1, **options):
        if step in sync_steps(steps, options.get("sync_every", 4)):
            numel = sum(math.prod(s) for s in shapes)
            return {"all_reduce": FLOAT_BYTES * cost.ring_all_reduce(numel, n, sender)[0]}
        return {}


TOPK = Gathered("TOPK", lambda o: TopK(o.get("ratio", 0.01)))
RANDOMK = Gathered("RANDOMK", lambda o: RandomK(o.get("ratio", 0.01)))
QSGD_BITS = Gathered("QSGD_BITS", lambda o: QSGD(o.get("bits", 4)))
SIGN = Gathered("SIGN", lambda o: Sign())
POWERSGD = PowerSGDCost()
PERIODIC = PeriodicAverage()  # local-sgd and diloco


def cost_of(scheme: str):
    """The closed form `scheme` registered (`register(..., cost=)`); it has `step_bytes`."""
    from parlab.engine.registry import get_scheme

    form = get_scheme(scheme).cost
    if not hasattr(form, "step_bytes"):
        raise ValueError(f"scheme={scheme!r} registers no per-step closed form (a cost= with "
                         "step_bytes)")
    return form


def compressor(scheme: str, **options):
    """The compressor object of a gathered scheme, with its options (defaults as registered)."""
    form = cost_of(scheme)
    if not isinstance(form, Gathered):
        raise ValueError(f"scheme={scheme!r} sends no compressed message to all-gather")
    return form.compressor(**options)


def payload_bytes(scheme: str, numels: list[int], **options) -> int:
    """P: bytes of one rank's message for the whole model (a gathered scheme)."""
    form = cost_of(scheme)
    if not isinstance(form, Gathered):
        raise ValueError(f"scheme={scheme!r} sends no compressed message to all-gather")
    return form.payload_bytes(numels, **options)


def ddp_bytes(numels: list[int], n: int, sender: int = 0) -> int:
    """`ddp-naive`: one ring all-reduce per gradient tensor, float32, sent by rank `sender`."""
    return sum(cost.ring_all_reduce(s, n, sender)[0] for s in numels) * FLOAT_BYTES


def powersgd_elements(shapes, rank: int) -> tuple[int, int]:
    """Floats in PowerSGD's two all-reduces: (Σ n·r + Σ vectors, Σ m·r)."""
    first = second = 0
    for shape in shapes:
        r = factor_rank(shape, rank)
        numel = math.prod(shape)
        if r == 0:
            first += numel
        else:
            first += shape[0] * r
            second += numel // shape[0] * r
    return first, second


def torch_powersgd_elements(shapes, rank: int, min_compression_rate: float) -> tuple[int, int, int]:
    """Floats in the three all-reduces of PyTorch's `powerSGD_hook` for one bucket of gradients
    of `shapes`: (uncompressed, Σ n·r, Σ m·r), following its `_should_compress` rule (every tensor
    viewed as (shape[0], -1); a vector is (n, 1): r = 1, never worth it at a rate ≥ 1)."""
    whole = ps = qs = 0
    for shape in shapes:
        rows = shape[0] if shape else 1
        cols = math.prod(shape) // rows
        r = min(rows, cols, rank)
        if (rows + cols) * r * min_compression_rate < rows * cols:
            ps, qs = ps + rows * r, qs + cols * r
        else:
            whole += rows * cols
    return whole, ps, qs


def torch_powersgd_bytes(buckets, n: int, sender: int = 0, compressed: bool = True,
                         rank: int = 4, min_compression_rate: float = 2.0) -> int:
    """Bytes rank `sender` sends in one step of `torch-powersgd` (ring all-reduces, nominal):
    `buckets` is DDP's buckets as lists of gradient shapes; `compressed`: step ≥ start_iter."""
    if not compressed:
        sizes = [sum(math.prod(s) for s in bucket) for bucket in buckets]
    else:
        sizes = [x for bucket in buckets
                 for x in torch_powersgd_elements(bucket, rank, min_compression_rate)]
    return FLOAT_BYTES * sum(cost.ring_all_reduce(x, n, sender)[0] for x in sizes)


def bytes_per_step(scheme: str, shapes, n: int, sender: int = 0, step: int = 0, steps: int = 1,
                   **options) -> dict[str, int]:
    """{op: bytes rank `sender` sends in `step` of `steps`} — what the ledger must show: the
    scheme's registered closed form (`cost_of`). `shapes`: the parameters'; `options`: the
    scheme's (PowerSGD's `rank` is its factor rank)."""
    return cost_of(scheme).step_bytes(shapes, n, sender, step, steps, **options)


def total_bytes(scheme: str, shapes, n: int, steps: int, sender: int = 0, **options) -> int:
    """Bytes rank `sender` sends over `steps` steps."""
    return sum(sum(bytes_per_step(scheme, shapes, n, sender, s, steps, **options).values())
               for s in range(steps))


def compression_ratio(scheme: str, shapes, n: int, steps: int = 1, **options) -> float:
    """`ddp-naive`'s bytes over the scheme's, rank 0, over `steps` steps (inf when it sends none)."""
    sent = total_bytes(scheme, shapes, n, steps, **options)
    reference = steps * ddp_bytes([math.prod(s) for s in shapes], n)
    return reference / sent if sent else math.inf


# ----------------------------------------------------------------------------- lowdim (Kwon et al. 2024)
def dln_shapes(d: int, width: int, depth: int) -> list[tuple[int, int]]:
    """Parameter shapes of a depth-L deep linear network of width w on d×d matrices
    (`parlab.compression.lowdim.DeepLinear`): W_1 (w×d), L−2 × (w×w), W_L (d×w)."""
    return [(width, d)] + [(width, width)] * (depth - 2) + [(d, width)]


def dln_params(d: int, width: int, depth: int) -> int:
    """2·d·w + (L−2)·w²: L·d² for the original network (w = d), 2dr̂ + (L−2)r̂² compressed (w = r̂;
    Kwon et al., AISTATS 2024, the compressed DLN)."""
    return 2 * d * width + (depth - 2) * width * width


def lowdim_width(d: int, network: str, width: int | None, target_rank: int) -> int:
    """The width `lowdim` trains: d for the original network; r̂ (default 2r, the paper's) compressed."""
    if network == "original":
        return d
    return 2 * target_rank if width is None else width


class LowDimCost(CompressionCost):
    """`lowdim`: one ring all-reduce of the network's 2dw + (L−2)w² float32 gradients per step, or
    with `powersgd_rank` r PowerSGD's two all-reduces of its factors (`PowerSGDCost`) — the
    compressed model against the compressed gradient. The shapes are the DLN's, not `model=`'s."""

    name = "LOWDIM"

    def step_bytes(self, shapes, n, sender=0, step=0, steps=1, **options):
        if options.get("powersgd_rank") is not None:
            return POWERSGD.step_bytes(shapes, n, sender, rank=options["powersgd_rank"])
        numel = sum(math.prod(s) for s in shapes)
        return {"all_reduce": FLOAT_BYTES * cost.ring_all_reduce(numel, n, sender)[0]}

    def shapes(self, cfg) -> list[tuple[int, int]]:
        o = cfg.options
        width = lowdim_width(o["d"], o["network"], o["width"], o["target_rank"])
        return dln_shapes(o["d"], width, o["depth"])

    def __call__(self, cfg) -> Prediction:
        shapes = self.shapes(cfg)
        return Prediction([sum(sum(self.step_bytes(shapes, cfg.world_size, rank, s, cfg.steps,
                                                   **cfg.options).values())
                               for s in range(cfg.steps)) for rank in range(cfg.world_size)],
                          "parlab.compression.cost.LOWDIM.step_bytes")


LOWDIM = LowDimCost()
