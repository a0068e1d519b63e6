"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §6) as schedule data: valid,
PyTorch's own `ScheduleZBVZeroBubble` order rank by rank, its ideal bubble the closed form
(p−1)/(6m+p−1) for m ≥ 2p−1 with 1F1B's memory, the run equal to the single process at world sizes
2 and 4, and its ledger's point-to-point bytes the closed form. Virtual time only."""

import pytest

import parlab
from parlab.pipeline import cost, validate
from parlab.pipeline.zbv import torch_order, zbv, zbv_bubble, zbv_p2p_bytes_per_step


@pytest.mark.parametrize("p,m", [(1, 2), (2, 2), (2, 4), (3, 5), (4, 4), (4, 8)])
def test_zbv_is_valid_and_is_torchs_order(p, m):
    s = zbv(p, m)
    validate.check(s)
    assert [list(rank) for rank in s.actions] == torch_order(p, m)
    assert sum(len(rank) for rank in s.actions) == 3 * 2 * p * m


@pytest.mark.parametrize("p,m", [(2, 3), (2, 4), (3, 5), (4, 7), (4, 16)])
def test_zbv_bubble_is_the_closed_form_with_1f1b_memory(p, m):
    s = zbv(p, m)
    # a chunk is half a stage: F = 0.5, whole backward 1.0 split evenly into B and W
    assert cost.ideal_bubble(s, forward=0.5, backward=1.0) == pytest.approx(zbv_bubble(p, m),
                                                                            abs=1e-12)
    assert cost.theory_bubble("zbv", p, m) == zbv_bubble(p, m)
    assert zbv_bubble(p, m) < cost.theory_bubble("zb", p, m)
    half = {k: 0.5 for k in range(2 * p)}
    assert max(cost.held_peak(s, r, half) for r in range(p)) == pytest.approx(p)  # 1F1B's rank 0


def test_zbv_refuses_other_chunks_and_short_closed_form():
    with pytest.raises(ValueError, match="chunks"):
        zbv(2, 4, 3)
    with pytest.raises(ValueError, match="2p-1"):
        zbv_bubble(4, 6)


@pytest.fixture(scope="module")
def zbv_runs(run_cached):
    return {ws: run_cached("pp-zbv", ws, steps=2, microbatches=4, optimizer="sgd",
                           model_config={"n_layer": 8}) for ws in (2, 4)}


@pytest.mark.parametrize("world_size", [2, 4])
def test_zbv_run_equals_single(run_cached, zbv_runs, world_size):
    ref = run_cached("single", 1, steps=2, optimizer="sgd", model_config={"n_layer": 8})
    comparison = zbv_runs[world_size].compare(ref)
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("world_size", [2, 4])
def test_zbv_ledger_bytes_are_the_closed_form(zbv_runs, world_size):
    r = zbv_runs[world_size]
    mc, m, steps = r.config.model_config, 4, r.config.steps
    boundary = (r.config.batch_size // m) * mc.block_size * mc.n_embd  # (mb, T, C)
    for rank in range(world_size):
        sent = sum(r.bytes_per_rank(op="send", phase=ph)[rank] for ph in ("pp-fwd", "pp-bwd"))
        assert sent == steps * zbv_p2p_bytes_per_step(world_size, m, rank, boundary)
        assert r.bytes_per_rank(phase="embed-tie")[rank] == 0  # rank 0 holds both ends


def test_zbv_shapes_only_is_its_real_paced_run():
    """Registered shapes=True (the real-scale table runs it shapes-only): same timeline, ledger
    and memory as the real paced run."""
    options = {"microbatches": 4, "clock": "A100", "steps": 2}
    real = parlab.run("pp-zbv", world_size=2, **options)
    shapes = parlab.run("pp-zbv", world_size=2, shapes_only=True, **options)
    assert shapes.step_times == real.step_times and shapes.timeline == real.timeline
    assert shapes.ledger == real.ledger and shapes.memory == real.memory
