"""Looped breadth-first (Lamy-Poirier, MLSys 2023) as schedule data: valid, PyTorch's own
`ScheduleLoopedBFS` order rank by rank, its ideal bubble the closed form (p−1)/(v·m+p−1) for m ≥ p
with GPipe's memory, and the run equal to the single process. Chapter 04's predict-then-run and
one-clock partition helpers, on virtual time only (no raw clock is read)."""

import pytest

import parlab
from parlab.pipeline import cost, validate
from parlab.pipeline.looped_bfs import looped_bfs, torch_order
from parlab.pipeline.schedules import make_schedule


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (2, 4, 2), (4, 4, 2), (4, 8, 3), (3, 2, 2)])
def test_looped_bfs_is_valid_and_is_torchs_order(p, m, v):
    s = make_schedule("looped-bfs", p, m, v)
    validate.check(s)
    assert [list(rank) for rank in s.actions] == torch_order(p, m, v)
    assert sum(len(rank) for rank in s.actions) == 2 * p * v * m


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (2, 4, 2), (4, 4, 2), (4, 8, 3)])
def test_looped_bfs_bubble_is_the_closed_form_for_m_at_least_p(p, m, v):
    s = looped_bfs(p, m, v)
    assert cost.ideal_bubble(s, forward=1.0 / v) == pytest.approx(
        cost.theory_bubble("looped-bfs", p, m, v), abs=1e-12)
    # GPipe's memory: every micro-batch of every chunk held before the first backward
    assert cost.held_peak(s, 0, {k: 1.0 / v for k in range(p * v)}) == pytest.approx(m)


def test_looped_bfs_with_fewer_microbatches_than_stages_idles_more():
    s = looped_bfs(4, 2, 2)
    assert cost.ideal_bubble(s, forward=0.5) > cost.theory_bubble("looped-bfs", 4, 2, 2)


def test_looped_bfs_run_equals_single():
    ref = parlab.run("single", steps=2)
    r = parlab.run("pp-looped-bfs", world_size=2, steps=2, microbatches=4, chunks=2)
    assert r.compare(ref).match


def test_looped_bfs_refuses_no_chunks():
    with pytest.raises(ValueError, match="chunks"):
        looped_bfs(2, 2, 0)


def test_looped_bfs_shapes_only_is_its_real_paced_run():
    """It registers shapes=True with every pp-* scheme: same timeline, ledger and memory."""
    options = {"microbatches": 4, "chunks": 2, "clock": "A100", "steps": 2}
    real = parlab.run("pp-looped-bfs", world_size=2, **options)
    shapes = parlab.run("pp-looped-bfs", world_size=2, shapes_only=True, **options)
    assert shapes.step_times == real.step_times and shapes.timeline == real.timeline
    assert shapes.ledger == real.ledger and shapes.memory == real.memory
