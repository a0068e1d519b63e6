"""LLM inference priced by the roofline: prefill vs decode, the KV cache, batching, TP decode.

Pope et al., "Efficiently Scaling Transformer Inference" (MLSys 2023): a forward step costs
2·params FLOPs per token (+ attention 4·L·d per token per layer) and reads every weight once per
step, so prefill (P·B tokens per weight read) is compute-bound and decode (B tokens) memory-bound
until B passes the ridge point F/HBM. The KV cache holds 2·n_layer·n_kv_head·head_dim values per
token. Continuous batching: Yu et al., "Orca" (OSDI 2022), iteration-level scheduling; Kwon et
al., "Efficient Memory Management for LLM Serving with PagedAttention" (SOSP 2023).
Each kernel family is priced as `Clock.price` prices a kernel, per layer: launch + max(FLOPs/F,
bytes/HBM) (`parlab.core.link.ACCELERATORS`: sustained F, datasheet HBM). Simplifications,
named: a closed form (no norms, softmax, residual adds: the tests hold its FLOPs equal to the
shapes-only GPT's matmul FLOPs); bf16 everywhere; attention over the full L×L (no causal halving,
as the package's GPT computes it); prefill's head over every prompt token; TP splits heads ideally
(no divisibility), its all-reduces a ring priced α-β on NVLink (`parlab.core.link.REAL`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from parlab.core.link import ACCELERATORS, REAL, nvlink_for
from parlab.models.presets import PRESETS

BYTES = 2  # bf16
FAMILIES = ("qkv", "out", "mlp", "attention", "head")


@dataclass(frozen=True)
class Shape:
    """A model's shapes as inference sees them (from `parlab.models.presets`)."""

    name: str
    n_layer: int
    d: int
    n_head: int
    n_kv_head: int
    d_ff: int
    vocab: int
    gated: bool  # SwiGLU: three d×d_ff matrices, else two
    block: int = 1024  # the longest context the model was trained for

    @property
    def head_dim(self) -> int:
        return self.d // self.n_head

    @property
    def kv_width(self) -> int:
        return self.n_kv_head * self.head_dim


def shape(preset: str) -> Shape:
    """The preset's shapes; ValueError naming an unknown preset."""
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError(f"preset={preset!r} must be one of {sorted(PRESETS)}")
    p = PRESETS[preset]
    return Shape(preset, p["n_layer"], p["n_embd"], p["n_head"], p.get("n_kv_head", p["n_head"]),
                 p.get("d_ff", 4 * p["n_embd"]), p["vocab_size"], p.get("mlp") == "swiglu",
                 p["block_size"])


def accelerator(name: str):
    if name not in ACCELERATORS or ACCELERATORS[name].hbm_Bps is None:
        raise ValueError(f"accelerator={name!r} must be one of {sorted(ACCELERATORS)}")
    return ACCELERATORS[name]


def ridge(name: str = "A100") -> float:
    """The machine's ridge point F/HBM (FLOP per byte) at the clock's sustained F."""
    acc = accelerator(name)
    return acc.flops / acc.hbm_Bps


def _positive(**values) -> None:
    for key, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{key}={v!r} must be an int >= 1")


def kv_bytes_per_token(s: Shape, nbytes: int = BYTES) -> int:
    """K and V of every layer for one token: 2·n_layer·n_kv_head·head_dim·bytes (Pope et al. §2)."""
    return 2 * s.n_layer * s.n_kv_head * s.head_dim * nbytes


def kv_bytes(s: Shape, batch: int, context: int, nbytes: int = BYTES) -> int:
    """The KV cache of `batch` sequences of `context` tokens."""
    _positive(batch=batch, context=context)
    return kv_bytes_per_token(s, nbytes) * batch * context


def layer_params(s: Shape) -> dict:
    """Weights per layer by family, and the head's (vocab·d)."""
    return {"qkv": s.d * (s.d + 2 * s.kv_width), "out": s.d * s.d,
            "mlp": (3 if s.gated else 2) * s.d * s.d_ff, "head": s.vocab * s.d}


def weight_bytes(s: Shape, nbytes: int = BYTES) -> int:
    """Weights read per step: the layers' matrices and the head (embeddings: a lookup, not read)."""
    p = layer_params(s)
    return (s.n_layer * (p["qkv"] + p["out"] + p["mlp"]) + p["head"]) * nbytes


def max_tokens(s: Shape, memory_bytes: float = 80e9) -> int:
    """Batch × context (tokens) whose KV cache fits in `memory_bytes` beside the weights."""
    free = memory_bytes - weight_bytes(s)
    if free <= 0:
        raise ValueError(f"memory_bytes={memory_bytes!r} does not hold the {s.name} weights")
    return int(free // kv_bytes_per_token(s))


def kernels(s: Shape, batch: int, tokens: int, context: int, tp: int = 1) -> dict:
    """{family: (kernels, FLOPs per kernel, bytes per kernel)} of one forward step that feeds
    `tokens` new tokens to each of `batch` sequences attending over `context` tokens (prefill:
    tokens = context = P; decode: tokens = 1, context = L), on one of `tp` tensor-parallel ranks."""
    _positive(batch=batch, tokens=tokens, context=context, tp=tp)
    n, d, b, p = batch * tokens, s.d, BYTES, layer_params(s)
    ff = (2 if s.gated else 1) * s.d_ff
    fam = {  # FLOPs 2·n·params; bytes = weights + activations in and out (Pope et al. §2)
        "qkv": (2 * n * p["qkv"], (p["qkv"] + n * (2 * d + 2 * s.kv_width)) * b),
        "out": (2 * n * p["out"], (p["out"] + 2 * n * d) * b),
        "mlp": (2 * n * p["mlp"], (p["mlp"] + n * (2 * d + ff)) * b),
        # q·Kᵀ and A·V: 2·n·L·d each; reads the KV cache (batch·context tokens) and q, writes y
        "attention": (4 * n * context * d,
                      (2 * batch * context * s.kv_width + 2 * n * d) * b),
    }
    out = {k: (s.n_layer, f / tp, by / tp) for k, (f, by) in fam.items()}
    out["head"] = (1, 2 * n * p["head"] / tp, (p["head"] + n * (d + s.vocab)) * b / tp)
    return out


def price(s: Shape, batch: int, tokens: int, context: int, acc: str = "A100",
          tp: int = 1) -> dict:
    """Per family: FLOPs, bytes, intensity, seconds (launch + max(F/R, B/HBM) per kernel, as
    `Clock.price`) and the bound that wins; "total" the step's (+ TP's all-reduces)."""
    a = accelerator(acc)
    rows = {}
    for fam, (k, f, by) in kernels(s, batch, tokens, context, tp).items():
        compute, memory = f / a.flops, by / a.hbm_Bps
        rows[fam] = {"flops": k * f, "bytes": k * by, "intensity": f / by,
                     "seconds": k * (a.launch_s + max(compute, memory)),
                     "bound": "compute" if compute >= memory else "memory"}
    comm = tp_allreduce_s(s, batch * tokens, tp, acc)
    total = {key: sum(r[key] for r in rows.values()) for key in ("flops", "bytes", "seconds")}
    total["seconds"] += comm
    total.update(comm_s=comm, intensity=total["flops"] / total["bytes"])
    total["bound"] = "compute" if total["intensity"] >= ridge(acc) else "memory"
    rows["total"] = total
    return rows


def prefill(s: Shape, prompt: int, batch: int = 1, acc: str = "A100", tp: int = 1) -> dict:
    return price(s, batch, prompt, prompt, acc, tp)


def decode(s: Shape, context: int, batch: int = 1, acc: str = "A100", tp: int = 1) -> dict:
    return price(s, batch, 1, context, acc, tp)


def tp_allreduce_s(s: Shape, tokens: int, tp: int, acc: str = "A100") -> float:
    """Megatron TP's 2 all-reduces per layer of tokens·d bf16 values, each a ring:
    2(tp-1)·α + 2(tp-1)/tp · bytes/β (Patarasuk & Yuan 2009) on the accelerator's NVLink."""
    _positive(tokens=tokens, tp=tp)
    if tp == 1:
        return 0.0
    alpha, beta = REAL[nvlink_for("NVLink", accelerator(acc))]
    one = 2 * (tp - 1) * alpha + 2 * (tp - 1) / tp * tokens * s.d * BYTES / beta
    return 2 * s.n_layer * one


def requests(n: int = 32, seed: int = 0, low: int = 16, high: int = 256) -> list[int]:
    """A seeded list of `n` output lengths drawn uniformly from [low, high]."""
    _positive(n=n, low=low, high=high)
    if high < low:
        raise ValueError(f"high={high!r} must be >= low={low!r}")
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(n)]


def _check_lengths(lengths) -> None:
    if not lengths or any(not isinstance(x, int) or x < 1 for x in lengths):
        raise ValueError(f"lengths={lengths!r} must be a non-empty list of ints >= 1")


def static_batching(s: Shape, lengths: list[int], slots: int, context: int,
                    acc: str = "A100") -> dict:
    """Batches of `slots` requests in order; each runs until its longest member ends, every
    iteration at the batch's full size (finished sequences keep their slot)."""
    _check_lengths(lengths)
    _positive(slots=slots, context=context)
    seconds, iterations = 0.0, 0
    for i in range(0, len(lengths), slots):
        group = lengths[i:i + slots]
        step = decode(s, context, len(group), acc)["total"]["seconds"]
        seconds += max(group) * step
        iterations += max(group)
    return _result(lengths, seconds, iterations)


def continuous_batching(s: Shape, lengths: list[int], slots: int, context: int,
                        acc: str = "A100") -> dict:
    """Orca's iteration-level scheduling: a slot is refilled from the queue as soon as its
    sequence ends; each iteration priced by decode at the running batch. Simplification: every
    sequence's KV read priced at `context` tokens; prefill of the admitted request not priced."""
    _check_lengths(lengths)
    _positive(slots=slots, context=context)
    queue, running = list(lengths), []
    seconds, iterations, steps = 0.0, 0, {}
    while queue or running:
        while queue and len(running) < slots:
            running.append(queue.pop(0))
        b = len(running)
        if b not in steps:
            steps[b] = decode(s, context, b, acc)["total"]["seconds"]
        seconds += steps[b]
        iterations += 1
        running = [r - 1 for r in running if r > 1]
    return _result(lengths, seconds, iterations)


def _result(lengths, seconds, iterations) -> dict:
    tokens = sum(lengths)
    return {"tokens": tokens, "seconds": seconds, "iterations": iterations,
            "tokens_per_s": tokens / seconds}
