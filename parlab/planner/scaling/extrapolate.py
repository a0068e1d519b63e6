"""The same model on real hardware: A100/H100 clusters, GPT shapes from 1.7 B to 76 B parameters,
beside the configurations Narayanan et al. published (Megatron-LM, SC 2021, Table 1).

What changes from the CPU model (`costmodel`): compute is FLOPs ÷ the accelerator's sustained
rate (docs/accelerators.md) instead of a measured profile — the profile's line with zero
overhead; every tensor is bf16/fp16 (2 bytes); tp lives inside a node of 8 (NVLink), pp and dp
cross nodes (InfiniBand); activation recomputation is on, as in Megatron's runs. What stays: the
same messages per dimension (tp 2 all-reduces forward, 2 backward and 2 recomputed per layer,
Shoeybi et al. 2019 §3; pp one activation and one gradient per micro-batch and boundary; dp one
gradient all-reduce), the ring α-β times (`parlab.core.cost`), the 1F1B slots m + p − 1
(Narayanan et al. 2021 §2.2.1) and its in-flight micro-batches, ZeRO paper's 16Ψ bytes of
mixed-precision Adam state (`parlab.zero.cost.mixed_precision_formula`), and Korthikanti et al.
(MLSys 2023, Table 2) for the activations of the one layer being recomputed.

FLOPs per iteration are Megatron's own count (Narayanan et al. 2021, eq. 3, with recomputation):
96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)); achieved TFLOP/s per GPU = that ÷ (step · GPUs), the
number their Table 1 reports, so the two columns compare like for like.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from parlab.core import cost as core_cost
from parlab.core.link import ACCELERATORS, REAL
from parlab.pipeline.cost import in_flight_peak
from parlab.zero.cost import mixed_precision_formula

BYTES = 2  # bf16 / fp16 activations and gradients


@dataclass(frozen=True)
class Hardware:
    """One cluster: sustained FLOP/s per GPU, GPUs per node, (α, β) inside and between nodes,
    memory per GPU."""

    name: str
    flops: float
    gpus_per_node: int
    intra: tuple  # NVLink (α s, β bytes/s per direction)
    inter: tuple  # InfiniBand per GPU
    memory: float  # bytes


def _hardware(name: str) -> Hardware:
    """A DGX node of 8 `name`s, every number from `parlab.core.link` (docs/accelerators.md): the
    accelerator's sustained rate, its own NVLink inside the node, its cluster's InfiniBand per GPU
    between nodes, its memory."""
    acc = ACCELERATORS[name]
    return Hardware(name, acc.flops, 8, REAL[acc.nvlink], REAL[acc.inter], acc.memory_bytes)


HARDWARE = {
    # DGX A100 (Narayanan et al. 2021 §5.1): NVLink 3, 300 GB/s per direction, and 8 × 200 Gb/s
    # HDR InfiniBand per node, 25 GB/s per GPU; 80 GB.
    "A100": _hardware("A100"),
    # DGX H100: NVLink 4, 450 GB/s per direction, 8 × 400 Gb/s NDR InfiniBand; 80 GB.
    "H100": _hardware("H100"),
}


@dataclass(frozen=True)
class Shape:
    """A GPT: layers, hidden size, heads, sequence length, vocabulary (Megatron's 51,200)."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq: int = 2048
    vocab: int = 51200

    @property
    def params(self) -> float:
        """12·l·h²(1 + 13/(12h) + (V + s)/(12·l·h)) (Narayanan et al. 2021, §5.1)."""
        L, h = self.layers, self.hidden
        return 12 * L * h * h * (1 + 13 / (12 * h) + (self.vocab + self.seq) / (12 * L * h))


# Narayanan et al., SC 2021, Table 1 (weak scaling, 1.7 B – 76 B rows): the shape, the GPUs, the
# global batch, their tensor and pipeline degrees, and the TFLOP/s per A100 they measured.
MEGATRON = [
    (Shape("1.7B", 24, 2304, 24), 32, 512, 1, 1, 137),
    (Shape("3.6B", 30, 3072, 32), 64, 512, 2, 1, 138),
    (Shape("7.5B", 36, 4096, 32), 128, 512, 4, 1, 142),
    (Shape("18.4B", 40, 6144, 48), 256, 1024, 8, 1, 135),
    (Shape("39.1B", 48, 8192, 64), 512, 1536, 8, 2, 138),
    (Shape("76.1B", 60, 10240, 80), 1024, 1792, 8, 4, 140),
]


@dataclass(frozen=True)
class HwPlan:
    tp: int
    pp: int
    dp: int
    micro: int  # sequences per micro-batch

    def describe(self) -> str:
        return f"tp{self.tp}·pp{self.pp}·dp{self.dp} b{self.micro}"


def iteration_flops(shape: Shape, batch: int) -> float:
    """Megatron's FLOPs per iteration with recomputation (Narayanan et al. 2021, eq. 3)."""
    L, h, s, V = shape.layers, shape.hidden, shape.seq, shape.vocab
    return 96 * batch * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


def _ring(nbytes: float, n: int, link: tuple) -> float:
    return core_cost.all_reduce_time(nbytes, n, *link) if n > 1 else 0.0


def predict(shape: Shape, hw: Hardware, plan: HwPlan, batch: int) -> dict:
    """Step seconds, achieved TFLOP/s per GPU, peak memory per GPU and the exposed-communication
    fraction (MAD-Max, Hsia et al. ISCA 2024) of one plan."""
    L, h, s = shape.layers, shape.hidden, shape.seq
    m = batch // (plan.dp * plan.micro)  # micro-batches per pipeline
    layers = -(-L // plan.pp)
    tokens = plan.micro * s
    per_layer = 24 * tokens * h * h * (1 + s / (6 * h)) / plan.tp  # forward FLOPs
    head = 2 * tokens * h * shape.vocab / plan.tp
    compute = (4 * (layers * per_layer) + 3 * head) / hw.flops  # fwd + recompute + 2× bwd
    act = tokens * h * BYTES  # (b, s, h) bf16
    intra = hw.intra if plan.tp <= hw.gpus_per_node else hw.inter
    tp_comm = 6 * layers * _ring(act, plan.tp, intra)  # 2 fwd + 2 recompute + 2 bwd
    pp_comm = 2 * (hw.inter[0] + act / hw.inter[1]) if plan.pp > 1 else 0.0
    slot = compute + tp_comm + pp_comm
    slots = m + plan.pp - 1
    grads = BYTES * shape.params / (plan.tp * plan.pp)
    dp_comm = _ring(grads, plan.dp, hw.inter)
    step = slots * slot + dp_comm
    states = sum(mixed_precision_formula(0, shape.params / (plan.tp * plan.pp), 1).values())
    a = shape.heads
    one_layer = s * plan.micro * h * (10 + 24 / plan.tp + 5 * a * s / (h * plan.tp))  # Korthikanti
    in_flight = in_flight_peak("1f1b", plan.pp, m, 0) if plan.pp > 1 else 1
    acts = in_flight * layers * act + one_layer
    exposed = slots * (tp_comm + pp_comm) + dp_comm
    gpus = plan.tp * plan.pp * plan.dp
    return {"step_s": step, "tflops": iteration_flops(shape, batch) / step / gpus / 1e12,
            "memory": states + acts, "exposed_fraction": exposed / step,
            "bubble": (plan.pp - 1) / slots}


def plans(shape: Shape, gpus: int, batch: int, hw: Hardware, micro=(1, 2, 4, 8)) -> list[HwPlan]:
    """Every tp (within a node) × pp (dividing the layers) × dp = GPUs/(tp·pp) × micro-batch size
    dividing the batch."""
    out = []
    for tp, b in itertools.product([t for t in (1, 2, 4, 8) if t <= hw.gpus_per_node], micro):
        for pp in range(1, shape.layers + 1):
            if shape.layers % pp or gpus % (tp * pp) or shape.heads % tp:
                continue
            dp = gpus // (tp * pp)
            if batch % (dp * b):
                continue
            out.append(HwPlan(tp, pp, dp, b))
    return out


def best(shape: Shape, gpus: int, batch: int, hw: Hardware) -> tuple:
    """(plan, prediction) fastest under the GPU's memory; (None, None) when nothing fits."""
    scored = [(p, predict(shape, hw, p, batch)) for p in plans(shape, gpus, batch, hw)]
    fits = [x for x in scored if x[1]["memory"] <= hw.memory]
    return min(fits, key=lambda x: x[1]["step_s"]) if fits else (None, None)


def megatron_table(hw_name: str = "A100") -> list[dict]:
    """One row per Table 1 shape: Megatron's (tp, pp) and measured TFLOP/s beside this model's
    prediction for that very plan (micro-batch 1) and this model's own pick, with the verdict."""
    if hw_name not in HARDWARE:
        raise ValueError(f"hw_name={hw_name!r} is unknown; choose one of {sorted(HARDWARE)}")
    hw = HARDWARE[hw_name]
    rows = []
    for shape, gpus, batch, tp, pp, published in MEGATRON:
        theirs = HwPlan(tp, pp, gpus // (tp * pp), 1)
        pred = predict(shape, hw, theirs, batch)
        pick, pick_pred = best(shape, gpus, batch, hw)
        same = pick is not None and (pick.tp, pick.pp) == (tp, pp)
        error = (pred["tflops"] - published) / published
        rows.append({"model": shape.name, "params_B": round(shape.params / 1e9, 1), "GPUs": gpus,
                     "batch": batch, "megatron": f"tp{tp}·pp{pp}", "published_TFLOPs": published,
                     "predicted_TFLOPs": round(pred["tflops"], 1),
                     "memory_GB": round(pred["memory"] / 1e9, 1),
                     "exposed": round(pred["exposed_fraction"], 3),
                     "our_pick": pick.describe() if pick else "nothing fits",
                     "pick_TFLOPs": round(pick_pred["tflops"], 1) if pick else float("nan"),
                     "verdict": verdict(same, error if hw_name == "A100" else None, pick,
                                        theirs)})
    return rows


def verdict(same: bool, error: float | None, pick, theirs) -> str:
    """Plain words: does the pick agree with Megatron, and how far is the predicted rate from the
    published one, judged against 25% (`error` None: another GPU than Table 1's A100, the rates do
    not compare)?"""
    rate = ("Table 1 measured A100s: rates not comparable" if error is None else
            f"rate {error:+.1%} ({'within' if abs(error) <= 0.25 else 'off by more than'} 25%)")
    if same:
        return f"agrees (same tp, pp); {rate}"
    if pick is None:
        return f"disagrees: nothing fits in memory by this model; {rate}"
    why = ("less tensor parallelism: our model charges tp's all-reduces more than a pipeline bubble"
           if pick.tp < theirs.tp else
           "more tensor parallelism than Megatron" if pick.tp > theirs.tp else
           "a different pipeline depth")
    return f"disagrees ({why}); {rate}"
