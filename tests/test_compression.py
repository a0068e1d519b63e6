"""Chapter 08: lossless settings equal `single`, ledger bytes equal the closed forms exactly, QSGD
is unbiased, error feedback carries the residual exactly, lossy runs stay within a stated factor."""

import functools
import math

import pytest
import torch

import parlab
from parlab.compression import cost
from parlab.compression.compressors import QSGD, RandomK, Sign, TopK
from parlab.compression.packing import pack_bits, packed_bytes, unpack_bits
from parlab.compression.sync import ErrorFeedback

STEPS = 3
LOSSY = ["topk", "randomk", "qsgd", "signsgd", "powersgd", "local-sgd", "diloco"]
LOSS_FACTOR = 1.1  # final loss within 10% of single's at default options (CI-small runs)


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS)


def shapes_of(result):
    return [tuple(v.shape) for v in result.state.values()]  # state keeps parameter order


def test_registered_not_exact():
    schemes = parlab.schemes()
    for name in LOSSY:
        assert name in schemes and not schemes[name].exact


# (scheme, options, world_size, model, optimizer): the settings where the math says lossless
LOSSLESS = [("topk", {"ratio": 1.0}, 1, "gpt", "adamw"), ("topk", {"ratio": 1.0}, 2, "gpt", "adamw"),
            ("topk", {"ratio": 1.0, "error_feedback": False}, 4, "mlp", "sgd"),
            ("powersgd", {"rank": 1024}, 2, "gpt", "adamw"), ("powersgd", {"rank": 1024}, 4, "mlp", "sgd"),
            ("powersgd", {"rank": 1024, "warm_start": False, "error_feedback": False}, 2, "mlp", "adamw"),
            ("local-sgd", {"sync_every": 1}, 2, "gpt", "sgd"),
            ("local-sgd", {"sync_every": 1}, 4, "mlp", "sgd")]


@pytest.mark.parametrize("scheme,options,world_size,model,optimizer", LOSSLESS)
def test_lossless_settings_match_single(runs, scheme, options, world_size, model, optimizer):
    comparison = runs(scheme, world_size, model, optimizer, **options).compare(
        runs("single", 1, model, optimizer))
    assert comparison.match, comparison.problems


def test_local_sgd_with_adamw_is_not_single(runs):
    """The H = 1 equality needs a linear update: AdamW's is not (the bound is stated, not hoped)."""
    assert not runs("local-sgd", 2, "gpt", "adamw", sync_every=1).compare(runs("single")).match


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("scheme", LOSSY)
def test_ledger_bytes_equal_closed_form(runs, scheme, world_size):
    model = "gpt" if world_size == 2 else "mlp"
    result = runs(scheme, world_size, model, sync_every=2) if scheme in ("local-sgd", "diloco") \
        else runs(scheme, world_size, model)
    shapes, options = shapes_of(result), result.config.options
    for rank in range(world_size):
        for step in range(STEPS):
            expect = cost.bytes_per_step(scheme, shapes, world_size, rank, step, STEPS, **options)
            for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
                assert result.bytes_per_rank(op=op, step=step)[rank] == expect.get(op, 0), (rank, step, op)


def test_gathered_messages_travel_as_uint8_at_payload_size(runs):
    result = runs("qsgd", 2, "gpt")
    payload = cost.payload_bytes("qsgd", [math.prod(s) for s in shapes_of(result)], bits=4)
    gathers = [r for r in result.ledger if r["op"] == "all_gather"]
    assert gathers and all(r["dtype"] == "uint8" and r["numel"] == 2 * payload for r in gathers)


def test_compression_ratios():
    """top-k 1%: ≈ 2/N·4/(0.01·8) = 50× at N = 2; signSGD ≈ 32×; PowerSGD rank 4 on 64×32 matrices:
    64·32/((64 + 32)·4) = 5.3× on the matrices, less with the vectors sent whole."""
    shapes = [(64, 32), (64,), (32, 64), (32,)]
    assert cost.compression_ratio("topk", shapes, 2, ratio=0.01) == pytest.approx(50, rel=0.1)
    assert cost.compression_ratio("signsgd", shapes, 2) == pytest.approx(32, rel=0.1)
    assert cost.compression_ratio("local-sgd", shapes, 2, steps=8, sync_every=4) == 4
    assert 4 < cost.compression_ratio("powersgd", shapes, 2, rank=4) < 64 * 32 / (96 * 4)


@pytest.mark.parametrize("scheme", LOSSY)
def test_loss_within_factor_of_single(runs, scheme):
    ref, result = runs("single"), runs(scheme, 2, "gpt")
    assert result.losses[-1] < result.losses[0]  # it trains
    assert result.losses[-1] <= LOSS_FACTOR * ref.losses[-1], (result.losses, ref.losses)


def test_diloco_without_outer_momentum_is_local_sgd(runs):
    diloco = runs("diloco", 2, "mlp", sync_every=2, outer_lr=1.0, outer_momentum=0.0)
    local = runs("local-sgd", 2, "mlp", sync_every=2)
    assert diloco.compare(local).match


# ----------------------------------------------------------------------------- compressors
@pytest.mark.parametrize("width", range(1, 9))
def test_pack_bits_round_trip(width):
    codes = torch.randint(0, 2 ** width, (37,))
    packed = pack_bits(codes, width)
    assert packed.dtype == torch.uint8 and packed.numel() == packed_bytes(37, width)
    assert torch.equal(unpack_bits(packed, 37, width), codes)


@pytest.mark.parametrize("encoder", [TopK(0.1), TopK(1.0), RandomK(0.3), QSGD(2), QSGD(5), Sign()])
@pytest.mark.parametrize("numel", [1, 7, 100])
def test_message_size_is_payload_bytes(encoder, numel):
    message = encoder.encode(torch.randn(numel), seed=3, rank=1)
    assert message.dtype == torch.uint8 and message.numel() == encoder.payload_bytes(numel)
    assert encoder.decode(message, numel, seed=3).shape == (numel,)


def test_topk_keeps_the_largest():
    v = torch.tensor([0.1, -5.0, 0.2, 3.0, -0.3])
    assert torch.equal(TopK(0.4).decode(TopK(0.4).encode(v), 5), torch.tensor([0, -5.0, 0, 3.0, 0]))


@pytest.mark.parametrize("bits", [2, 4])
def test_qsgd_is_unbiased(bits):
    """Mean of T encodings → v: E[Q(v)] = v, Var ≤ min(n/s², √n/s)·‖v‖² (Alistarh et al., Lemma 3.1)."""
    torch.manual_seed(0)
    v, trials, encoder = torch.randn(50), 2000, QSGD(bits)
    mean = sum(encoder.decode(encoder.encode(v, seed=t), 50) for t in range(trials)) / trials
    s = encoder.levels
    variance = min(50 / s ** 2, math.sqrt(50) / s) * v.norm() ** 2
    assert (mean - v).norm() <= 4 * math.sqrt(variance / trials)
    assert torch.equal(encoder.encode(v, seed=1), encoder.encode(v, seed=1))  # seeded
    assert not torch.equal(encoder.encode(v, seed=1, rank=0), encoder.encode(v, seed=1, rank=1))


@pytest.mark.parametrize("encoder", [TopK(0.2), Sign(), QSGD(3), RandomK(0.2)])
def test_error_feedback_carries_the_residual(encoder):
    """Per step: sent + new residual == gradient + old residual (exactly for top-k, whose sent
    values are copies); over steps: Σ sent + e_T == Σ g."""
    torch.manual_seed(0)
    param = torch.zeros(40)
    feedback = ErrorFeedback([param], enabled=True)
    total_sent, total_grad = torch.zeros(40), torch.zeros(40)
    for step in range(6):
        grad, previous = torch.randn(40), feedback.residuals[0].clone()
        corrected = feedback.corrected(0, grad)
        sent = encoder.decode(encoder.encode(corrected, seed=step), 40, seed=step)
        feedback.keep(0, corrected, sent)
        if isinstance(encoder, TopK):
            assert torch.equal(sent + feedback.residuals[0], grad + previous)
        assert torch.allclose(sent + feedback.residuals[0], grad + previous, atol=1e-6)
        total_sent += sent
        total_grad += grad
    assert torch.allclose(total_sent + feedback.residuals[0], total_grad, atol=1e-5)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("scheme,options,named", [
    ("topk", {"ratio": 0}, "ratio=0"), ("topk", {"ratio": 1.5}, "ratio=1.5"),
    ("qsgd", {"bits": 1}, "bits=1"), ("qsgd", {"bits": 9}, "bits=9"),
    ("powersgd", {"rank": 0}, "rank=0"), ("local-sgd", {"sync_every": 0}, "sync_every=0"),
    ("signsgd", {"error_feedback": "yes"}, "error_feedback='yes'"),
    ("diloco", {"outer_momentum": 1.0}, "outer_momentum=1.0"),
    ("topk", {"batch_size": 10}, "batch_size=10")])
def test_bad_options_raise_before_launch(scheme, options, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        parlab.run(scheme, world_size=4, **options)


def test_times_fewer_has_no_ratio_when_nothing_was_sent():
    """No "inf× fewer": a periodic scheme whose period outlasts the run sent nothing, and says so."""
    from parlab.compression.explore import times_fewer
    assert times_fewer(861_184, 17_792, 0) == "48× fewer"
    assert times_fewer(861_184, 0) == "no ratio: it sent nothing"
    assert times_fewer(0, 0) == "no ratio: neither sent anything"


def test_error_feedback_bit_for_bit_says_why(capsys):
    """Sign's "bit for bit: False" is expected (its sent values are not copies of g + e) and the
    line says so, with the difference within float32 rounding; top-k's True likewise."""
    from parlab.compression import explore
    explore.check_properties(trials=10)
    out = capsys.readouterr().out
    assert "top-k 25%: sent + residual == g + previous residual bit for bit: True (as expected" in out
    assert "sign: sent + residual == g + previous residual bit for bit: False (as expected" in out
    assert "NOT as expected" not in out and "within float32 rounding" in out
