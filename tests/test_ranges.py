"""Issue 35, items 2 and 3: every numeric input gets a range the code can honour, and a config
that cannot fit in memory is refused with both numbers, all before any process starts.

Each case here was accepted before and failed late (inside the ranks, in linprog, in the
OOM killer); each is now a ValueError naming the value, raised before `launch` is reached
(the `no_launch` fixture makes reaching it a failure). Two runs check that huge seeds train.
"""

from __future__ import annotations

import math

import pytest
import torch

import parlab
from parlab import models
from parlab.core import checks
from parlab.engine import fits, run_config, runner
from parlab.engine.runner import make_config
from parlab.models import data


@pytest.fixture
def no_launch(monkeypatch):
    def launch(*args, **kwargs):
        raise AssertionError("a process was started before the bad value was refused")
    monkeypatch.setattr(runner, "launch", launch)


# ----------------------------------------------------------------------------- numeric ranges
@pytest.mark.parametrize("scheme,kwargs,message", [
    ("ddp-naive", dict(timeout=1e15), r"timeout=1000000000000000.0 must be at most 604800 seconds"),
    ("ddp-naive", dict(speeds=[1e-300, 1]),
     r"speeds=\[1e-300, 1\]: \[1e-300\] must be numbers in \[0.001, 1000\]"),
    ("ddp-naive", dict(speeds=[1e308, 1]), r"\[1e\+308\] must be numbers in"),
    ("ps-async", dict(straggler=1e308), r"straggler=1e\+308 must be a finite number >= 1 and <= 100"),
    ("ps-ssp", dict(jitter=1e308), r"jitter=1e\+308 must be a finite number >= 0 and <= 100"),
    ("hetero-dp", dict(fixed_rows=1e308), r"fixed_rows=1e\+308 must be a finite number >= 0 and <= 1e\+06"),
    ("hetero-tp", dict(fixed=1e308), r"fixed=1e\+308 must be a finite number >= 0 and <= 1000"),
    ("ddp-naive", dict(start_method="spawn "), r"start_method='spawn ' must be one of"),
    ("ddp-naive", dict(start_method=3), r"start_method=3 must be one of"),
    ("diloco", dict(outer_lr=float("inf")), r"outer_lr=inf must be a finite number > 0"),
    ("diloco", dict(outer_lr=float("nan")), r"outer_lr=nan must be a finite number > 0"),
    # issue 46: accepted, then rank 0 failed with "value cannot be converted to type float
    # without overflow", naming nothing
    ("diloco", dict(outer_lr=1e308), r"outer_lr=1e\+308 must be a finite number > 0 and <= 1e\+36 "
                                     r"\(the outer SGD's step in float32\)"),
    ("ddp-naive", dict(precision="fp16-mixed", loss_scale=1e300),
     r"loss_scale=1e\+300 must be a number in \[2\*\*-14, 2\*\*24\]"),
    ("ddp-naive", dict(precision="fp16-mixed", loss_scale=1e-30),
     r"loss_scale=1e-30 must be a number in \[2\*\*-14, 2\*\*24\]"),
    ("ddp-naive", dict(on_nonfinite="ignore"), r"on_nonfinite='ignore' must be one of \('raise', 'record'\)"),
])
def test_out_of_range_values_are_refused_before_spawn(no_launch, scheme, kwargs, message):
    with pytest.raises(ValueError, match=message):
        parlab.run(scheme, world_size=2, steps=1, **kwargs)


def test_the_range_bounds_themselves_are_accepted():
    make_config("ddp-naive", world_size=2, timeout=run_config.MAX_TIMEOUT, speeds=[1e-3, 1e3])
    make_config("ps-async", world_size=3, straggler=100.0, jitter=100.0)
    make_config("hetero-dp", world_size=2, fixed_rows=1e6)
    make_config("ddp-naive", precision="fp16-mixed", loss_scale=2.0 ** -14)
    make_config("ddp-naive", precision="fp16-mixed", loss_scale=2 ** 24)
    make_config("ddp-naive", on_nonfinite="record")
    make_config("diloco", world_size=2, outer_lr=run_config.MAX_LR)


def test_float_is_finite_unless_it_says_otherwise():
    """The registry's type, not hand checks: inf and NaN fail every Float; `finite=False` admits
    ±inf (never NaN); `max` bounds from above; the message names value and range."""
    with pytest.raises(ValueError, match=r"x=inf must be a finite number >= 0"):
        checks.Float(1.0, min=0).check("x", math.inf)
    with pytest.raises(ValueError, match=r"x=nan must be a finite number"):
        checks.Float(1.0).check("x", math.nan)
    with pytest.raises(ValueError, match=r"x=2 must be a finite number > 0 and <= 1"):
        checks.Float(0.5, min=0, strict=True, max=1).check("x", 2)
    assert checks.Float(1.0, finite=False).check("x", math.inf) == math.inf
    with pytest.raises(ValueError, match=r"x=nan must be a number \(not NaN\)"):
        checks.Float(1.0, finite=False).check("x", math.nan)
    with pytest.raises(ValueError, match=r"x=True must be"):
        checks.Float(1.0).check("x", True)


# ----------------------------------------------------------------------------- seeds
def test_no_valid_seed_overflows_a_step_seed():
    """seed·1_000_003 + step overflowed torch's 64-bit seed from seed ≈ 1.8e13; the derived seed is
    now taken modulo 2**64, unchanged (bit for bit) wherever it did not overflow before."""
    assert data.step_seed(7, 3) == 7 * 1_000_003 + 3
    assert data.step_seed(2**43 - 1, 10**6) == (2**43 - 1) * 1_000_003 + 10**6
    for seed in (2**62, 10**14, 2**63 - 1):
        assert 0 <= data.step_seed(seed, 10**9) < 2**64
        for model, seq in (("gpt", 32), ("mlp", 0), ("gpt-moe", 8), ("unet3d", 16)):
            batch = data.global_batch(model, 3, 2, seed, seq)
            assert batch[0].shape[0] == 2
    a = data.global_batch("gpt", 1, 4, 2**62, 16)[0]
    assert torch.equal(a, data.global_batch("gpt", 1, 4, 2**62, 16)[0])  # still a pure function


@pytest.mark.parametrize("scheme,world_size,model,seed", [
    ("ddp-naive", 2, "gpt", 2**62),
    ("single", 1, "mlp", 10**14),
])
def test_huge_seeds_train(scheme, world_size, model, seed):
    r = parlab.run(scheme, world_size=world_size, model=model, steps=2, seed=seed, clock="A100")
    assert len(r.losses) == 2 and all(math.isfinite(x) for x in r.losses)
    # the same run checks that the memory estimate's activations are generous: at least what
    # each rank measured (ActivationMeter)
    estimate = fits.ACTIVATION_BYTES * models.activation_count(
        model, r.config.model_config, r.config.batch_size) / world_size
    assert estimate >= max(m["activations"] for m in r.memory) > 0, (estimate, r.memory)


# ----------------------------------------------------------------------------- will it fit?
@pytest.mark.parametrize("kwargs", [
    dict(batch_size=10**12),
    dict(model_config={"n_embd": 2**20}),
    dict(model_config={"n_layer": 10**6}),
    dict(model_config={"block_size": 10**5}),
    dict(model="mlp", model_config={"d_hidden": 10**7}),
    dict(model="unet3d", model_config={"base": 10**5}, batch_size=2),
])
def test_a_config_that_cannot_fit_is_refused_with_both_numbers(no_launch, kwargs):
    kwargs = {"world_size": 2, **kwargs}
    scheme = "ddp-naive" if kwargs.get("model") != "unet3d" else "single"
    if scheme == "single":
        kwargs["world_size"] = 1
    with pytest.raises(ValueError, match=r"cannot fit in memory: it needs about [\d,.]+ GiB but "
                                         r"[\d,.]+ GiB are available"):
        parlab.run(scheme, steps=1, **kwargs)


def test_block_size_longer_than_the_dataset_is_refused_up_front(no_launch):
    longest = data.max_seq_len("gpt")
    with pytest.raises(ValueError, match=rf"block_size=10000000 is longer than the text dataset "
                                         rf"allows: .* block_size <= {longest}"):
        parlab.run("ddp-naive", world_size=2, model_config={"block_size": 10**7})
    with pytest.raises(ValueError, match=rf"block_size={longest + 1} is longer"):
        make_config("single", model_config={"block_size": longest + 1})
    data.global_batch("gpt", 0, 2, 0, longest)  # the bound itself draws a batch


def test_the_estimate_compares_with_what_is_available(monkeypatch):
    """The refusal is a comparison of two stated numbers, not a size limit: the same default run
    is refused when the machine has less free than the estimate."""
    cfg = make_config("ddp-naive", world_size=2)
    need = fits.predicted_memory(cfg)
    assert need["total"] == need["ranks"] * need["per_rank"] + need["parent"]
    assert need["params"] == sum(p.numel() for p in models.build_model("gpt", cfg.model_config, 0)
                                 .parameters())
    monkeypatch.setattr(fits, "available_memory", lambda: need["total"] - 1)
    with pytest.raises(ValueError, match="cannot fit in memory"):
        make_config("ddp-naive", world_size=2)
    monkeypatch.setattr(fits, "available_memory", lambda: need["total"])
    make_config("ddp-naive", world_size=2)


@pytest.mark.parametrize("name,overrides", [
    ("gpt", {}), ("gpt", {"n_layer": 2, "n_embd": 48, "block_size": 20, "vocab_size": 100}),
    ("mlp", {}), ("mlp", {"n_layer": 1, "d_hidden": 7}),
    ("gpt-moe", {}), ("gpt-moe", {"shared_expert": True, "moe_every": 2, "expert_hidden": 24,
                                  "n_layer": 5}),
    ("unet3d", {}), ("unet3d", {"levels": 4, "base": 3}), ("op-graph", {}), ("op-graph", {"kernel": 3}),
])
def test_param_count_from_the_config_equals_the_model(name, overrides):
    cfg = models.model_config(name, overrides)
    assert models.param_count(name, cfg) == sum(
        p.numel() for p in models.build_model(name, cfg, 0).parameters())
