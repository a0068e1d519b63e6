"""Real model shapes by name: `parlab.run(..., model="gpt2-xl", shapes_only=True, clock="A100")`.

A preset is the package's one GPT (`parlab.models.gpt`) at the shapes of a published model, run
shapes-only (`parlab.core.shapes`) on the virtual clock; `model_config=` overrides its fields.
Sources: GPT-2 (Radford et al., 2019, Table 2; small, medium, large, XL); Megatron-LM (Narayanan
et al., SC 2021, Table 1; 1.7B … 76.1B); Llama 3 8B (Meta, "The Llama 3 Herd of Models", 2024,
Table 3: grouped-query attention, SwiGLU, RMSNorm, rotary positions, an untied head;
8,030,261,248 parameters, the released 8.03B; schemes `LLAMA_SCHEMES`).

Simplification, stated (the GPT-2 and Megatron presets): no biases and a tied head (this
package's GPT), so a preset's parameter count is within 1% of the published one, not equal.
Every preset's shapes with their sources: docs/models.md, `parlab.models.presets`.
"""

from __future__ import annotations

GPT2 = {"vocab_size": 50257, "block_size": 1024}
MEGATRON = {"vocab_size": 51200, "block_size": 2048}

PRESETS: dict[str, dict] = {
    "gpt2": {**GPT2, "n_layer": 12, "n_head": 12, "n_embd": 768},
    "gpt2-medium": {**GPT2, "n_layer": 24, "n_head": 16, "n_embd": 1024},
    "gpt2-large": {**GPT2, "n_layer": 36, "n_head": 20, "n_embd": 1280},
    "gpt2-xl": {**GPT2, "n_layer": 48, "n_head": 25, "n_embd": 1600},
    "megatron-1.7b": {**MEGATRON, "n_layer": 24, "n_head": 24, "n_embd": 2304},
    "megatron-3.6b": {**MEGATRON, "n_layer": 30, "n_head": 32, "n_embd": 3072},
    "megatron-7.5b": {**MEGATRON, "n_layer": 36, "n_head": 32, "n_embd": 4096},
    "megatron-18.4b": {**MEGATRON, "n_layer": 40, "n_head": 48, "n_embd": 6144},
    "megatron-39.1b": {**MEGATRON, "n_layer": 48, "n_head": 64, "n_embd": 8192},
    "megatron-76.1b": {**MEGATRON, "n_layer": 60, "n_head": 80, "n_embd": 10240},
    "llama3-8b": {"vocab_size": 128256, "block_size": 8192, "n_layer": 32, "n_head": 32,
                  "n_embd": 4096, "n_kv_head": 8, "mlp": "swiglu", "d_ff": 14336,
                  "norm": "rmsnorm", "norm_eps": 1e-5, "positions": "rope",
                  "rope_theta": 500000.0, "tie_head": False},
}


def resolve(model: str, overrides: dict | None) -> tuple[str, dict | None, str | None]:
    """(model, model_config, preset) for `parlab.run`'s `model=`: a preset name becomes the GPT
    at the preset's shapes with `overrides` on top; any other name passes through unchanged."""
    if isinstance(model, str) and model in PRESETS:
        return "gpt", {**PRESETS[model], **(overrides or {})}, model
    return model, overrides, None
