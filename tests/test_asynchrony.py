"""Chapter 09: the parameter server equals single where theory says so, staleness stays within its
bound, every gradient is applied exactly once, seeded runs replay exactly, ledger bytes equal the
closed forms; asynchronous Jacobi converges under the contraction condition."""

import functools
import re
from collections import Counter

import pytest
import torch

import parlab
from parlab.asynchrony import cost, jacobi, jacobi_solver, jacobi_virtual
from parlab.asynchrony.delays import DelaySchedule, VirtualClock
from parlab.asynchrony.versions import Book, simulate
from tests.helpers import assert_within_gamma_to_the_generation, burning_cpus

STEPS = 3


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS, timeout=120)


def server_log(result):
    return result.outputs[0].extras["log"]


# ----------------------------------------------------------------------------- pure bookkeeping
@pytest.mark.parametrize("staleness", [0, 1, 3])
@pytest.mark.parametrize("jitter", [0.0, 2.0])
def test_ssp_book_bounds_staleness_and_applies_every_gradient_once(staleness, jitter):
    book = simulate(Book(3, 20, "ssp", staleness), VirtualClock(DelaySchedule(3, 7, 3.0, jitter)))
    assert max(g.staleness for g in book.log) <= staleness
    assert sorted((g.job, g.worker) for g in book.log) == [(c, w) for c in range(20) for w in (1, 2, 3)]
    assert book.version == 20


def test_ssp_book_reaches_its_bound_with_a_straggler():
    book = simulate(Book(3, 20, "ssp", 2), VirtualClock(DelaySchedule(3, 0, 3.0)))
    assert max(g.staleness for g in book.log) == 2  # the bound is tight, not just respected


def test_async_book_hands_every_job_out_once_and_the_straggler_does_fewer():
    book = simulate(Book(3, 30, "asp"), VirtualClock(DelaySchedule(3, 0, 3.0)))
    assert sorted(g.job for g in book.log) == list(range(30))
    assert [g.applied_at for g in book.log] == list(range(30))
    jobs = book.jobs_per_worker()
    assert sum(jobs.values()) == 30 and jobs[3] < jobs[1]
    assert max(g.staleness for g in book.log) > 1  # nothing bounds it


def test_book_rejects_a_bad_mode():
    with pytest.raises(ValueError, match="mode='bsp'"):
        Book(2, 3, "bsp")


# ----------------------------------------------------------------------------- exact where theory says
@pytest.mark.parametrize("world_size,model,optimizer", [(2, "gpt", "adamw"), (3, "mlp", "sgd"),
                                                        (4, "gpt", "adamw")])
def test_ps_sync_matches_single(runs, world_size, model, optimizer):
    comparison = runs("ps-sync", world_size, model, optimizer).compare(runs("single", 1, model, optimizer))
    assert comparison.match, comparison.problems


def test_ps_async_with_one_worker_matches_single(runs):
    comparison = runs("ps-async", 2).compare(runs("single"))
    assert comparison.match, comparison.problems


def test_ps_ssp_with_staleness_zero_is_ps_sync(runs):
    ssp, sync = runs("ps-ssp", 4, staleness=0, delays="seeded", straggler=3.0), runs("ps-sync", 4)
    assert ssp.compare(sync).match
    assert ssp.bytes_per_rank() == sync.bytes_per_rank()
    assert all(g["staleness"] == 0 for g in server_log(ssp))


# ----------------------------------------------------------------------------- asynchronous properties
def test_ps_ssp_staleness_within_bound_every_gradient_once(runs):
    result = runs("ps-ssp", 4, steps=8, staleness=2, delays="seeded", straggler=3.0, jitter=1.0)
    log = server_log(result)
    assert max(g["staleness"] for g in log) <= 2
    assert max(g["staleness"] for g in log) > 0
    assert sorted((g["job"], g["worker"]) for g in log) == [(c, w) for c in range(8) for w in (1, 2, 3)]


def test_ps_async_seeded_is_the_simulated_schedule_and_replays(runs):
    options = dict(delays="seeded", straggler=3.0, jitter=0.5)
    result = runs("ps-async", 4, steps=8, **options)
    cfg = result.config
    book = simulate(Book(3, 8, "asp"), VirtualClock(cost.schedule_of(cfg)))
    measured = [(g["worker"], g["job"], g["version"], g["applied_at"]) for g in server_log(result)]
    assert measured == [(g.worker, g.job, g.version, g.applied_at) for g in book.log]
    assert sorted(g["job"] for g in server_log(result)) == list(range(8))
    again = parlab.run("ps-async", world_size=4, steps=8, timeout=120, **options)
    assert again.losses == result.losses
    assert all((again.state[k] == v).all() for k, v in result.state.items())


# ----------------------------------------------------------------------------- virtual time
def repeatable(result) -> dict:
    """Everything a paced run must repeat to the bit: every rank's timeline and ledger (every
    message's issue and completion), step times, losses, and the servers' logs (order, versions,
    staleness, arrival times) and updates (times, jobs)."""
    extras = [out.extras for out in result.outputs]
    return {"timeline": result.timeline, "ledger": result.ledger, "step_times": result.step_times,
            "losses": result.losses, "logs": [e.get("log") for e in extras],
            "updates": [(e.get("update_times"), e.get("update_jobs")) for e in extras]}


def test_paced_ps_async_takes_pushes_in_virtual_order_and_repeats_beside_cpu_burners():
    """Virtual time (issue 46): the server takes whichever push arrives first in virtual time
    (ties: the lower rank), never the first the operating system delivers, so two identical paced
    runs, one beside two CPU-burning processes, agree on the order, every gradient's staleness,
    every update's time, every rank's timeline and the losses — equal, not within a tolerance —
    and the 3× straggler computes fewer jobs."""
    options = dict(world_size=4, steps=8, straggler=3.0, clock="A100", link="NVLink", timeout=120)
    idle = parlab.run("ps-async", **options)
    with burning_cpus(2):
        busy = parlab.run("ps-async", **options)
    first, again = repeatable(idle), repeatable(busy)
    for key, value in first.items():
        assert again[key] == value, key
    assert all((busy.state[k] == v).all() for k, v in idle.state.items())
    log = server_log(idle)
    assert sorted(g["job"] for g in log) == list(range(8))
    jobs = Counter(g["worker"] for g in log)
    assert jobs[3] < jobs[1] and max(g["staleness"] for g in log) > 1
    arrived = [g["t"] for g in log]
    assert arrived == sorted(arrived)  # served in virtual arrival order
    times = idle.outputs[0].extras["update_times"]
    assert times == sorted(times) and 0 < times[-1] < 1.0  # A100 seconds, not this CPU's


# ----------------------------------------------------------------------------- bytes
@pytest.mark.parametrize("scheme,world_size,options", [
    ("ps-sync", 2, {}), ("ps-sync", 4, {}), ("ps-ssp", 4, {"staleness": 2, "delays": "seeded"}),
    ("ps-async", 2, {}), ("ps-async", 4, {"delays": "seeded", "straggler": 3.0})])
def test_ledger_bytes_equal_closed_form(runs, scheme, world_size, options):
    result = runs(scheme, world_size, steps=4, **options)
    numel = sum(v.numel() for v in result.state.values())
    assert result.bytes_per_rank() == parlab.schemes()[scheme].cost(result.config).bytes_sent
    m = cost.message_bytes(numel)
    if scheme != "ps-async":
        assert result.bytes_per_rank(phase="pull")[0] == 4 * (world_size - 1) * m
        assert sum(result.bytes_per_rank("bytes_recv", phase="push")) == 4 * (world_size - 1) * m
    else:
        assert result.bytes_per_rank("bytes_recv")[0] == 4 * m


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("scheme,kwargs,message", [
    ("ps-sync", dict(world_size=1), "world_size=1"),
    ("ps-sync", dict(world_size=4, batch_size=10), "batch_size=10"),
    ("ps-ssp", dict(world_size=2, staleness=-1), "staleness=-1"),
    ("ps-async", dict(world_size=2, delays="random"), "delays='random'"),
    ("ps-async", dict(world_size=2, straggler=0.5), "straggler=0.5")])
def test_bad_input_names_the_value(scheme, kwargs, message):
    with pytest.raises(ValueError, match=message):
        parlab.run(scheme, steps=1, **kwargs)


# ----------------------------------------------------------------------------- asynchronous iterations
@pytest.fixture(scope="module")
def jacobi_runs():
    """On the virtual clock (the default): every count and time below is deterministic."""
    small = dict(n=16, sweeps=60, work_ms=0.2)
    return {"sync": jacobi_solver.solve(2, jacobi.JacobiConfig(mode="sync", **small)),
            "async": jacobi_solver.solve(3, jacobi.JacobiConfig(mode="async", straggler=3.0, delay_ms=0.5,
                                                         **small)),
            "sync3": jacobi_solver.solve(3, jacobi.JacobiConfig(mode="sync", straggler=3.0, **small)),
            "async3": jacobi_solver.solve(3, jacobi.JacobiConfig(mode="async", straggler=3.0, **small))}


def test_sync_jacobi_equals_one_process_sweeps(jacobi_runs):
    run = jacobi_runs["sync"]
    cfg = run.cfg
    u = torch.zeros(cfg.n, cfg.n, dtype=torch.float64)
    zero = torch.zeros(cfg.n, dtype=torch.float64)
    for _ in range(cfg.sweeps):
        u = jacobi.sweep(u, zero, zero, cfg)
    assert torch.allclose(run.iterate_at(float("inf")), u, rtol=0, atol=1e-15)
    assert all(log["generation"] == list(range(1, cfg.sweeps + 1)) for log in run.logs)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_error_within_gamma_to_the_generation(jacobi_runs, mode):
    """Bertsekas–Tsitsiklis: a max-norm contraction loses a factor γ per macroiteration, whatever
    the delays: every logged block of generation g is within γ^g·‖u*‖∞ of u*."""
    assert_within_gamma_to_the_generation(jacobi_runs[mode])


def test_async_jacobi_never_waits_for_the_straggler_and_uses_newest_halos(jacobi_runs):
    """Virtual clock: the fast ranks sweep 3× as often as the 3× straggler (they never wait), a
    deterministic count, and the run is exactly the timetable's."""
    run = jacobi_runs["async"]
    sweeps = run.sweeps()
    table = jacobi_virtual.virtual_schedule(run.cfg, 3)
    assert sweeps == list(table.sweeps)
    assert sweeps[-1] == run.cfg.sweeps and min(sweeps[:-1]) >= 3 * sweeps[-1]
    assert [log["t"][-1] for log in run.logs][-1] == pytest.approx(60 * 3 * 0.2e-3)
    for log in run.logs:  # out-of-order messages never move a halo backwards
        for peer in log["used"][0]:
            used = [u[peer] for u in log["used"]]
            assert used == sorted(used)
    assert len(run.macro_times()) < max(sweeps)  # sweeps outrun macroiterations when stale


def test_async_jacobi_reaches_the_residual_sooner_than_sync_in_virtual_time(jacobi_runs):
    """The lesson, deterministic: with a 3× straggler, asynchronous sweeps reach 0.05 sooner than
    synchronous ones in virtual time (no tolerance needed: the clock is not this CPU's)."""
    sync, run = jacobi_runs["sync3"], jacobi_runs["async3"]
    assert run.time_to(0.05) < sync.time_to(0.05) < float("inf")
    again = jacobi_solver.solve(3, run.cfg)
    assert again.sweeps() == run.sweeps() and all(
        a["used"] == b["used"] and a["t"] == b["t"] for a, b in zip(again.logs, run.logs))


def test_async_jacobi_timetable_repeats_to_the_bit_beside_cpu_burners(jacobi_runs):
    """Asynchronous Jacobi with injected delays on its virtual clock: a run beside two
    CPU-burning processes repeats the idle run's every sweep time, halo used, generation, block
    value and message (op, peer, bytes and virtual send and arrival times, in order) — equal, not
    within a tolerance."""
    run = jacobi_runs["async"]
    with burning_cpus(2):
        busy = jacobi_solver.solve(3, run.cfg)
    assert busy.sweeps() == run.sweeps()
    for a, b in zip(run.logs, busy.logs):
        assert (a["t"], a["generation"], a["used"]) == (b["t"], b["generation"], b["used"])
        assert all(torch.equal(x, y) for x, y in zip(a["blocks"], b["blocks"]))

    def messages(r):
        return [(m["rank"], m["op"], m["peers"], m["bytes_sent"], m["bytes_recv"], m["t_start"],
                 m["t_end"]) for m in r.ledger]

    assert messages(busy) == messages(run)
    assert all(m["t_start"] <= m["t_end"] <= run.logs[m["rank"]]["t"][-1] + 1.0 for m in run.ledger)


def test_wall_clock_async_jacobi_still_converges_within_the_bound():
    """clock="wall" (threads, real sleeps): the order is this CPU's, so only order-free properties
    are asserted: newest halos never move backwards, every block within γ^generation."""
    run = jacobi_solver.solve(3, jacobi.JacobiConfig(mode="async", n=8, sweeps=30, work_ms=0.2, straggler=3.0,
                                              clock="wall"))
    assert run.sweeps()[-1] == 30
    for log in run.logs:
        for peer in log["used"][0]:
            used = [u[peer] for u in log["used"]]
            assert used == sorted(used)
    assert_within_gamma_to_the_generation(run)


def test_jacobi_link_time_on_the_virtual_clock():
    """A halo message costs `link_ms` (priced on the accelerator's NVLink in the notebook): on 2
    synchronous ranks the fast one waits for the straggler's halo, then its link time, then sweeps."""
    w, link, sweeps = 0.2e-3, 0.05e-3, 10
    run = jacobi_solver.solve(2, jacobi.JacobiConfig(mode="sync", n=8, sweeps=sweeps, work_ms=0.2,
                                                     straggler=3.0, link_ms=0.05))
    assert run.logs[1]["t"][-1] == pytest.approx(sweeps * 3 * w)
    assert run.logs[0]["t"][-1] == pytest.approx((sweeps - 1) * 3 * w + link + w)
    priced = jacobi_solver.solve(2, jacobi.JacobiConfig(mode="async", n=8, sweeps=sweeps, work_ms=0.2,
                                                        straggler=3.0, link_ms=0.05))
    assert all(m["t_end"] - m["t_start"] >= link * (1 - 1e-9) for m in priced.ledger)


def test_jacobi_sweep_priced_on_the_accelerator_and_its_halo_on_nvlink():
    """Part C's clock: a sweep of an n/ranks × n strip costs its operators on the A100 (each a launch
    at least), a halo message (4 + n) float64 the A100's NVLink 3: α + bytes/β."""
    from parlab.asynchrony.explore.jacobi import priced_sweep_ms
    from parlab.core.link import ACCELERATORS, real

    work_ms, link_ms = priced_sweep_ms(16, 4, "A100")
    nvlink = real("NVLink", "A100")
    assert link_ms == pytest.approx(1e3 * (nvlink.latency_s + (4 + 16) * 8 / nvlink.bandwidth_Bps))
    assert work_ms >= 1e3 * ACCELERATORS["A100"].launch_s  # at least one kernel launch
    assert priced_sweep_ms(16, 4, "H100")[0] <= work_ms  # a faster accelerator, no slower sweep


def test_halo_drops_a_message_older_than_the_one_it_holds():
    halo = jacobi_solver.Halo(2)
    newer = torch.tensor([5, 3, 0, 0, 1.0, 2.0], dtype=torch.float64)
    older = torch.tensor([4, 2, 0, 0, 9.0, 9.0], dtype=torch.float64)
    halo.offer(newer)
    halo.offer(older)
    row, stamp, generation = halo.read()
    assert stamp == 5 and generation == 3 and row.tolist() == [1.0, 2.0]


def test_jacobi_halo_bytes_equal_closed_form(jacobi_runs):
    sync = jacobi_runs["sync"]
    for rank in range(2):
        sent = sum(r["bytes_sent"] for r in sync.ledger if r["rank"] == rank)
        assert sent == cost.halo_bytes(sync.cfg.n, sync.cfg.sweeps)  # one neighbour each
    run = jacobi_runs["async"]
    for rank in range(3):
        sends = [r for r in run.ledger if r["rank"] == rank and r["op"] in ("send", "isend")]
        assert sum(r["bytes_sent"] for r in sends) == cost.halo_bytes(run.cfg.n, len(sends))


def test_contraction_condition():
    m = torch.tensor([[0.6, 0.6], [-0.6, 0.6]])  # ρ(M) = 0.85 but ρ(|M|) = 1.2
    rho, rho_abs = cost.contraction(m)
    assert rho < 1 < rho_abs


@pytest.mark.parametrize("kwargs,message", [(dict(mode="chaotic"), "mode='chaotic'"),
                                            (dict(mode="sync", delay_ms=1.0), "delay_ms=1.0"),
                                            (dict(straggler=0.5), "straggler=0.5"),
                                            (dict(sweeps=0), "sweeps=0"),
                                            (dict(clock="A100"), "clock='A100'"),
                                            (dict(mode="async", work_ms=0.0), "work_ms=0.0")])
def test_jacobi_bad_input_names_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        jacobi.JacobiConfig(**kwargs)


# ----------------------------------------------------------------------------- exercises
def test_exercises_accept_the_answer_and_never_print_it(capsys):
    from parlab.asynchrony.exercises import EXERCISES, answers, exercise

    assert sorted(answers()) == sorted(e.name for e in EXERCISES)
    for name, answer in answers().items():
        assert exercise(name).check(answer), name
        assert not exercise(name).check(answer * 1.5 + 1), name
        assert not exercise(name).check(None) and not exercise(name).check("many"), name
        print(exercise(name).prompt)
        exercise(name).hint()
    out = capsys.readouterr().out
    for name, answer in answers().items():
        for text in {f"{answer:g}", f"{answer:,}", f"{answer:,.0f}", str(answer)}:
            if len(text) > 2:  # one- or two-digit answers are the prompts' own numbers too
                assert not re.search(rf"(?<![\d.,]){re.escape(text)}(?![\d,])", out), (name, text)


def test_exercise_closed_forms_agree_with_the_chapter():
    # ASP's steady staleness: the server's own book, without processes
    book = simulate(Book(4, 40, "asp"), VirtualClock(DelaySchedule(4)))
    hist = book.staleness_histogram()
    assert max(hist, key=hist.get) == cost.asp_steady_staleness(4)
    # macroiterations: γ^m ≤ reduction < γ^(m−1), γ the Jacobi config's own
    gamma = jacobi.JacobiConfig(sigma_h2=0.2).gamma
    assert gamma == cost.jacobi_gamma(0.2)
    m = cost.macroiterations_for(gamma, 1e-6)
    assert gamma ** m <= 1e-6 < gamma ** (m - 1)
    # the role change and the sharding multiply to the whole drop; at equal W sharding is ~k
    e = cost.sharding_effects(1_000_000, 8, 4)
    assert e["role factor"] == 7 / 4 and abs(e["role factor"] * e["shard factor"] - e["total factor"]) < 1e-12
    assert e["sharded"] == cost.server_bytes_per_update(1_000_000, 4, "ssp", 4)[0][0]
    assert abs(e["shard factor"] - 4) < 1e-3
    # Chazan–Miranker's threshold: ρ(|M|) = 2a crosses 1 at the accepted answer
    a = 1.0 / cost.contraction(torch.tensor([[1.0, 1.0], [-1.0, 1.0]]))[1]  # ρ(|M|) ∝ a
    for scale, converges in ((0.99, True), (1.01, False)):
        m2 = torch.tensor([[1.0, 1.0], [-1.0, 1.0]]) * a * scale
        assert (cost.contraction(m2)[1] < 1) == converges


def test_ssp_absorbs_jitter_not_a_persistent_straggler(capsys):
    from parlab.asynchrony.explore.ssp import ssp_absorbs

    out = ssp_absorbs(3, steps=24)
    jitter, persistent = out.values()
    assert jitter[4]["waiting"] < jitter[0]["waiting"] - 0.05  # SSP removes waiting under jitter
    assert jitter[4]["time"] < 0.95 * jitter[0]["time"]  # and the last update comes sooner
    # behind a persistent 1.5× straggler every s ends at its own work, 24 × 1.5 units, and the fast
    # workers' waiting is 1 − 1/1.5 by construction: not a measurement of SSP
    assert all(r["time"] == pytest.approx(36.0) for r in persistent.values())
    assert all(r["waiting"] == pytest.approx(1 / 3) for r in persistent.values())
    out = capsys.readouterr().out
    assert "SSP absorbs jitter, not a persistent straggler" in out and "by construction" in out


def test_asp_steady_state_staleness_is_workers_minus_one():
    book = simulate(Book(4, 40, "asp"), VirtualClock(DelaySchedule(4)))
    assert book.staleness_histogram()[3] >= 36
