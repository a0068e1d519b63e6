"""Issue 35, item 1: a diverged run never returns as a success.

Every step each rank checks its loss share (a float it already holds: no extra collective) and at
the end the parameters it holds; a NaN or an infinity stops the run with an error naming the
step, the rank and the first non-finite tensor, and the CLI exits non-zero; `on_nonfinite=
"record"` records it instead. The fp16 loss scaler refuses scales fp16 cannot use, stops when the
scale would fall below them, and `parlab.run` warns after a run of skipped steps.
"""

from __future__ import annotations

import math
import warnings

import pytest

import parlab
from parlab.core import precision as mp
from parlab.core.launch import RankError
from parlab.engine import runner


def test_cli_exits_nonzero_naming_step_rank_and_tensor(capsys):
    """`parlab.run("ddp-naive", world_size=2, steps=2, lr=1e30)` returned NaN losses as a success."""
    from parlab import __main__ as cli

    code = cli.main(["run", "ddp-naive", "-w", "2", "--steps", "2", "-o", "lr=1e30"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "NonFiniteError: step 1, rank 0: the loss" in err
    assert "first non-finite tensor: gradient of wte.weight" in err
    assert "on_nonfinite='record'" in err


def test_interlocking_with_a_huge_aux_weight_stops_with_a_named_error():
    with pytest.raises(RankError, match=r"NonFiniteError: step \d+, rank \d+: .* first non-finite "
                                        r"tensor: "):
        parlab.run("interlocking", world_size=2, steps=2, aux_weight=1e308, clock="A100")


def test_diloco_with_a_huge_outer_lr_stops_with_a_named_error():
    """outer_lr=inf or 1e308 is refused before spawn (tests/test_ranges.py); a finite one that
    diverges stops the run, and the message quotes outer_lr, not only the inner lr (issue 46)."""
    with pytest.raises(RankError, match=r"NonFiniteError: step \d+, rank \d+: .*\(scheme "
                                        r"'diloco', lr=0\.003, outer_lr=1e\+30; the run diverged"):
        parlab.run("diloco", world_size=2, steps=3, model="mlp", sync_every=1, outer_lr=1e30,
                   clock="A100")


def test_nonfinite_parameters_after_the_last_step_are_caught():
    """The loss of the only step is finite; the update rounds the fp16 compute copy of the
    parameters to infinity (their fp32 masters, the state sent home, stay finite)."""
    with pytest.raises(RankError, match=r"NonFiniteError: step 0, rank 0: after the last step, a "
                                        r"parameter is not finite; first non-finite tensor: "
                                        r"parameter layers\.\d+\.(weight|bias) \(the compute copy\)"):
        parlab.run("single", model="mlp", steps=1, optimizer="sgd", lr=1e9, precision="fp16-mixed")


def test_record_mode_returns_the_divergence_instead():
    r = parlab.run("single", model="mlp", steps=3, optimizer="sgd", lr=1e36, on_nonfinite="record")
    assert r.diverged and math.isfinite(r.losses[0]) and not all(map(math.isfinite, r.losses))
    first, last = r.nonfinite
    assert (first["step"], first["rank"]) == (1, 0) and math.isnan(first["loss"])
    assert first["tensor"].startswith("gradient of layers.0.weight (64, 2)")
    assert last["loss"] is None and last["tensor"].startswith("parameter layers.0.weight")
    assert not parlab.run("single", model="mlp", steps=1).diverged


def test_fp16_run_of_skipped_steps_warns_and_records():
    """fp16 with a diverged model: every gradient overflows, every step is skipped; with
    on_nonfinite="record" the run returns, warns about the skipped run and records the NaN."""
    with pytest.warns(RuntimeWarning, match=r"fp16-mixed: 1\d steps in a row skipped"):
        r = parlab.run("single", model="mlp", steps=12, precision="fp16-mixed", lr=1e30,
                       on_nonfinite="record")
    assert r.diverged and len(r.skipped_steps) >= mp.SKIP_WARN


# ----------------------------------------------------------------------------- the loss scaler
def test_the_scaler_refuses_and_stops_outside_what_fp16_can_use():
    assert mp.check_loss_scale(2 ** 16) == 65536.0
    for bad in (1e300, 1e-30, 2.0 ** 25, 2.0 ** -15, math.inf, True):
        with pytest.raises(ValueError, match=r"loss_scale=.* must be a number in \[2\*\*-14, 2\*\*24\]"):
            mp.check_loss_scale(bad)
    scaler = mp.LossScaler(2.0 ** -13)
    scaler.update(0, True)  # 2**-13 → 2**-14
    with pytest.raises(FloatingPointError, match=r"step 1 overflowed at loss scale 6.1035.*e-05 = "
                                                 r"2\*\*-14.* 2 skipped steps in a row"):
        scaler.update(1, True)
    recording = mp.LossScaler(2.0 ** -14, stop_below=False)
    for step in range(3):
        recording.update(step, True)
    assert recording.scale == mp.MIN_SCALE and recording.skipped == [0, 1, 2]
    growing = mp.LossScaler(mp.MAX_SCALE, growth_interval=1)
    growing.update(0, False)
    assert growing.scale == mp.MAX_SCALE and growing.consecutive_skips == 0


def test_longest_skip_run_and_the_warning():
    assert mp.longest_skip_run([]) == (0, -1)
    assert mp.longest_skip_run([0, 1, 2, 5, 6, 7, 8, 10]) == (4, 5)

    class Out:
        def __init__(self, skipped):
            self.skipped, self.loss_scales = skipped, [2.0 ** (20 - i) for i in range(20)]

    cfg = runner.make_config("single", precision="fp16-mixed", steps=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runner._warn_skips([Out(list(range(mp.SKIP_WARN - 1)))], cfg)  # a healthy start: quiet
    with pytest.warns(RuntimeWarning, match=r"10 steps in a row skipped .*steps 3\.\.12 of 20, loss "
                                            r"scale 131072 → 256"):
        runner._warn_skips([Out([0, *range(3, 13)])], cfg)


# ----------------------------------------------------------------------------- where a NaN is born
# Issue 46: a NaN born in rank 1's gradient at step 3 was blamed on "step 4, rank 0" (the all-reduce
# spread it, the next loss showed it). Each rank checks its own gradients before they leave.
POISONED = "test-poisoned-gradient"  # tests/workers_divergence.py, registered outside parlab


@pytest.mark.parametrize("sync,world_size,rank,step,poison", [
    ("naive", 2, 1, 3, "nan"), ("overlap", 2, 1, 2, "inf"), ("naive", 4, 2, 4, "nan")])
def test_a_gradient_born_non_finite_is_named_where_it_was_born(sync, world_size, rank, step,
                                                               poison):
    """ddp-naive's all-reduces run after backward, ddp-overlap's from hooks during it: either
    way the error names the rank, the step and the tensor where the value was born."""
    from tests import workers_divergence  # noqa: F401  (registers the scheme)

    with pytest.raises(RankError, match=rf"step {step}, rank {rank}: this rank's own gradient "
                                        r"\(before the gradient sync\) is not finite; first "
                                        r"non-finite tensor: gradient of layers\.1\.weight "
                                        rf"\(64, 64\) \(4096 non-finite, first {poison}\)") as err:
        parlab.run(POISONED, world_size=world_size, model="mlp", steps=step + 2, sync=sync,
                   poison_rank=rank, poison_step=step, poison=poison)
    assert err.value.rank == rank


def test_record_mode_names_the_rank_of_birth_and_the_peers_that_received_it():
    from tests import workers_divergence  # noqa: F401

    r = parlab.run(POISONED, world_size=4, model="mlp", steps=4, sync="overlap", poison_rank=2,
                   poison_step=1, on_nonfinite="record")
    first = {e["rank"]: e for e in reversed(r.nonfinite)}  # each rank's first event
    assert {rank: e["step"] for rank, e in first.items()} == {0: 1, 1: 1, 2: 1, 3: 1}
    assert first[2]["where"].startswith("this rank's own gradient")
    assert all("caused by a peer" in first[rank]["where"] for rank in (0, 1, 3))
    assert all(e["tensor"].startswith("gradient of layers.1.weight") for e in first.values())
    assert math.isfinite(first[2]["loss"])  # the loss was fine: only the gradient shows it


def test_finite_gradients_that_sum_past_float32_blame_no_one_in_particular():
    """Every rank's gradient finite, their all-reduce not: each rank says so (no rank to name),
    and the launcher, hearing from all, reports the first at once."""
    from tests import workers_divergence  # noqa: F401

    with pytest.raises(RankError, match=r"step 1, rank 0: the gradient after the gradient sync "
                                        r"\(caused by a peer or by the sum: .* summed past the "
                                        r"dtype's range\)"):
        parlab.run(POISONED, world_size=2, model="mlp", steps=3, poison_rank=-1, poison_step=1,
                   poison="huge")
