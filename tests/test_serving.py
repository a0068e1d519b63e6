"""Chapter 12: two jobs on the same ranks equal their own `single` runs under every schedule, their
ledgers equal the closed forms exactly, schedules are validated; in paced A100 time crossover beats
sequential as the replayed model says (±15%) and a rank's processor runs one job's compute at a
time; the grouped network split over ranks equals one process (all features, and any mask), its
bytes equal the closed forms exactly; bad input fails before any process starts. No test reads a
raw clock: the job runs keep paced time (`clock="A100"`)."""

import importlib.util
import math

import numpy as np
import pytest
import torch

import parlab
from parlab.core import launch as launch_mod
from parlab.serving import cost, edge, grouped, images, masks, schedules, sharing
from parlab.serving.jobs import JobSpec
from tests.helpers import burning_cpus

STEPS = 3
A = JobSpec("A", model="gpt", model_config={"n_embd": 16, "n_layer": 2, "n_head": 2}, batch_size=12)
B = JobSpec("B", model="mlp", batch_size=24, optimizer="sgd", bucket_mb=0.01)  # several buckets


@pytest.fixture
def singles(run_cached):
    return {spec.name: run_cached("single", steps=STEPS, **spec.single_options()) for spec in (A, B)}


@pytest.fixture
def runs(run_cached):
    def jobs(schedule, world_size):  # both jobs in one launch: one cached result
        return run_cached.memo(("run_jobs", repr([A, B]), world_size, schedule, STEPS, "A100"),
                               lambda: sharing.run_jobs([A, B], world_size, schedule, STEPS,
                                                        clock="A100"))
    return jobs


# ----------------------------------------------------------------------------- schedules
@pytest.mark.parametrize("name", schedules.SCHEDULES)
def test_every_schedule_runs_each_job_in_order(name):
    plan = schedules.build(name, ["A", "B"], 3)
    schedules.validate(plan, ["A", "B"], 3)
    assert len(plan) == (2 if name == "concurrent" else 1)


def test_crossover_computes_one_job_while_the_other_communicates():
    """Every step's communication but the last job's last (the drain: nothing is left to compute)."""
    (thread,) = schedules.crossover(["A", "B"], 3)
    for step in range(3):
        for job, other in (("A", "B"), ("B", "A")):
            if (job, step) == ("B", 2):
                continue
            start, wait = thread.index((job, "start", step)), thread.index((job, "wait", step))
            assert any(a[0] == other and a[1] == "compute" for a in thread[start:wait])


@pytest.mark.parametrize("plan,match", [
    (([("A", "start", 0), ("A", "compute", 0), ("A", "wait", 0), ("A", "update", 0)],), "action 0"),
    ((schedules.one_job("A", 1)[:2], schedules.one_job("A", 1)[2:]), "threads 0 and 1"),
    ((schedules.one_job("A", 1) + [("C", "compute", 0)],), "'C'"),
    ((schedules.one_job("A", 1)[:-1],), "action 3 is nothing"),
    ((schedules.one_job("A", 1) + [("A", "compute", 1)],), "after its last step"),
])
def test_validate_names_the_action_out_of_place(plan, match):
    with pytest.raises(ValueError, match=match):
        schedules.validate(plan, ["A"], 1)


# ----------------------------------------------------------------------------- two jobs
@pytest.mark.parametrize("schedule,world_size", [("sequential", 2), ("concurrent", 2),
                                                 ("crossover", 2), ("crossover", 1),
                                                 ("concurrent", 4)])
def test_each_job_equals_its_single_run(runs, singles, schedule, world_size):
    result = runs(schedule, world_size)
    for name, ref in singles.items():
        comparison = result.jobs[name].compare(ref)
        assert comparison.match, (name, comparison.problems)


@pytest.mark.parametrize("schedule,world_size", [("sequential", 2), ("crossover", 2),
                                                 ("concurrent", 4)])
def test_each_job_ledger_equals_the_closed_form(runs, schedule, world_size):
    result = runs(schedule, world_size)
    for spec in (A, B):
        job = result.jobs[spec.name]
        assert job.bytes_per_rank() == cost.job_bytes(spec.config(world_size, STEPS))
        assert {r["group"] for r in job.ledger} == {spec.name}  # its own process group only
    assert len(cost.job_messages(B.config(world_size, STEPS))) > 1
    assert all(r["bytes_sent"] == 0 for r in result.clock_ledger)


@pytest.mark.parametrize("schedule", ["crossover", "concurrent"])
def test_each_job_memory_equals_the_formula(runs, schedule):
    result = runs(schedule, 2)
    for spec in (A, B):
        formula = cost.job_memory(spec.config(2, STEPS))
        for memory in result.jobs[spec.name].memory:
            assert {k: memory[k] for k in formula} == formula
    adamw = cost.job_memory(A.config(2, STEPS))
    assert adamw["optimizer"] == 2 * adamw["params"]
    assert cost.job_memory(B.config(2, STEPS))["optimizer"] == 0  # SGD keeps no state


def test_result_reports_spans_and_timeline(runs):
    result = runs("crossover", 2)
    assert result.wall_s > 0 and result.throughput() == pytest.approx(2 * STEPS / result.wall_s)
    assert set(result.spans) == {"A", "B"} and all(0 < s <= result.wall_s for s in result.spans.values())
    assert {e["args"]["job"] for e in result.timeline} == {"A", "B"}
    assert {e["rank"] for e in result.timeline} == {0, 1}


def test_paced_processor_runs_one_jobs_compute_at_a_time(runs):
    """Paced time: concurrent's two threads share the rank's one processor (a lock), so no compute
    span of A overlaps one of B on the same rank; results carry the clock and its honesty check."""
    result = runs("concurrent", 2)
    assert result.clock.paced and result.clock.name == "A100" and set(result.pace) == {"A", "B"}
    for rank in (0, 1):
        spans = sorted((e["t0"], e["t1"]) for e in result.timeline
                       if e["rank"] == rank and e["kind"] == "compute")
        assert all(t1 <= t0_next + 1e-6 for (_, t1), (t0_next, _) in zip(spans, spans[1:]))


@pytest.mark.parametrize("schedule", ["crossover", "concurrent"])
def test_paced_schedule_repeats_to_the_bit_beside_cpu_burners(runs, schedule):
    """Virtual time (issue 46): the two jobs share the rank's processor and link in virtual-time
    order (crossover: the schedule's one thread; concurrent: its threads take `jobs.Turns`), so a
    run beside two CPU-burning processes repeats the idle run's timeline, every message's issue
    and completion, every step time, span and loss — equal, not within a tolerance."""
    idle = runs(schedule, 2)
    with burning_cpus(2):
        busy = sharing.run_jobs([A, B], 2, schedule, STEPS, clock="A100")
    assert busy.timeline == idle.timeline
    assert (busy.wall_s, busy.spans, busy.origin) == (idle.wall_s, idle.spans, 0.0)
    for name, job in idle.jobs.items():
        other = busy.jobs[name]
        assert other.ledger == job.ledger, name
        assert (other.step_times, other.losses) == (job.step_times, job.losses), name


@pytest.fixture(scope="module")
def chapter_runs():
    """The chapter's two jobs (explore.jobs) at 2 ranks on the real 1GbE in A100 time, 3 steps.
    In virtual time an A100's compute (2.9 ms a round of both jobs) dwarfs the real 100Gb-IB's
    all-reduces (7-8 µs), leaving nothing to overlap (crossover measured 1.005×, model 1.005×);
    on 1GbE communication is 0.37 and 0.51 ms a step and crossover measures 1.29× (model 1.30×)."""
    from parlab.serving import explore

    return {s: sharing.run_jobs(explore.jobs(2), 2, s, 3, "1GbE", clock="A100")
            for s in ("sequential", "crossover")}


def test_crossover_beats_sequential_in_paced_time_as_the_model_says(chapter_runs, capsys):
    """The lesson at the notebook's job sizes, in A100 time: crossover beats sequential, within
    ±15% of the model replayed over the run's own 3 steps (a tolerance for the model's
    simplifications, not for noise: the run repeats to the bit; measured 1.29× vs 1.30×)."""
    from parlab.serving import explore

    model = explore.model_table(chapter_runs, "1GbE")
    verdict = explore.crossover_verdict(chapter_runs, model, tolerance=0.15)
    out = capsys.readouterr().out
    assert "A100 time" in out and "crossover ≥ sequential: yes" in out
    assert verdict["holds"] and verdict["measured"] >= 1.2
    assert verdict["measured"] == pytest.approx(verdict["predicted"], rel=0.15)


def test_run_seconds_replays_the_schedules():
    p, u, c = {"A": 1.0, "B": 1.0}, {"A": 0.0, "B": 0.0}, {"A": 1.0, "B": 1.0}
    assert cost.run_seconds("sequential", p, u, c, 4) == 16.0  # steps · Σ(P + U + C)
    # crossover: the first compute of each job and the last all-reduce are not hidden
    assert cost.run_seconds("crossover", p, u, c, 1) == 3.0
    assert cost.run_seconds("crossover", p, u, c, 100) == pytest.approx(2 * 100 + 1)
    with pytest.raises(ValueError, match="concurrent"):
        cost.run_seconds("concurrent", p, u, c, 2)


def test_round_closed_forms():
    p, c = {"A": 2.0, "B": 1.0}, {"A": 1.0, "B": 2.0}
    assert cost.round_seconds("sequential", p, c) == 6.0
    assert cost.round_seconds("crossover", p, c) == 3.0
    assert cost.crossover_speedup({"A": 1.0, "B": 1.0}, {"A": 1.0, "B": 1.0}) == 2.0
    assert cost.crossover_speedup({"A": 5.0, "B": 5.0}, {"A": 1.0, "B": 1.0}) == pytest.approx(1.2)
    cfg = A.config(2, 4)
    link = parlab.core.link.PRESETS["1GbE"]
    (numel,) = cost.job_messages(cfg)
    assert cost.sync_seconds(cfg, link) == pytest.approx(2 * link.latency_s + numel * 4 / link.bandwidth_Bps)


@pytest.fixture
def no_launch(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a process was started")
    monkeypatch.setattr(sharing, "launch", refuse)
    monkeypatch.setattr(edge, "launch", refuse)
    monkeypatch.setattr(launch_mod, "launch", refuse)


@pytest.mark.parametrize("kwargs,match", [
    ({"schedule": "round-robin"}, "round-robin"),
    ({"specs": [A, JobSpec("A")]}, "distinct"),
    ({"specs": []}, "specs"),
    ({"specs": [A, "B"]}, "specs"),
    ({"world_size": 5}, "batch_size=12"),
    ({"world_size": 0}, "world_size=0"),
    ({"steps": 0}, "steps=0"),
    ({"link": "2GbE"}, "2GbE"),
    ({"specs": [JobSpec("A", model="resnet")]}, "resnet"),
])
def test_bad_input_fails_before_any_process(no_launch, kwargs, match):
    args = {"specs": [A, B], "world_size": 2, "schedule": "crossover", "steps": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        sharing.run_jobs(**args)


# ----------------------------------------------------------------------------- images
def test_images_ship_in_the_repo_and_match_their_script():
    path = images.DATA_DIR / "make_images.py"
    spec = importlib.util.spec_from_file_location("make_images", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    x, y = script.draw(500, seed=1)
    with np.load(images.DATA_DIR / "shapes.npz") as data:
        assert np.array_equal(data["test_x"], x) and np.array_equal(data["test_y"], y)
    tx, ty = images.load("test")
    assert tx.shape == (500, 1, 16, 16) and tx.dtype == torch.float32 and 0 <= tx.min() <= tx.max() <= 1
    assert torch.equal(tx, images.load("test")[0])  # the noise is seeded
    assert torch.bincount(ty).tolist() == [50] * 10
    with pytest.raises(ValueError, match="validation"):
        images.load("validation")


# ----------------------------------------------------------------------------- edge inference
@pytest.fixture(scope="module")
def net():
    x, y = images.load("train")
    model = grouped.GroupedNet(seed=0)
    grouped.train_grouped(model, x, y, steps=10)
    return model


def test_mask_matrix_is_the_mask_per_weight():
    cfg = grouped.GroupedConfig(groups=2, width=2, n_blocks=1)
    mask = torch.zeros(2, 2, 2, dtype=torch.bool)
    mask[0, 1, 1] = True  # channel 1 of group 0 reaches group 1
    m = grouped.mask_matrix(mask)  # (out, in)
    expect = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [0, 1, 1, 1], [0, 1, 1, 1]], dtype=torch.float)
    assert torch.equal(m, expect)
    net = grouped.GroupedNet(cfg)
    assert torch.equal(net.mix_weight(0), net.mix[0].weight)  # dense by default


def test_search_keeps_the_density_and_the_diagonal(net):
    x = images.load("train")[0][:64]
    for density in (0.0, 0.1, 0.5, 1.0):
        found = masks.search(net, x, density)
        assert masks.kept_fraction(found) == pytest.approx(density, abs=1 / 96)
        for mask in found:
            assert mask[torch.arange(4), torch.arange(4)].all()
    with pytest.raises(ValueError, match="density=1.5"):
        masks.search(net, x, 1.5)


def test_apply_folds_dropped_means_into_the_bias(net):
    """A dropped channel replaced by its mean: on the images the means came from, the mix input
    of each block changes only by zero-mean terms, so the mean of the mix pre-activation is kept."""
    x = images.load("train")[0][:128]
    found = masks.search(net, x, 0.1)
    tuned = masks.apply(net, x, found)
    h = masks.block_inputs(net, x)[0]
    before = torch.nn.functional.conv2d(h, net.mix_weight(0), net.mix[0].bias).mean(dim=(0, 2, 3))
    after = torch.nn.functional.conv2d(h, tuned.mix_weight(0), tuned.mix[0].bias).mean(dim=(0, 2, 3))
    assert torch.allclose(before, after, atol=1e-5)
    assert torch.equal(masks.apply(net, x, grouped.full_masks(net.cfg))(x), net(x))


@pytest.mark.parametrize("world_size,density", [(1, 1.0), (2, 1.0), (4, 1.0), (2, 0.1), (4, 0.25)])
def test_split_inference_equals_one_process_and_the_closed_form(net, world_size, density):
    x = images.load("test")[0][:24]
    model = masks.apply(net, images.load("train")[0][:64],
                        masks.search(net, images.load("train")[0][:64], density))
    result = edge.run_edge(model, x, world_size=world_size, batch=12, repeats=2)
    assert torch.allclose(result.logits, model(x).detach(), rtol=1e-4, atol=1e-5)
    predicted = cost.edge_bytes(model.cfg, model.masks, world_size, 12)
    for request in range(4):  # 2 requests × 2 repeats, each the same bytes
        assert result.bytes_per_rank(request) == [sum(p.values()) for p in predicted]
    for rank, phases in enumerate(predicted):
        for phase, nbytes in phases.items():
            measured = sum(r["bytes_sent"] for r in result.ledger
                           if r["rank"] == rank and r["phase"] == phase and r["request"] == 0)
            assert measured == nbytes, (rank, phase)
    if density == 1.0:
        assert [sum(p.values()) for p in predicted] == [
            cost.dense_edge_bytes(model.cfg, world_size, 12, rank) for rank in range(world_size)]
    assert len(result.latencies) == 4


def test_selected_channels_send_fewer_bytes(net):
    x = images.load("train")[0][:64]
    dense = cost.edge_bytes(net.cfg, grouped.full_masks(net.cfg), 4, 1)
    sparse = cost.edge_bytes(net.cfg, masks.search(net, x, 0.1), 4, 1)
    assert sum(sum(p.values()) for p in sparse) < 0.2 * sum(sum(p.values()) for p in dense)


def test_send_channels_are_the_union_over_receiving_groups():
    mask = torch.zeros(4, 4, 2, dtype=torch.bool)
    mask[0, 2, 1] = mask[0, 3, 1] = mask[1, 3, 0] = True
    plan = masks.send_channels(mask, 2)  # rank 0: groups 0, 1; rank 1: groups 2, 3
    assert plan[0][1] == [1, 2] and plan[1][0] == [] and plan[0][0] == []
    assert masks.send_channels(mask, 4)[0][2] == [1] and masks.send_channels(mask, 4)[0][3] == [1]


def test_latency_model_and_break_even():
    link = parlab.core.link.Link(2e-3, 6.25e6)  # α = 2 ms, 50 Mbit/s
    assert cost.edge_latency(0.1, 0, 0, 1, link) == 0.1
    t = cost.edge_latency(0.1, 6250, 3, 2, link)
    assert t == pytest.approx(0.05 + 3 * 2e-3 + 1e-3)
    beta = cost.break_even_bandwidth(0.1, 6250, 3, 2, 2e-3)
    assert cost.edge_latency(0.1, 6250, 3, 2, parlab.core.link.Link(2e-3, beta)) == pytest.approx(0.1)
    assert cost.break_even_bandwidth(0.001, 6250, 3, 2, 2e-3) == math.inf


@pytest.mark.parametrize("kwargs,match", [({"world_size": 3}, "world_size=3"),
                                          ({"batch": 0}, "batch=0"), ({"repeats": 0}, "repeats=0"),
                                          ({"link": "5G"}, "5G"),
                                          ({"images": torch.zeros(4, 16, 16)}, "shape")])
def test_edge_bad_input_fails_before_any_process(no_launch, net, kwargs, match):
    args = {"images": torch.zeros(4, 1, 16, 16), "world_size": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        edge.run_edge(net, **args)


def test_exchange_refuses_backward():
    with pytest.raises(RuntimeError, match="inference"):
        edge.ExchangeChannels.backward(None, torch.zeros(1))


# ----------------------------------------------------------------------------- exercises, bench
RIGHT = {"job-bytes": 2 * 63 / 64 * 1.3e9 * 4,
         # sequential (0.18 + 0.06 + C_A + C_B) ÷ crossover's longest term, job A's P + C_A
         "crossover-gpu": (0.24 + 4 * 126e-6 + 2 * 63 / 64 * 3.6e9 / 25e9)
         / (0.18 + 2 * 63 * 2e-6 + 2 * 63 / 64 * 2.6e9 / 25e9),
         "kv-batch": 283,  # ⌊(4·80e9 − 2·8,030,261,248) / (8192 · 2·32·8·128·2)⌋
         "break-even": 40_000 / (0.010 - 0.003), "search-latency": 35.28,
         "edge-total": 3 * (4 * 3 * 8 * (8 * 8 + 4 * 4) + 3 * 10) * 4}


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_exercises_check_without_telling(name, capsys):
    from parlab.serving import exercises

    ex = exercises.exercise(name)
    assert ex.check(RIGHT[name]) and not ex.check(RIGHT[name] * 1.5) and not ex.check("?")
    out = capsys.readouterr().out
    assert f"{RIGHT[name]:g}" not in out and f"{RIGHT[name]:,}" not in out


def test_bench_runs_small(capsys):
    from parlab.serving import bench

    assert bench.main(["--world-sizes", "2", "--links", "100Gb-IB", "--steps", "1", "--repeats",
                       "1", "--skip-edge"]) == 0
    out = capsys.readouterr().out
    assert "crossover" in out and "vs seq" in out and "A100 time" in out and "model" in out


def test_a_failing_thread_is_raised_without_waiting_for_the_others():
    """A job whose peer failed would block on its collective: the rank must not wait for it."""
    import threading

    release = threading.Event()

    waited_out = threading.Event()

    class Blocked:
        def run(self, hook, step):
            if not release.wait(30):
                waited_out.set()

    class Broken:
        def run(self, hook, step):
            raise RuntimeError("job B broke")

    with pytest.raises(RuntimeError, match="job B broke"):
        sharing._run_threads(schedules.concurrent(["A", "B"], 1), {"A": Blocked(), "B": Broken()})
    assert not waited_out.is_set()  # raised while A was still blocked, not after its 30 s wait
    release.set()
