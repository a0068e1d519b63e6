"""Chapter 09, flexible communication (Miellou, El Baz & Spiteri, Math. Comp. 1998): partial
updates sent mid-update; under the max-norm contraction the iteration still converges to u*, every
value stays in the order interval [0, u*], and every block of generation g is within γ^g."""

import pytest
import torch

from parlab.asynchrony import cost, jacobi, jacobi_solver
from tests.helpers import assert_within_gamma_to_the_generation

SMALL = dict(n=12, sweeps=240, work_ms=0.2, straggler=3.0, inner=4, sigma_h2=1.0)  # γ = 0.8


@pytest.fixture(scope="module")
def flexible():
    return jacobi_solver.solve(3, jacobi.JacobiConfig(mode="flexible", delay_ms=0.3, **SMALL))


def test_flexible_converges_to_the_same_solution(flexible):
    exact = jacobi.exact_solution(flexible.cfg)
    final = flexible.iterate_at(float("inf"))
    generation = min(log["generation"][-1] for log in flexible.logs)
    error = (final - exact).abs().max().item() / exact.abs().max().item()
    assert error <= flexible.cfg.gamma ** generation  # the macroiteration bound (conservative)
    assert error < 1e-8  # and, measured, converged


def test_every_value_stays_in_the_order_interval(flexible):
    """M ≥ 0, u₀ = 0: partial values only grow toward u* (the theory's order interval)."""
    exact = jacobi.exact_solution(flexible.cfg)
    for log in flexible.logs:
        lo, hi = log["rows"]
        for block in log["blocks"]:
            assert (block >= 0).all() and (block <= exact[lo:hi] * (1 + 1e-12)).all()


def test_flexible_error_within_gamma_to_the_generation(flexible):
    assert_within_gamma_to_the_generation(flexible)


def test_flexible_sends_partial_updates_and_bytes_equal_closed_form(flexible):
    """The straggler sends after relaxations that end no update (k % inner != 0): partial values."""
    last = len(flexible.logs) - 1
    sent_stamps = set()
    for log in flexible.logs[:-1]:
        for used in log["used"]:
            sent_stamps.add(used[last] if last in used else 0)
    assert any(stamp % SMALL["inner"] for stamp in sent_stamps)  # a neighbour used a partial update
    for rank in range(3):
        sends = [r for r in flexible.ledger if r["rank"] == rank and r["op"] in ("send", "isend")]
        assert sum(r["bytes_sent"] for r in sends) == cost.halo_bytes(flexible.cfg.n, len(sends))


def test_sync_with_inner_relaxations_equals_one_process():
    """Synchronous two-stage block-Jacobi: halos refreshed every `inner` relaxations."""
    cfg = jacobi.JacobiConfig(n=8, sweeps=12, work_ms=0.0, inner=3, mode="sync")
    run = jacobi_solver.solve(2, cfg)
    u = torch.zeros(8, 8, dtype=torch.float64)
    zero = torch.zeros(8, dtype=torch.float64)
    for _ in range(cfg.sweeps // cfg.inner):
        frozen = u.clone()
        top, bottom = u[:4], u[4:]
        for _ in range(cfg.inner):
            top = jacobi.sweep(top, zero, frozen[4], cfg)
            bottom = jacobi.sweep(bottom, frozen[3], zero, cfg)
        u = torch.cat([top, bottom])
    assert torch.allclose(run.iterate_at(float("inf")), u, rtol=0, atol=1e-15)


@pytest.mark.parametrize("kwargs,message", [(dict(inner=0), "inner=0"), (dict(mode="flex"), "mode='flex'")])
def test_flexible_bad_input_names_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        jacobi.JacobiConfig(**kwargs)
