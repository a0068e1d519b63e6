"""Mixed precision (`precision=`): each scheme equals `single` of the same precision within the
format's round-off, memory is the ZeRO paper's 2 + 2 + 12 bytes per parameter exactly, ledger
bytes are the closed forms at 2 bytes an element, fp16 skips the overflowing steps on every rank."""

import functools

import pytest

from parlab.core import cost
from parlab.core.precision import LossScaler, unit_roundoff
from parlab.engine.runner import make_config
from parlab.tensor_parallel.cost import activation_bytes, closed_form_bytes
from parlab.zero.cost import mixed_precision_formula
from parlab.zero.shard import FlatLayout

BF16, FP16 = "bf16-mixed", "fp16-mixed"
ODD_MLP = {"d_hidden": 37, "n_layer": 2}  # ZeRO units of 111, 1406, 114 parameters: padding
STEPS = 3


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS)


EXACT = [("ddp-naive", 1), ("ddp-naive", 2), ("ddp-naive", 3), ("ddp-naive", 4),
         ("ddp-bucketed", 1), ("ddp-bucketed", 2), ("ddp-bucketed", 4), ("zero1", 1), ("zero1", 2),
         ("zero1", 4), ("zero2", 1), ("zero2", 2), ("zero2", 3), ("zero2", 4), ("zero3", 1),
         ("zero3", 2), ("zero3", 4), ("tp", 1), ("tp", 2), ("tp", 4), ("tp-sp", 2),
         ("pp-1f1b", 1), ("pp-1f1b", 4),
         ("ddp-overlap", 2), ("dear", 2), ("ddp-priority", 2), ("torch-ddp", 2)]


@pytest.mark.parametrize("scheme,world_size", EXACT)
def test_bf16_schemes_equal_single_in_bf16(runs, scheme, world_size):
    comparison = runs(scheme, world_size, precision=BF16).compare(runs("single", precision=BF16))
    assert comparison.match, comparison.problems


ND_PLANS = [(2, {"tp": 2}), (4, {"dp": 2, "tp": 2}), (4, {"dp": 2, "pp": 2, "microbatches": 2}),
            (4, {"dp": 2, "cp": 2}), (4, {"tp": 2, "pp": 2, "microbatches": 2, "schedule": "gpipe"}),
            (4, {"dp": 4, "dp_sync": "overlap"}), (4, {"dp": 4, "dp_sync": "naive"}),
            (4, {"dp": 2, "tp": 2, "checkpoint": True})]


@pytest.mark.parametrize("world_size,plan", ND_PLANS,
                         ids=[f"{n}-" + "-".join(f"{k}{v}" for k, v in p.items()) for n, p in ND_PLANS])
def test_nd_plans_equal_single_in_bf16(runs, world_size, plan):
    comparison = runs("nd", world_size, precision=BF16, **plan).compare(runs("single", precision=BF16))
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("options,why", [({"zero": 1}, "with zero=1: nd's ZeRO shards"),
                                         ({"dp_sync": "dear"}, "with dp_sync='dear': its layer-wise")])
def test_what_nd_cannot_run_in_bf16_is_refused_naming_why(options, why):
    with pytest.raises(ValueError, match=f"precision='bf16-mixed' {why}"):
        make_config("nd", world_size=2, dp=2, precision=BF16, **options)


@pytest.mark.parametrize("scheme,world_size", [("ddp-naive", 2), ("zero2", 4), ("zero3", 2),
                                               ("tp", 2)])
def test_fp16_schemes_equal_single_in_fp16(runs, scheme, world_size):
    comparison = runs(scheme, world_size, precision=FP16).compare(runs("single", precision=FP16))
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("scheme,world_size,precision", [("pp-1f1b", 2, BF16), ("pp-gpipe", 4, BF16),
                                                         ("pp-zb", 2, FP16)])
def test_pipelines_equal_single_and_send_16_bit_activations(runs, scheme, world_size, precision):
    result = runs(scheme, world_size, precision=precision)
    assert result.compare(runs("single", precision=precision)).match
    fp32 = runs(scheme, world_size)
    for phase in ("pp-fwd", "pp-bwd"):
        assert 2 * sum(result.bytes_per_rank(phase=phase)) == sum(fp32.bytes_per_rank(phase=phase))


def test_the_mixed_bound_fails_for_a_wrong_run_and_across_precisions(runs):
    ref = runs("single", precision=BF16)
    half_batch = runs("single", precision=BF16, batch_size=6)  # a lost half of the batch
    assert not half_batch.compare(ref).match
    wrong_reference = runs("ddp-naive", 2, precision=BF16).compare(runs("single"))
    assert not wrong_reference.match and "same precision" in wrong_reference.problems[0]
    assert unit_roundoff(BF16) == 2.0 ** -8 and unit_roundoff(FP16) == 2.0 ** -11


def test_fp32_is_untouched(runs):
    result = runs("ddp-naive", 2)
    assert result.config.precision == "fp32" and result.skipped_steps == []
    assert {r["dtype"] for r in result.ledger} == {"float32"}
    assert not [r for r in result.ledger if r["phase"] == "overflow-check"]


@pytest.mark.parametrize("reduce_dtype", ["compute", "fp32"])
def test_torch_fsdp_mixed_precision_policy(runs, reduce_dtype):
    """FSDP2 does it itself: bf16 gathers, gradients reduced in reduce_dtype, fp32 shards as the
    master weights (4 + 4 + 8 bytes per parameter ÷ N, where our zero3 holds 2 + 2 + 12 ÷ N)."""
    result = runs("torch-fsdp", 2, precision=BF16, reduce_dtype=reduce_dtype)
    assert result.compare(runs("single", precision=BF16)).match
    fp32 = runs("torch-fsdp", 2)
    assert 2 * result.bytes_per_rank(op="all_gather")[0] == fp32.bytes_per_rank(op="all_gather")[0]
    factor = 2 if reduce_dtype == "compute" else 1
    assert factor * result.bytes_per_rank(op="reduce_scatter")[0] == \
        fp32.bytes_per_rank(op="reduce_scatter")[0]
    psi = sum(p.numel() for p in result.state.values())
    assert [result.memory[0][k] for k in ("params", "grads", "optimizer")] == \
        [4 * psi // 2, 4 * psi // 2, 8 * psi // 2]


def test_torch_zero_under_autocast_keeps_fp32_states_and_bytes(runs):
    result = runs("torch-zero", 2, precision=BF16)
    fp32 = runs("torch-zero", 2)
    assert result.compare(runs("single", precision=BF16)).match
    assert result.bytes_per_rank() == fp32.bytes_per_rank()  # autocast: gradients stay fp32
    for kind in ("params", "grads", "optimizer"):
        assert result.memory[0][kind] == fp32.memory[0][kind]
    assert result.memory[0]["activations"] < fp32.memory[0]["activations"]


@pytest.mark.parametrize("scheme", ["ddp-naive", "ddp-bucketed"])
def test_reduce_dtype_fp32_sends_fp32_gradients(runs, scheme):
    """DDP's `reduce_dtype`: 16-bit gradients reduced as fp32 copies, fp32's bytes, same result."""
    result = runs(scheme, 2, precision=BF16, reduce_dtype="fp32")
    assert result.compare(runs("single", precision=BF16)).match
    assert result.bytes_per_rank() == runs(scheme, 2).bytes_per_rank()  # fp32's bytes
    assert {r["dtype"] for r in result.ledger} == {"float32"}
    assert {r["dtype"] for r in runs(scheme, 2, precision=BF16).ledger} == {"bfloat16"}


# ----------------------------------------------------------------------------- memory
def unit_numels(result) -> list[int]:
    return [FlatLayout.from_meta(m).numel for m in result.outputs[0].extras["layouts"]]


@pytest.mark.parametrize("scheme,stage", [("ddp-naive", 0), ("zero1", 1), ("zero2", 2),
                                          ("zero3", 3)])
def test_memory_is_the_zero_papers_2_2_12_exactly(runs, scheme, stage):
    n = 4
    result = runs(scheme, n, model="mlp", model_config=ODD_MLP, precision=BF16)
    if stage:
        psi = sum(-(-u // n) * n for u in unit_numels(result))  # padded flat units
    else:
        psi = sum(p.numel() for p in result.state.values())
    expect = mixed_precision_formula(stage, psi, n)  # 2Ψ, 2Ψ, 12Ψ at DDP; ÷N by stage
    for mem in result.memory:
        for kind in ("params", "grads", "optimizer"):
            assert mem[kind] == expect[kind], (kind, mem[kind], expect[kind])


@pytest.mark.parametrize("scheme", ["tp", "tp-sp"])
def test_tensor_parallel_activations_are_the_closed_form_at_two_bytes(runs, scheme):
    result = runs(scheme, 2, precision=BF16)
    cfg = result.config
    for mem in result.memory:
        assert mem["activations"] == activation_bytes(cfg.model_config, cfg.batch_size, 2,
                                                      scheme == "tp-sp", element_size=2)


def test_activations_are_about_halved(runs):
    fp32, bf16 = runs("single"), runs("single", precision=BF16)
    ratio = bf16.memory[0]["activations"] / fp32.memory[0]["activations"]
    # 16-bit activations, but the loss's logits are taken in fp32: a little above one half
    assert 0.5 <= ratio < 0.55, ratio


# ----------------------------------------------------------------------------- bytes
# the registered predictions in mixed precision: tests/test_predictions.py (MIXED_CASES)


def test_16_bit_gradients_move_half_the_bytes_and_fp16_adds_one_flag(runs):
    fp32, bf16, fp16 = (runs("ddp-naive", 2, precision=p) for p in ("fp32", BF16, FP16))
    assert bf16.bytes_per_rank() == [b // 2 for b in fp32.bytes_per_rank()]
    flag = [STEPS * cost.overflow_check_bytes(FP16, 2, r) for r in range(2)]
    assert fp16.bytes_per_rank(phase="overflow-check") == flag and flag[0] > 0
    assert fp16.bytes_per_rank() == [b + f for b, f in zip(bf16.bytes_per_rank(), flag)]


@pytest.mark.parametrize("scheme,options", [("tp", {}), ("tp-sp", {}),
                                            ("tp", {"vocab_parallel": True})])
def test_tensor_parallel_bytes_at_two_bytes_an_element(runs, scheme, options):
    result = runs(scheme, 2, precision=FP16, **options)
    assert result.compare(runs("single", precision=FP16)).match
    cfg = result.config
    expect = closed_form_bytes(cfg.model_config, cfg.batch_size, 2, 0, STEPS, scheme == "tp-sp",
                               vocab_parallel=bool(options), element_size=2)
    for phase, nbytes in expect.items():
        assert result.bytes_per_rank(phase=phase)[0] == nbytes, phase


# ----------------------------------------------------------------------------- fp16 loss scaling
def test_fp16_overflow_skips_the_same_steps_on_every_rank_and_in_single(runs):
    scale = 2.0 ** 20  # too large for these gradients: steps 0, 1 and 3 overflow fp16 (max 65504)
    single = runs("single", precision=FP16, loss_scale=scale, steps=5)
    ddp = runs("ddp-naive", 2, precision=FP16, loss_scale=scale, steps=5)
    assert single.skipped_steps == ddp.skipped_steps == [0, 1, 3]
    assert all(out.skipped == [0, 1, 3] for out in ddp.outputs)  # one all-reduced decision
    assert ddp.loss_scales == [scale, scale / 2, scale / 4, scale / 4, scale / 8]
    assert ddp.compare(single).match


def test_loss_scaler_backs_off_and_grows():
    scaler = LossScaler(8.0, growth_interval=2)
    for step, overflow in enumerate([True, False, False, False]):
        scaler.update(step, overflow)
    assert scaler.skipped == [0] and scaler.history == [8.0, 4.0, 4.0, 8.0] and scaler.scale == 8.0


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("scheme,kwargs,match", [
    ("single", {"precision": "fp8"}, "precision='fp8'"),
    ("single", {"precision": "bf16"}, "precision='bf16'"),
    ("dear", {"precision": FP16}, "loss scaling"),
    ("torch-tp", {"precision": BF16}, "precision='bf16-mixed' is not supported by scheme"),
    ("torch-fsdp", {"reduce_dtype": "fp16"}, "reduce_dtype='fp16'"),
    ("single", {"precision": BF16, "loss_scale": 1024.0}, "loss_scale=1024.0"),
    ("single", {"precision": BF16, "model": "gpt-moe"}, "model='gpt-moe'"),
    ("single", {"precision": FP16, "loss_scale": -1}, "loss_scale=-1"),
    ("zero2", {"precision": BF16, "save_dir": "/tmp", "save_every": 1}, "save_every=1"),
])
def test_bad_precision_is_a_value_error_before_spawn(scheme, kwargs, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(")):
        make_config(scheme, world_size=2 if scheme != "single" else 1, **kwargs)
