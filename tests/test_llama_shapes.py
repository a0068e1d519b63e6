"""The GPT's Llama-style options (parlab.models.llama_parts: grouped-query attention, SwiGLU,
RMSNorm, RoPE, an untied head) and the `llama3-8b` preset: at a small size every supported scheme
trains them exactly like `single` (tensor parallelism: whole groups of query heads with their
key/value head per rank, SwiGLU's two input projections column-parallel), a shapes-only run equals
its real paced run, the preset counts Llama 3 8B's parameters and runs a step shapes-only on two
ranks; what is not supported (context, vocabulary parallelism) is refused before any process
starts, naming why."""

import pytest

import parlab
from parlab.engine.run_config import make_config
from parlab.models import build_model, model_config, param_count
from parlab.models.presets import PRESETS

SMALL = {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_kv_head": 2, "mlp": "swiglu", "d_ff": 96,
         "norm": "rmsnorm", "positions": "rope", "rope_theta": 500000.0, "tie_head": False}
PACED = dict(steps=2, seed=3, clock="A100", link="10GbE", model_config=SMALL, timeout=120)
SCHEMES = [  # (scheme, world_size, options)
    ("ddp-naive", 2, {}),
    ("zero3", 2, {}),
    ("pp-1f1b", 2, {"microbatches": 4, "batch_size": 16}),
    ("tp", 2, {"tp": 2}),
    ("tp-sp", 2, {"tp": 2}),
    ("nd", 2, {"dp": 2}),
    ("nd", 2, {"tp": 2}),
    ("nd", 2, {"pp": 2, "microbatches": 4, "batch_size": 16}),
]
IDS = [f"{s}-{'-'.join(f'{k}{v}' for k, v in o.items())}" for s, _, o in SCHEMES]


def test_the_options_build_the_llama_parts_and_count_their_parameters():
    cfg = model_config("gpt", SMALL)
    model = build_model("gpt", cfg, 0)
    names = [n for n, _ in model.named_parameters()]
    assert "wpe.weight" not in names and names[-1] == "lm_head.weight"  # RoPE; an untied head
    assert "blocks.0.ln_1.bias" not in names  # RMSNorm: a gain only
    assert model.blocks[0].attn.c_attn.weight.shape == (64 + 2 * 2 * 16, 64)  # q of 4 heads, k, v of 2
    assert model.blocks[0].mlp.c_up.weight.shape == (96, 64)
    assert param_count("gpt", cfg) == sum(p.numel() for p in model.parameters())


def test_the_defaults_are_nanogpt():
    cfg = model_config("gpt")
    assert cfg.is_default_shape and cfg.kv_heads == cfg.n_head and cfg.hidden_width == 4 * cfg.n_embd
    names = [n for n, _ in build_model("gpt", cfg, 0).named_parameters()]
    assert names[:3] == ["wte.weight", "wpe.weight", "blocks.0.ln_1.weight"] and "lm_head.weight" \
        not in names


def test_the_preset_has_llama3_8b_shapes_and_parameter_count():
    cfg = make_config("zero3", world_size=2, model="llama3-8b", clock="A100", shapes_only=True,
                      batch_size=2).model_config
    assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.kv_heads, cfg.hidden_width) == (32, 4096, 32,
                                                                                     8, 14336)
    assert PRESETS["llama3-8b"]["vocab_size"] == 128256 and cfg.block_size == 8192
    psi = param_count("gpt", cfg)
    assert psi == 8_030_261_248  # the released model's 8.03B: embeddings 2 × 0.525B + 32 blocks
    assert abs(psi - 8.03e9) / 8.03e9 < 0.01


@pytest.fixture(scope="module")
def single():
    return parlab.run("single", **PACED)


@pytest.mark.parametrize("scheme, world_size, options", SCHEMES, ids=IDS)
def test_every_supported_scheme_trains_the_llama_parts_like_single(single, scheme, world_size,
                                                                   options):
    ref = single if "batch_size" not in options else parlab.run("single", **PACED,
                                                                batch_size=options["batch_size"])
    r = parlab.run(scheme, world_size=world_size, **PACED, **options)
    comparison = r.compare(ref)
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("scheme, world_size, options", SCHEMES, ids=IDS)
def test_a_shapes_only_run_of_the_llama_parts_is_the_real_run(scheme, world_size, options):
    real = parlab.run(scheme, world_size=world_size, **PACED, **options)
    shapes = parlab.run(scheme, world_size=world_size, shapes_only=True, **PACED, **options)
    assert shapes.step_times == real.step_times
    assert shapes.timeline == real.timeline
    assert shapes.ledger == real.ledger
    assert shapes.memory == real.memory
    assert shapes.losses is None


def test_llama3_8b_runs_a_step_shapes_only_on_two_ranks():
    r = parlab.run("nd", world_size=2, model="llama3-8b", steps=1, clock="A100", link="NVLink",
                   shapes_only=True, pp=2, batch_size=2, microbatches=2)
    assert r.config.preset == "llama3-8b" and r.config.model_config.n_kv_head == 8
    assert r.step_times[0] > 0.1  # 8B parameters, 16k tokens: hundreds of A100 ms at least
    assert r.losses is None


@pytest.mark.parametrize("scheme, options, why", [
    # tp = 4 > n_kv_head = 2 copies the key/value heads (tests/test_tensor_parallel_scale.py);
    # nd does not build copies
    ("nd", {"tp": 4}, r"n_kv_head=2 is not divisible by tp=4"),
    ("tp", {"tp": 2, "vocab_parallel": True}, r"vocab_parallel=True"),
    ("nd", {"cp": 2, "dp": 2}, r"nd with cp=2.*RoPE"),
    ("cp-ring", {"cp": 2}, r"scheme 'cp-ring'"),
])
def test_what_does_not_split_them_is_refused_naming_why(scheme, options, why):
    """nd's tp degree must divide the key/value heads (a rank holds whole groups); context and
    vocabulary parallelism are not supported with them."""
    with pytest.raises(ValueError, match=why):
        make_config(scheme, world_size=4, model_config=SMALL, **options)


def test_a_bad_option_is_named():
    for bad, why in (({"n_kv_head": 3}, "not divisible by n_kv_head=3"),
                     ({"mlp": "relu"}, r"mlp='relu' must be one of"),
                     ({"positions": "alibi"}, "positions='alibi'"),
                     ({"tie_head": 0}, "tie_head=0 must be True or False")):
        with pytest.raises(ValueError, match=why):
            model_config("gpt", bad)
