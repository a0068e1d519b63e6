"""Virtual time (`clock=`, parlab.core.clock): compute spans priced on the accelerator, ops that
complete at computed times (closed forms below), results unchanged, nothing slept, and the
acceptance test: a paced comparison gives the same timeline to the last bit on an idle machine,
beside two CPU-burning processes, with fork or forkserver."""

import subprocess
import sys
import time

import pytest
import torch

import parlab
from parlab.core import clock as clocks
from parlab.core import pacer as pacers
from parlab.core.launch import launch
from parlab.core.link import ACCELERATORS, LAUNCH_S, PRESETS, REAL, Accelerator, Link, faithful
from parlab.core.trace import Timeline
from parlab.engine.runner import make_config
from tests import workers_virtual as wv


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One intra-op thread, as every rank runs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("bad", ["B200", "a100", 3, None, "", ["A100"]])
def test_bad_clock_is_refused_before_launch_naming_it(bad):
    with pytest.raises(ValueError, match="clock=") as info:
        make_config("ddp-naive", world_size=2, clock=bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("field, value", [("flops", float("inf")), ("flops", 0.0),
                                          ("launch_s", -1e-6), ("launch_s", float("nan"))])
def test_an_accelerator_with_no_rate_is_refused(field, value):
    acc = Accelerator(**{"name": "X", "flops": 1e12, field: value})
    with pytest.raises(ValueError, match=field):
        make_config("ddp-naive", world_size=2, clock=acc)


def test_an_already_dilated_link_is_refused_under_a_paced_clock():
    with pytest.raises(ValueError, match="already dilated"):
        make_config("ddp-naive", world_size=2, clock="A100", link=faithful("1GbE", 1e9))


def test_wall_is_the_default_and_changes_nothing():
    cfg = make_config("ddp-naive", world_size=2, link="1GbE")
    assert cfg.clock is clocks.WALL and not cfg.paced
    assert cfg.link == PRESETS["1GbE"]


@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_paced_time_is_the_accelerators_own_seconds(world_size):
    cfg = make_config("single" if world_size == 1 else "ddp-naive", world_size=world_size,
                      clock="A100", batch_size=8 * world_size)
    assert cfg.clock.label == "A100 time" and cfg.clock.unit == "A100 ms"
    a100 = ACCELERATORS["A100"]
    assert a100.launch_s == LAUNCH_S == 4e-6
    # no margin, no dilation: 1,000 operators and 150 GFLOP are 4 ms + 1 ms on the A100, at any size
    assert cfg.clock.seconds(1000, 150e9) == 1000 * 4e-6 + 150e9 / 150e12
    assert cfg.clock.seconds(1000, 150e9, speed=0.5) == 2 * cfg.clock.seconds(1000, 150e9)
    # a counted span, kernel by kernel on the roofline: a 150 GFLOP matmul moving 1 GB is
    # compute-bound (1 ms > 1 GB / 2.039 TB/s), a 1 GB element-wise op memory-bound
    work = clocks.Work(2, 150e9, ((150e9, 1e9), (0.0, 1e9)))
    assert cfg.clock.price(work) == (4e-6 + 150e9 / 150e12) + (4e-6 + 1e9 / 2039e9)
    assert cfg.clock.price(work, speed=0.5) == 2 * cfg.clock.price(work)


def test_a_preset_under_a_paced_clock_is_the_real_link():
    cfg = make_config("ddp-naive", world_size=4, clock="H100", link="1GbE")
    assert (cfg.link.latency_s, cfg.link.bandwidth_Bps) == REAL["1GbE"]
    mine = Link(1e-6, 1e9, "mine")
    assert make_config("ddp-naive", world_size=4, clock="H100", link=mine).link == mine


@pytest.mark.parametrize("accelerator, generation, per_direction",
                         [("V100", "NVLink2", 150e9), ("A100", "NVLink3", 300e9),
                          ("H100", "NVLink4", 450e9)])
def test_nvlink_under_a_paced_clock_is_the_clocks_own_generation(accelerator, generation,
                                                                  per_direction):
    """NVIDIA's datasheets: NVLink 2/3/4 carry 150/300/450 GB/s per direction (docs/accelerators.md);
    "NVLink" typed by a user is the paced clock's accelerator's own, the A100's everywhere else."""
    from parlab.core.link import real

    assert ACCELERATORS[accelerator].nvlink == generation
    assert REAL[generation][1] == per_direction
    cfg = make_config("ddp-naive", world_size=2, clock=accelerator, link="NVLink")
    assert cfg.link.bandwidth_Bps == per_direction
    assert faithful("NVLink", 1e10, accelerator).bandwidth_Bps == pytest.approx(
        per_direction * 1e10 / ACCELERATORS[accelerator].flops)
    assert real("NVLink").bandwidth_Bps == REAL["NVLink3"][1] == REAL["NVLink"][1]


def test_every_teaching_preset_says_it_is_the_real_link_divided_by_100():
    for name, link in PRESETS.items():
        if name != "loopback":
            assert "÷100 (teaching preset)" in str(link), name
            assert link.bandwidth_Bps == pytest.approx(REAL[name][1] / 100)


def test_a_topology_is_paced_pair_by_pair():
    from parlab.core.topology import two_nodes
    cfg = make_config("ddp-naive", world_size=4, clock="A100", link=two_nodes(4))
    assert cfg.link.link_between(0, 1).bandwidth_Bps == REAL["NVLink"][1]
    assert cfg.link.link_between(0, 3).bandwidth_Bps == REAL["1GbE"][1]
    assert cfg.link.link_between(0, 0) is None


def test_the_meter_counts_operators_flops_and_bytes_exactly():
    meter = pacers.work_meter()
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    with meter:
        c = a @ b  # 2·64·32·16 FLOPs; reads 64·32 + 32·16 floats, writes 64·16
        c.relu()  # an operator, no FLOPs counted; reads and writes 64·16 floats
        c.t()  # a view: an operator, no kernel
    assert (meter.ops, meter.flops) == (3, 2 * 64 * 32 * 16)
    assert meter.kernels == [(2 * 64 * 32 * 16, (64 * 32 + 32 * 16 + 64 * 16) * 4),
                             (0, 2 * 64 * 16 * 4)]


# ----------------------------------------------------------------------------- one rank's clock
def test_a_span_lasts_its_price_exactly_and_nothing_sleeps():
    clock = clocks.resolve("A100")
    timeline = Timeline(0, pacers.Pacer(clock))
    a, b = torch.randn(128, 128), torch.randn(128, 128)
    with timeline.span("forward"):
        for _ in range(100):
            a @ b
    (event,) = timeline.events
    # each 128³ matmul: 4 µs launch + max(4.2 MFLOP / 150 TFLOP/s, 196 kB / 2.039 TB/s)
    acc = clock.accelerator
    one = acc.launch_s + max(2 * 128**3 / acc.flops, 3 * 128 * 128 * 4 / acc.hbm_Bps)
    assert (event.t0, event.t1) == (0.0, sum(one for _ in range(100)))
    assert timeline.pacer.stats()["ops"] == timeline.pacer.stats()["kernels"] == 100


def test_speeds_divide_the_price_exactly():
    clock = clocks.resolve("A100")
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    for speed in (1.0, 0.25):
        timeline = Timeline(0, pacers.Pacer(clock, speed))
        with timeline.span("forward"):
            for _ in range(20):
                a @ b
        work = clocks.Work(20, 20 * 2 * 64**3, ((2 * 64**3, 3 * 64 * 64 * 4),) * 20)
        assert timeline.events[0].duration == clock.price(work, speed)


def test_the_host_time_between_spans_is_no_time():
    timeline = Timeline(0, pacers.Pacer(clocks.resolve("A100")))
    a = torch.randn(64, 64)
    for name in ("forward", "backward"):
        with timeline.span(name):
            a @ a
        held = timeline.now()
        time.sleep(0.02)  # a descheduled or busy host
        assert timeline.now() == held
    first, second = timeline.events
    assert second.t0 == first.t1


def test_advance_adds_priced_time_and_refuses_nonsense():
    timeline = Timeline(0, pacers.Pacer(clocks.resolve("A100")))
    timeline.advance(0.25)
    timeline.wait_until(0.1)  # already past: nothing
    assert timeline.now() == 0.25
    timeline.wait_until(0.5)
    assert timeline.now() == 0.5
    with pytest.raises(ValueError, match="seconds="):
        timeline.advance(-1.0)


def test_comm_spans_are_not_priced_as_compute():
    timeline = Timeline(0, pacers.Pacer(clocks.resolve("A100")))
    with timeline.span("all_reduce", kind="comm"):
        torch.randn(64, 64) @ torch.randn(64, 64)
    assert timeline.pacer.stats()["segments"] == 0


# ----------------------------------------------------------------------------- ops in virtual time
LINK = Link(5e-6, 1e9, "α 5 µs, β 1 GB/s")


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_a_collective_starts_when_its_last_rank_can_and_takes_the_alpha_beta_time(world_size):
    numel, busy = 3000, 1e-3
    got = launch(wv.collective_after_uneven_compute, world_size, LINK, numel, busy)
    last = (world_size - 1) * busy
    for rank, (issue, end, sent, rounds) in enumerate(got):
        assert issue == rank * busy
        assert end == last + LINK.cost(sent, rounds)  # exact: max of the posts + k·α + n/β
    assert len({end for _, end, _, _ in got}) == 1  # the ring's ranks move equal bytes


@pytest.mark.parametrize("send_at, recv_at", [(1e-3, 0.0), (0.0, 5e-3)])
def test_a_message_arrives_after_its_sender_posts_and_a_late_receive_finds_it_there(send_at,
                                                                                  recv_at):
    numel = 1000
    sender_end, receiver_end = launch(wv.message_posted_late_or_early, 2, LINK, numel,
                                      send_at, recv_at)
    wire = LINK.cost(4 * numel, 1)
    assert sender_end == send_at + wire  # eager: done when its bytes have left
    assert receiver_end == max(recv_at, send_at + wire)


def test_two_sends_queue_on_the_outgoing_direction():
    numel = 1000
    sender, receiver = launch(wv.two_sends_share_the_outgoing_direction, 2, LINK, numel)
    wire = LINK.cost(4 * numel, 1)
    assert sender == [wire, 2 * wire]
    assert receiver == [wire, 2 * wire]


# ----------------------------------------------------------------------------- whole runs
@pytest.fixture(scope="module")
def paced_pair():
    kw = dict(world_size=2, steps=3, link="NVLink")
    return parlab.run("ddp-bucketed", **kw), parlab.run("ddp-bucketed", clock="A100", **kw)


def test_a_paced_run_changes_time_never_results(paced_pair):
    wall, paced = paced_pair
    assert wall.losses == paced.losses
    assert all(torch.equal(wall.state[k], paced.state[k]) for k in wall.state)
    assert wall.bytes_per_rank() == paced.bytes_per_rank()
    assert wall.pace == {} and paced.pace["segments"] > 0
    assert paced.clock.label == "A100 time"


def test_a_slow_link_costs_virtual_time_not_real_time():
    """An emulated link of α = one hour: every step waits hours in virtual time, none in real
    time — a rank that slept through one round would miss the launch's 60 s timeout and fail."""
    slow = Link(3600.0, 1e9, "α = 1 h")
    r = parlab.run("ddp-naive", world_size=2, steps=2, clock="A100", link=slow, timeout=60)
    rounds = max(rec["rounds"] for rec in r.ledger)
    assert min(r.step_times) > 3600.0 * rounds  # at least one all-reduce's latency per step


def _burners(count: int):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def _timelines(start_method: str) -> dict:
    return {name: parlab.run(name, world_size=4, steps=3, seed=9090, clock="A100", link="10GbE",
                             start_method=start_method)
            for name in ("ddp-naive", "ddp-overlap")}


def test_a_paced_comparison_is_bit_identical_idle_busy_fork_or_forkserver():
    """The acceptance test of virtual time: ddp-overlap vs ddp-naive at world size 4, run on this
    machine as it is, then beside two busy-looping processes this test starts, then with the
    other start method: every span, every message's issue and completion, every step time —
    equal, not within a tolerance."""
    idle = _timelines("forkserver")
    burners = _burners(2)
    try:
        busy = _timelines("forkserver")
    finally:
        for p in burners:
            p.kill()
            p.wait()
    forked = _timelines("fork")
    for name, run in idle.items():
        for other in (busy[name], forked[name]):
            assert other.timeline == run.timeline, name
            assert other.step_times == run.step_times, name
            assert ([(r["t_start"], r["t_end"]) for r in other.ledger]
                    == [(r["t_start"], r["t_end"]) for r in run.ledger]), name
            assert other.losses == run.losses
    # the lesson shows on a real link: overlap hides communication behind backward
    assert idle["ddp-overlap"].step_time() < idle["ddp-naive"].step_time()
