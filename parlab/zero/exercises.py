"""Notebook 02's exercises (`parlab.exercises`): the largest model ZeRO-2's states let fit, how many GPUs a
70B model needs (Rajbhandari et al., SC 2020), the largest micro-batch of Llama 3 8B under ZeRO-3
with full recomputation (Korthikanti et al., MLSys 2023), ZeRO-3's bytes per step, the padding of
flat units, and ZeRO-2's bytes of a wider GPT than the chapter runs (predict, then the cell after
it measures); each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.core.cost import FP32_BYTES, round_up
from parlab.exercises import Exercise, find, numeric
from parlab.zero import real_scale
from parlab.zero.cost import step_bytes

WIDER = {"n_embd": 40}  # the exercises' GPT: not the chapter's, so no cell prints their answers


def _unit_numels(cfg=None) -> list[int]:
    from parlab.engine.loop import build_model
    from parlab.engine.runner import make_config
    from parlab.zero.shard import unit_modules

    cfg = cfg or make_config("zero3", world_size=3, steps=1, model_config=WIDER)
    return [sum(p.numel() for _, p in params) for _, _, params in unit_modules(build_model(cfg))]


def _padded_params_bytes(world: int) -> int:
    """ZeRO-3: bytes of the parameter shards one rank holds, every unit padded to a multiple of N."""
    return sum(round_up(u, world) // world for u in _unit_numels()) * FP32_BYTES


def _llama_microbatch() -> int:
    """Llama 3 8B, ZeRO-3 on N = 16 A100s of 80 GB, sequences of 8,192 tokens, full recomputation:
    the most sequences per GPU beside 16Ψ/N of model states."""
    free = 80e9 - 16 * real_scale.psi("llama3-8b") / 16
    return int(free // real_scale.activation_bytes("llama3-8b", 1, 8192, "full"))


def _zero3_comm_share(params: float = 7e9, n: int = 8, tokens: int = 8192) -> float:
    """ZeRO-3's three ring collectives of 2Ψ bytes over NVLink 3, over the step's 6Ψ·tokens FLOPs
    at the A100's sustained rate (the `zero3-bytes-gpu` exercise)."""
    comm_s = 3 * (n - 1) / n * 2 * params / 300e9
    return comm_s / (6 * params * tokens / 150e12)


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    return {"zero2-gpu": 32 / (2 + 14 / 64), "zero3-fit": 14,
            "zero3-bytes-gpu": _zero3_comm_share(), "zero3-padding": _padded_params_bytes(3),
            "zero2-bytes": step_bytes(2, _unit_numels(), 4), "llama-microbatch": _llama_microbatch()}


EXERCISES = [
    Exercise("zero2-gpu",
             "Mixed precision with Adam (K = 12) on N = 64 GPUs under ZeRO-2 (optimizer states "
             "and gradients sharded), with 32 GB per GPU left for model states once activations "
             "are counted. How many billion parameters can the model have at most?",
             numeric(32 / (2 + 14 / 64), rtol=0.01),
             "fp16 parameters stay whole (2Ψ); gradients (2Ψ) and the K = 12 bytes of Adam state "
             "are divided by N: mixed_precision_formula(2, Ψ, N).",
             "2Ψ + (2 + 12)Ψ/N ≤ 32 GB: Ψ ≤ 32 / (2 + 14/64) = 14.4 billion — the whole 16-bit "
             "copy of the parameters, 2Ψ, is what limits it (the paper's Figure 1: 7.5B takes "
             "16.6 GB)."),
    Exercise("zero3-fit",
             "A 70-billion-parameter model trains in mixed precision with Adam on 80 GB GPUs. "
             "Ignoring activations, what is the smallest number N of GPUs on which ZeRO-3's model "
             "states fit?",
             numeric(14, atol=0.5, rtol=0),
             "ZeRO-3 shards everything: 16Ψ/N bytes per GPU. Solve 16Ψ/N <= 80e9.",
             "16 · 70e9 / N <= 80e9  =>  N >= 14. (DDP would need 1.12 TB on every GPU.)",
             kind="design"),
    Exercise("llama-microbatch",
             "Llama 3 8B (the llama3-8b preset: 8,030,261,248 parameters, 32 layers, hidden size "
             "4,096) trains with ZeRO-3 in mixed precision with Adam on N = 16 A100s of 80 GB, "
             "sequences of 8,192 tokens, full activation recomputation (only each layer's 16-bit "
             "input is kept). What is the largest micro-batch (sequences per GPU) that fits? "
             "Ignore the embedding's and the logits' activations and every temporary buffer.",
             numeric(_llama_microbatch(), atol=0.5, rtol=0),
             "Model states 16Ψ/N; full recomputation keeps s·b·h·2 bytes per layer (Korthikanti "
             "et al., MLSys 2023, §4): divide what the states leave of 80 GB by one sequence's.",
             "States 16 · 8.03e9 / 16 = 8.03 GB; one sequence 32 · 8192 · 4096 · 2 B = 2.15 GB; "
             "⌊(80 − 8.03) / 2.15⌋ sequences.", kind="design"),
    Exercise("zero3-bytes-gpu",
             "ZeRO-3 on N = 8 A100s in one node (NVLink 3: 300 GB/s per direction; ring "
             "collectives, ignore α) for a 7-billion-parameter model whose parameters and "
             "gradients travel in bf16 (2 bytes); each GPU trains on 8,192 tokens per step at 150 "
             "TFLOP/s sustained, 6Ψ FLOPs per token. If none of its collectives overlapped the "
             "compute, what fraction of the step's compute time would they add? (A fraction.)",
             numeric(_zero3_comm_share(), rtol=0.02),
             "Two all-gathers of the parameters (before forward, before backward) and one "
             "reduce-scatter of the gradients, each (N-1)/N of the 2Ψ bytes.",
             "3 · (N-1)/N · 2Ψ = 3 · 7/8 · 14 GB = 36.75 GB per step (1.5× DDP's 24.5 GB), "
             "122.5 ms on NVLink 3, against 6 · 7e9 · 8,192 / 150e12 = 2.29 s of compute: 0.053 — "
             "on NVLink, ZeRO-3's extra bytes are cheap."),
    Exercise("zero3-padding",
             "The GPT with n_embd = 40 has flat units of 5,200 (root) and 19,360 (each of 4 "
             "blocks) parameters. How many bytes of parameters does one rank hold under ZeRO-3 at "
             "N = 3 (fp32)?",
             numeric(_padded_params_bytes(3), rtol=0, atol=0.5),
             "Each unit is padded with zeros to a multiple of N before it is cut into N equal "
             "chunks; a rank holds one chunk of every unit, 4 bytes per element.",
             "Σ ⌈u/N⌉ · 4 over the units, above the formula's 4Ψ/N by this rank's share of the "
             "padding."),
    Exercise("zero2-bytes",
             "Predict, then measure: how many bytes does one rank send per step under ZeRO-2 at "
             "N = 4 for the GPT with n_embd = 40 (units as above, fp32)? The cell after this one "
             "measures it: parlab.run('zero2', world_size=4, steps=1, model_config={'n_embd': 40}).",
             numeric(step_bytes(2, _unit_numels(), 4), rtol=0, atol=0.5),
             "A reduce-scatter of the gradients and an all-gather of the parameters, each "
             "(N-1)/N of the padded flat units, 4 bytes per element.",
             "2 · (N−1)/N · Σ (units padded to a multiple of N) · 4 B: what DDP's all-reduce sends.",
             kind="predict"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
