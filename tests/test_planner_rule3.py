"""Chapter 13's exercises meet the rule (two design problems at GPU scale, one predict-then-run
whose next cell measures the closed form), the planner's choice at GPT-2 XL's shapes pays, and the
long tables are shortened to the best rows and the pick."""

import pandas as pd
import pytest

from parlab.planner import exercises
from parlab.planner.explore import real_choice, short


def test_kinds_and_answers(capsys):
    kinds = [e.kind for e in exercises.EXERCISES]
    assert 5 <= len(kinds) <= 6 and kinds.count("design") >= 2 and kinds.count("predict") == 1
    right = {"lost-mfu": 0.55 * 24 / 31 / 1.12, "smallest-tp": 4, "tp2-bytes": 786_432,
             "bubble": 7 / 15}
    for name, answer in right.items():
        ex = exercises.exercise(name)
        assert ex.check(answer) and not ex.check(answer * 1.5 + 1) and not ex.check(None)
    assert not exercises.exercise("smallest-tp").check(2)
    out = capsys.readouterr().out
    assert "786" not in out and "0.38" not in out


def test_the_predict_cell_measures_the_closed_form(capsys):
    from parlab.planner.explore import predict

    out = predict.tp2_bytes(786_432)
    assert out["ledger"] == out["closed_form"] == 786_432
    assert "right" in capsys.readouterr().out


def test_the_planner_pick_pays_at_gpt2_xl_shapes(capsys):
    rows = real_choice.choose("gpt2-xl", world_sizes=(8,), batch=64)
    assert rows[0]["speedup"] > 1 and rows[0]["choice_gain"] >= 1
    assert "it pays" in capsys.readouterr().out


def test_tiny_verdict_reads_the_sweep(capsys):
    rows = [{"dim": "dp", "mode": "strong", "n": 1, "step_us": 100.0},
            {"dim": "dp", "mode": "strong", "n": 2, "step_us": 120.0}]
    assert real_choice.tiny_verdict(rows) is False
    rows[1]["step_us"] = 80.0
    assert real_choice.tiny_verdict(rows) is True
    assert "beats one rank" in capsys.readouterr().out


def test_top_and_pick_keeps_the_pick():
    frame = pd.DataFrame({"plan": list("abcdefgh"), "measured_ms": [5, 3, 8, 1, 2, 9, 7, 6]})
    shown = short.top_and_pick(frame, "measured_ms", keep=("f",), n=3)
    assert list(shown["plan"]) == ["d", "e", "b", "f"]


def test_scale_table_in_ms():
    from parlab.planner.scaling import points

    row = {"dim": "dp", "mode": "strong", "n": 2, "scheme": "ddp", "batch": 12, "step_us": 1500.0,
           "pred_us": 1400.0, "error": 0.07, "throughput": 1.0, "eff": 0.5, "pred_eff": 0.5,
           "wait_us": 100.0, "pred_wait_us": 90.0, "state_B": 2048, "pred_state_B": 2048}
    text = points.format_table([row], unit="ms")
    assert "step ms" in text and "1.5000" in text
    with pytest.raises(KeyError):
        points.format_table([row], unit="s")


def test_characterization_table_shortened(capsys):
    from parlab.planner.explore.energy import print_characterization

    rows = [{"plan": f"p{i}", "dp": 1, "tp": 1, "pp": 1, "cp": 1, "microbatches": 1,
             "rows_per_microbatch": 12, "step_ms": 1.0 + i, "samples_per_s": 100.0 - i, "bytes": 0,
             "exposed": 0.0, "joules_per_step": None} for i in range(10)]
    print_characterization({"paced": True, "unit": "A100 ms", "rows": rows, "status": "",
                            "energy_measured": False}, top=3)
    out = capsys.readouterr().out
    assert "p0 " in out and "p2 " in out and "p9 " in out and "p5 " not in out
    assert "4 of 10 plans" in out


def test_replay_table_in_ms():
    from parlab.planner.explore.replay import WHAT_IFS, format_rows

    row = {"plan": "x", "measured_s": 0.0024, "replay_s": 0.0024, "error": 0.0, "exposed_share": 0.0,
           **{n: 1.0 for n in WHAT_IFS}}
    text = format_rows([row])
    assert "measured ms" in text and "2.4000" in text and "µs" not in text
