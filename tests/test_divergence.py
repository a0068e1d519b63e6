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
    """outer_lr=inf is refused before spawn (tests/test_ranges.py); a finite one that diverges
    stops the run."""
    with pytest.raises(RankError, match=r"NonFiniteError: step \d+, rank \d+"):
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
