"""Chapter 04's ZB-V cell and real-scale bubble table (`parlab.pipeline.explore.zbv`): the report's
verdicts hold (torch's order, the single process, measured = ideal on virtual time), and the table
at gpt2-xl's width judges each row by the ideal of its own lists. Virtual time only."""

from parlab.pipeline.explore import zbv as ex_zbv


def test_zbv_report_verdicts(capsys):
    out = ex_zbv.zbv_report(world_size=2, microbatches=4, steps=2)
    assert out["same_as_torch"] and out["match"]
    assert abs(out["measured"] - out["ideal"]) <= ex_zbv.TOLERANCE
    assert out["theory"] == 1 / 25  # (p−1)/(6m+p−1) at p = 2, m = 4
    assert out["rows"]["zbv"][1] == out["rows"]["1f1b"][1]  # 1F1B's activation peak
    assert "equal torch.distributed.pipelining's ScheduleZBVZeroBubble" in capsys.readouterr().out


def test_bubbles_at_scale_row_and_skips(capsys):
    rows = ex_zbv.bubbles_at_scale(("zbv", "interleaved"), (3,), pp=2, layers=4)
    assert [r[:2] for r in rows] == [("zbv", 3)]  # interleaved needs m a multiple of p: skipped
    name, m, measured, ideal, closed, busiest = rows[0]
    assert abs(measured - ideal) <= ex_zbv.TOLERANCE and closed == 1 / 19
    assert busiest > 1.0  # rank 0 holds the embedding and the head
    assert "interleaved needs microbatches=3" in capsys.readouterr().out
