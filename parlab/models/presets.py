"""Real model shapes by name: `parlab.run(..., model="gpt2-xl", shapes_only=True, clock="A100")`.

A preset is the package's one GPT (`parlab.models.gpt`: nanoGPT's blocks, no biases, a head tied
to the token embedding) at the shapes of a published model, so every scheme that trains the tiny
GPT runs a real model's shapes through the same code. A laptop cannot compute a 1.5B-parameter
model, but it can run it shapes-only (`parlab.core.shapes`) on its virtual clock; the tiny GPT
stays the default for everything that needs numbers. `model_config=` overrides a preset's fields
(e.g. `{"n_layer": 4}`); the run's `model` is then "gpt" at those shapes (`RunConfig.preset` keeps
the name).

Sources:
- GPT-2 (Radford et al., "Language Models are Unsupervised Multitask Learners", 2019, Table 2;
  the released configurations, e.g. Hugging Face's `gpt2-xl/config.json`): context 1024, vocabulary
  50,257; small 12 layers × 768 (12 heads), medium 24 × 1024 (16), large 36 × 1280 (20), XL
  48 × 1600 (25). GPT-2 XL's 25 heads admit tensor-parallel degrees 1, 5 and 25 only.
- Megatron-LM (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", SC 2021, Table 1): sequence 2048, vocabulary 51,200; 1.7B 24 layers × 2304
  (24 heads), 3.6B 30 × 3072 (32), 7.5B 36 × 4096 (32), 18.4B 40 × 6144 (48), 39.1B 48 × 8192
  (64), 76.1B 60 × 10240 (80). Their heads divide by 2, 4 and 8: the tensor-parallel presets.
- Llama 3 8B (Meta, "The Llama 3 Herd of Models", 2024, Table 3; the released `config.json`):
  32 layers × 4096, 32 query heads sharing 8 key/value heads (grouped-query attention, Ainslie et
  al. 2023), a SwiGLU MLP of width 14,336 (Shazeer 2020), RMSNorm with eps 1e-5 (Zhang & Sennrich
  2019), rotary positions with base 500,000 (Su et al. 2021), vocabulary 128,256, context 8192,
  an untied output head, no biases: the GPT's Llama-style options (`parlab.models.llama_parts`),
  8,030,261,248 parameters, the released model's 8.03B. It runs on the schemes `LLAMA_SCHEMES`
  of `parlab.engine.run_config` (tp must divide its 8 key/value heads; no context parallelism).
Simplification, stated (the GPT-2 and Megatron presets): no biases and a tied head (this
package's GPT), so a preset's parameter count is within 1% of the published one, not equal.
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
