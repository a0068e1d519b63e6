"""Chapter 09 (issue 52): the schedules compared at equal work (a BSP shard costs 1/W of an ASP
batch on the seeded virtual clock), the straggler's staleness of the predict-then-run exercise
against the server's book, the two design exercises against their closed forms, and the
notebook's one clock (batch-unit replays only in its appendix)."""

import math

import pytest

from parlab.asynchrony import cost, exercises
from parlab.asynchrony import explore as ex
from parlab.asynchrony.explore.predict import straggler_closed_form
from parlab.core.link import ACCELERATORS, REAL


def _end(spans):
    return max(e for _, _, e in spans)


@pytest.mark.parametrize("workers,straggler", [(3, 3.0), (4, 2.0)])
def test_equal_work_charges_a_shard_one_wth_of_a_batch(workers, straggler):
    steps = 9
    # BSP: every clock waits for the straggler's shard, straggler/W units
    _, bsp = ex.schedule("ssp", workers, steps, 0, straggler, equal_work=True)
    assert _end(bsp) == pytest.approx(steps * straggler / workers)
    _, unequal = ex.schedule("ssp", workers, steps, 0, straggler)
    assert _end(unequal) == pytest.approx(steps * straggler)  # the old unit: a shard = a batch
    # ASP is unchanged: a job is a whole batch either way
    _, asp = ex.schedule("asp", workers, steps, 0, straggler, equal_work=True)
    assert asp == ex.schedule("asp", workers, steps, 0, straggler)[1]
    assert _end(asp) < _end(bsp) < _end(unequal)


def test_draw_schedules_says_its_clock_and_who_finishes_first(capsys):
    import matplotlib

    matplotlib.use("Agg")
    ex.draw_schedules(3, 9, 3.0)
    out = capsys.readouterr().out
    assert "seeded virtual clock" in out and "equal work" in out
    assert "who finishes first: ASP — ASP at 4.00, BSP at 9.00" in out


@pytest.mark.parametrize("workers,straggler", [(5, 3), (5, 4), (4, 2), (3, 4)])
def test_straggler_staleness_is_r_times_the_other_workers(workers, straggler):
    book, _ = ex.schedule("asp", workers, 40, 0, float(straggler))
    late = [g.staleness for g in book.log if g.worker == workers]
    closed = straggler_closed_form(workers, straggler)
    # steady state: every gradient but the last, which meets the run's end (fewer jobs left)
    assert len(late) >= 3 and all(s == closed for s in late[:-1]) and late[-1] <= closed
    assert max(set(late), key=late.count) == closed  # what the notebook's cell reports


def test_design_answers_are_the_boundary():
    k = exercises.servers_needed()
    alpha, beta = REAL["NDR-IB"]
    compute = 6 * exercises.PSI_7B * exercises.TOKENS / ACCELERATORS["H100"].flops

    def receive(k):
        return alpha + cost.busiest_server_in(exercises.PSI_7B, 64 - k, k) / beta
    assert receive(k) <= compute < receive(k - 1)
    b = exercises.small_batch_for()
    ratio = ACCELERATORS["A100"].flops / ACCELERATORS["H100"].flops
    assert b / ratio <= exercises.DUAL_BATCH < (b + 1) / ratio
    assert exercises.answers()["straggler-staleness"] == 16
    assert math.isfinite(b)


def test_every_kind_is_there():
    kinds = [e.kind for e in exercises.EXERCISES]
    assert 5 <= len(kinds) <= 6 and kinds.count("design") >= 2 and kinds.count("predict") >= 1


def test_server_at_scale_ratio_grows_as_w_squared(capsys):
    from parlab.asynchrony.explore.real_scale import server_at_scale

    rows = server_at_scale(workers=(7, 14))
    ratio = [r["one_server_s"] / r["compute_s"] for r in rows]
    assert ratio[1] / ratio[0] == pytest.approx(4.0, rel=1e-3)  # W doubled: W² = 4×
    from parlab.asynchrony.explore.real_scale import model_params

    alpha, beta = REAL["HDR-IB"]
    for r in rows:  # k is the smallest that fits

        def fits(k, r=r):
            return alpha + cost.busiest_server_in(model_params(), r["workers"], k) / beta <= r["compute_s"]
        assert fits(r["servers"]) and (r["servers"] == 1 or not fits(r["servers"] - 1))
    assert "holds within 5%" in capsys.readouterr().out


def test_chapter_main_flow_is_paced_and_batch_units_only_in_the_appendix():
    """One clock: the cells that replay the server's book in batch units sit after the appendix
    heading, and no cell before it reads what they define (`ssp`)."""
    import json
    import pathlib
    import re

    path = pathlib.Path(__file__).parents[1] / "notebooks" / "09_asynchrony.ipynb"
    nb = json.loads(path.read_text())["cells"]
    cells = ["".join(c["source"]) for c in nb]
    start = next(i for i, s in enumerate(cells) if s.startswith("# Appendix"))
    assert "not a clock" in cells[start]
    for i, s in enumerate(cells):
        if "draw_schedules(" in s or "ssp_absorbs(" in s:
            assert i > start, s
    code = [s.replace("import ssp as ex_ssp", "") for c, s in zip(nb[:start], cells)
            if c["cell_type"] == "code"]
    assert not any(re.search(r"(?<![\w-])ssp\b(?![_-])", s) for s in code)
