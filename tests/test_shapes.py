"""Shapes-only execution (`shapes_only=True`, parlab.core.shapes): the scheme's own code on fake
tensors gives the same run as on real ones — the same virtual timeline and step times to the
bit, the same ledger message by message, the same measured memory to the byte — one case per
chapter at world sizes 2 and 4; real model shapes by name (parlab.models.presets); and what
cannot run on shapes is refused before any process starts, naming why."""

import pytest

import parlab
from parlab.engine.run_config import make_config, shapes_schemes
from parlab.models import param_count
from parlab.models.presets import PRESETS

PACED = dict(steps=2, seed=3, clock="A100", link="10GbE")

CASES = [  # (chapter, scheme, options)
    ("00/01", "ddp-naive", {}),
    ("00", "ddp-naive", {"algo": "ring"}),
    ("00", "ddp-naive", {"algo": "tree"}),
    ("01", "ddp-overlap", {}),
    ("01", "dear", {}),
    ("02", "zero1", {}),
    ("02", "zero3", {"checkpoint": True}),
    ("02", "zero3", {"precision": "bf16-mixed"}),
    ("03", "tp-sp", {}),
    ("04", "pp-1f1b", {"microbatches": 4, "batch_size": 16}),
    ("04", "pp-zb", {"microbatches": 4, "batch_size": 16}),
    ("04", "pp-dualpipe", {"microbatches": 8, "batch_size": 16}),
    ("06", "cp-ulysses", {}),
    ("06", "cp-ring", {}),
    ("06", "cp-ring", {"layout": "contiguous", "recompute": True}),
    ("07", "ep", {"model": "gpt-moe", "model_config": {"routing": "even"}}),
    ("07", "ep", {"model": "gpt-moe", "model_config": {"routing": "even", "capacity_factor": 0.5,
                                                       "top_k": 1}}),
    ("07", "ep-allgather", {"model": "gpt-moe", "model_config": {"routing": "even",
                                                                 "capacity_factor": 0.5}}),
    ("13", "nd", {"dp": 2, "tp": 2}),
    ("13", "nd", {"dp": 2, "cp": 2}),
    ("13", "nd", {"dp": 4, "ep": 2, "model": "gpt-moe", "model_config": {"routing": "even"}}),
]


def _degree_fits(scheme, world_size, options):
    options = dict(options)
    if scheme in ("tp-sp", "cp-ulysses", "cp-ring"):
        options["tp" if scheme == "tp-sp" else "cp"] = 2
    if scheme == "nd" and "ep" in options:
        options["dp"] = world_size  # the expert groups borrow dp ranks
    elif scheme == "nd" and world_size == 2:
        options.pop("dp")  # tp 2 or cp 2 alone
    return options


@pytest.mark.slow
def test_a_bf16_shapes_only_nd_run_is_the_real_run_in_time_and_bytes():
    """nd in bf16 mixed precision (Megatron's Table 1 rows run so): the same timeline and ledger as
    the real run; parameters, gradients and optimizer state to the byte. Saved activations are
    measured 1.5% lower on the fake tensors (1,418,052 vs 1,440,324 B at tp 2): a known gap,
    not yet traced, in how the fake tensors' 16-bit casts share storage."""
    options = {"tp": 2, "precision": "bf16-mixed"}
    real = parlab.run("nd", world_size=2, **PACED, **options)
    shapes = parlab.run("nd", world_size=2, shapes_only=True, **PACED, **options)
    assert shapes.step_times == real.step_times and shapes.timeline == real.timeline
    assert shapes.ledger == real.ledger
    for fake, true in zip(shapes.memory, real.memory):
        assert {k: fake[k] for k in ("params", "grads", "optimizer")} == \
            {k: true[k] for k in ("params", "grads", "optimizer")}
        assert fake["activations"] == pytest.approx(true["activations"], rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("chapter, scheme, options", CASES,
                         ids=[f"{c}-{s}-{'-'.join(map(str, o.values()))}".replace(" ", "")
                              for c, s, o in CASES])
def test_a_shapes_only_run_is_the_real_run_without_its_numbers(chapter, scheme, options,
                                                              world_size):
    options = _degree_fits(scheme, world_size, options)
    real = parlab.run(scheme, world_size=world_size, **PACED, **options)
    shapes = parlab.run(scheme, world_size=world_size, shapes_only=True, **PACED, **options)
    assert shapes.step_times == real.step_times  # virtual time: equal, not within 1%
    assert shapes.timeline == real.timeline
    assert shapes.ledger == real.ledger  # every message at its real bytes, in order
    assert shapes.memory == real.memory  # measured from the fake tensors' storages, to the byte
    assert shapes.losses is None and shapes.state is None
    with pytest.raises(ValueError, match="shapes-only run"):
        shapes.compare(real)


def test_a_real_preset_runs_a_3d_plan_on_eight_ranks():
    """A 1.5B-class preset (Megatron-LM's 1.7B: 24 layers, hidden 2304, 24 heads) as dp 2 · tp 2
    · pp 2, one step: what a notebook can afford (~40 s here on 2 cores)."""
    r = parlab.run("nd", world_size=8, model="megatron-1.7b", steps=1, clock="A100",
                   link="NVLink", shapes_only=True, dp=2, tp=2, pp=2, batch_size=8,
                   microbatches=4)
    assert r.config.preset == "megatron-1.7b" and r.config.model_config.n_embd == 2304
    psi = param_count("gpt", r.config.model_config)
    assert abs(psi - 1.7e9) / 1.7e9 < 0.05  # the GPT at Megatron's shapes: ~1.7B parameters
    # each rank holds one pipeline stage's half of each tensor-parallel layer: about Ψ/4 in fp32
    held = [m["params"] / 4 for m in r.memory]
    assert all(0.2 * psi < h < 0.32 * psi for h in held), held
    assert r.step_times[0] > 0.01  # a 1.7B model's step is tens of A100 ms at least
    assert "megatron-1.7b" in r.summary() and "no losses" in r.summary()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_its_published_shapes(name):
    cfg = make_config("ddp-naive", world_size=2, model=name, clock="A100", shapes_only=True,
                      batch_size=2) if name.startswith("gpt2") else None
    shape = PRESETS[name]
    assert shape["n_embd"] % shape["n_head"] == 0
    if cfg is not None:
        assert cfg.model == "gpt" and cfg.preset == name
        assert (cfg.model_config.n_layer, cfg.model_config.n_embd) == (shape["n_layer"],
                                                                       shape["n_embd"])


def test_the_supported_schemes_are_listed_and_others_refused_naming_why():
    assert {"single", "ddp-naive", "zero3", "tp", "pp-1f1b", "nd"} <= set(shapes_schemes())
    with pytest.raises(ValueError, match="'torch-ddp'.*schemes that do"):
        make_config("torch-ddp", world_size=2, clock="A100", shapes_only=True)


@pytest.mark.parametrize("scheme, options, why", [
    ("ddp-naive", {"clock": "wall"}, "needs a paced clock"),
    ("ddp-naive", {"shapes_only": "yes"}, "must be True or False"),
    ("ddp-overlap", {"precision": "fp16-mixed"}, "loss scaling"),
    ("nd", {"ep": 2, "model": "gpt-moe"}, "router"),
    ("ep", {"model": "gpt-moe"}, r"routing='topk'.*pass model_config=\{'routing': 'even'\}"),
    ("ep", {"model": "gpt-moe", "model_config": {"routing": "balanced"}},
     r"routing='balanced' must be one of \('topk', 'even'\)"),
])
def test_what_needs_values_is_refused_before_spawn(scheme, options, why):
    kw = {"clock": "A100", "shapes_only": True, **options}
    with pytest.raises(ValueError, match=why):
        parlab.run(scheme, world_size=2, **kw)


def test_a_preset_too_large_for_the_accelerators_is_refused_naming_both_numbers():
    with pytest.raises(ValueError, match=r"cannot fit on 2 A100s however it is sharded: each "
                                         r"needs at least .* GiB .* the A100 has 74\.51 GiB; "
                                         r"model='megatron-76.1b'"):
        make_config("ddp-naive", world_size=2, model="megatron-76.1b", clock="A100",
                    shapes_only=True, batch_size=2)


def test_a_plan_that_does_not_fit_says_which_ranks():
    """Megatron's 1.7B replicated on 2 ranks: 16 B × 1.7B = 26 GB of state on each (it passes
    admission), plus the activations of 8 sequences of 2048 tokens per rank in fp32, attention
    scores included — more than an A100's 80 GB, measured."""
    r = parlab.run("ddp-naive", world_size=2, model="megatron-1.7b", steps=1, clock="A100",
                   link="NVLink", shapes_only=True, batch_size=16)
    assert r.over_memory == [0, 1]
    small = parlab.run("ddp-naive", world_size=2, model="gpt2", steps=1, clock="A100",
                       link="NVLink", shapes_only=True, batch_size=2)
    assert small.over_memory == []
