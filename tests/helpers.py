"""Helpers shared by several test files (the cache of runs and `ckdir` are fixtures in conftest.py)."""

import subprocess
import sys
from collections import defaultdict
from contextlib import contextmanager

import psutil
import pytest


def ledger_by_phase(result) -> dict:
    """Bytes sent per phase per rank: {phase: [bytes of rank 0, rank 1, ...]}, phases that sent any."""
    got = defaultdict(lambda: [0] * result.config.world_size)
    for rec in result.ledger:
        if rec["bytes_sent"]:
            got[rec["phase"]][rec["rank"]] += rec["bytes_sent"]
    return dict(got)


def assert_plan_equals_single_and_its_closed_form(plan, result, reference) -> None:
    """A composed `Plan`'s run against `single`: the same losses and final parameters (1e-4), its
    ledger per phase equal to the composed closed forms and to the planner's byte prediction."""
    from parlab.planner.cost import nd_closed_form_bytes, nd_prediction

    comparison = result.compare(reference)
    assert comparison.match, (plan.describe(), comparison.problems)
    assert result.losses == pytest.approx(reference.losses, rel=1e-6, abs=0)
    worst = max((result.state[k] - reference.state[k]).abs().max().item() for k in reference.state)
    assert worst < 1e-4, (plan.describe(), worst)
    assert ledger_by_phase(result) == nd_closed_form_bytes(plan, result.config), plan.describe()
    assert nd_prediction(result.config).bytes_sent == result.bytes_per_rank()


def assert_within_gamma_to_the_generation(run) -> None:
    """Bertsekas–Tsitsiklis: every logged block of generation g of an asynchronous Jacobi `run` is
    within γ^g·‖u*‖∞ of u*."""
    from parlab.asynchrony import jacobi

    exact = jacobi.exact_solution(run.cfg)
    scale = exact.abs().max().item()
    for log in run.logs:
        lo, hi = log["rows"]
        for g, block in zip(log["generation"], log["blocks"]):
            assert (block - exact[lo:hi]).abs().max().item() <= run.cfg.gamma ** g * scale * (1 + 1e-9)


def living(procs) -> list:
    """The processes of `procs` still running (zombies and vanished ones left out)."""
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.NoSuchProcess:
            pass
    return out


def saved_checkpoints(steps: int):
    """A module fixture `saved`: zero2 on 2 ranks for `steps` steps with a checkpoint after every
    step, as (directory, result); conftest's `ckdir` gives each test a copy to damage."""

    @pytest.fixture(scope="module")
    def saved(tmp_path_factory):
        import parlab

        directory = tmp_path_factory.mktemp("saved")
        result = parlab.run("zero2", world_size=2, steps=steps, save_dir=str(directory), save_every=1)
        return directory, result

    return saved


@contextmanager
def burning_cpus(count: int = 2):
    """`count` processes busy-looping on this machine's CPUs for the body's duration (a paced run
    beside them must repeat its idle timeline to the bit)."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for p in burners:
            p.kill()
            p.wait()
