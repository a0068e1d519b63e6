"""Chapter 01: every DP variant equals "single", its ledger equals the closed form, bad input fails."""

import functools

import pytest

import parlab
from parlab.core import cost
from parlab.data_parallel import cost as dp_cost
from parlab.data_parallel.bucket_packing import plan_buckets

VARIANTS = ["ddp-naive", "ddp-bucketed", "ddp-overlap", "ddp-priority", "dear", "torch-ddp"]
# (world_size, model, optimizer, accum_steps): every world size, both optimizers, both models,
# with and without accumulation, in few runs
CASES = [(1, "mlp", "sgd", 2), (2, "gpt", "adamw", 1), (3, "gpt", "sgd", 2), (4, "mlp", "adamw", 1),
         (4, "gpt", "adamw", 3)]
STEPS = 2


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS)


def numels_of(result):
    return [v.numel() for v in result.state.values()]  # state keeps parameter order


@pytest.mark.parametrize("world_size,model,optimizer,accum", CASES)
@pytest.mark.parametrize("scheme", VARIANTS)
def test_matches_single(runs, scheme, world_size, model, optimizer, accum):
    ref = runs("single", model=model, optimizer=optimizer)
    result = runs(scheme, world_size, model, optimizer, accum_steps=accum)
    comparison = result.compare(ref)
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("world_size,model,optimizer,accum", CASES)
@pytest.mark.parametrize("scheme", VARIANTS[:5])
def test_ledger_bytes_equal_closed_form(runs, scheme, world_size, model, optimizer, accum):
    result = runs(scheme, world_size, model, optimizer, accum_steps=accum)
    numels = numels_of(result)
    for rank in range(world_size):
        expect = dp_cost.bytes_per_step(scheme, numels, world_size, rank, **result.config.options)
        for step in range(STEPS):
            for op in ("all_reduce", "reduce_scatter", "all_gather"):
                got = result.bytes_per_rank(op=op, step=step)[rank]
                assert got == expect.get(op, 0), (rank, step, op)
    # every variant moves the ring all-reduce's 2(N-1)/N·Ψ·4 bytes, up to chunk remainders
    psi, n = sum(numels), world_size
    per_step = sum(result.bytes_per_rank()) / n / STEPS
    messages = len(dp_cost.messages(scheme, numels, n, **result.config.options))
    assert abs(per_step - 2 * (n - 1) / n * psi * 4) <= 2 * 4 * messages * n


def test_dear_is_the_all_reduce_split_in_two(runs):
    n = 4
    result = runs("dear", n, "gpt", "adamw", accum_steps=1)
    scattered = result.bytes_per_rank(op="reduce_scatter")
    gathered = result.bytes_per_rank(op="all_gather")
    buckets = dp_cost.bucket_numels(numels_of(result), result.config.options["bucket_mb"], n)
    for rank in range(n):
        ring = STEPS * 4 * sum(cost.ring_all_reduce(s, n, rank)[0] for s in buckets)
        assert scattered[rank] == gathered[rank] == ring // 2
        assert scattered[rank] + gathered[rank] == ring


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_dear_on_the_ring_matches_single_with_the_same_bytes(runs, world_size):
    """DeAR's halves on the hand-written ring (`algo="ring"`): the same values as `single`
    and exactly the bytes of gloo's halves (its shards are padded to equal lengths)."""
    ref = runs("single", model="gpt", optimizer="adamw")
    ring = runs("dear", world_size, "gpt", "adamw", accum_steps=1, algo="ring")
    comparison = ring.compare(ref)
    assert comparison.match, comparison.problems
    gloo = runs("dear", world_size, "gpt", "adamw", accum_steps=1)
    for op in ("reduce_scatter", "all_gather"):
        assert ring.bytes_per_rank(op=op) == gloo.bytes_per_rank(op=op)


def test_torch_ddp_reduces_every_gradient_once(runs):
    result = runs("torch-ddp", 4, "mlp", "adamw", accum_steps=1)
    psi = sum(numels_of(result))
    for step in range(STEPS):
        reduced = sum(r["numel"] for r in result.ledger
                      if r["rank"] == 0 and r["step"] == step and r["op"] == "all_reduce")
        assert reduced == psi


def test_torch_ddp_with_torch_comm_records_nominal_bytes(runs):
    """PyTorch's own all-reduce cannot be observed: every bucket is a nominal ring record, and the
    nominal total equals what our hook-through-Comm run measures."""
    ref = runs("single", model="gpt", optimizer="adamw")
    result = runs("torch-ddp", 2, "gpt", "adamw", comm="torch")
    hooked = runs("torch-ddp", 2, "gpt", "adamw")
    assert result.compare(ref).match
    assert result.ledger and all(r["nominal"] and r["algo"] == "torch" for r in result.ledger)
    assert not any(r["nominal"] for r in hooked.ledger)
    assert result.bytes_per_rank() == hooked.bytes_per_rank()


def test_plan_buckets_by_hand():
    # MLP: w0 128, b0 64, w1 4096, b1 64, w2 4096, b2 64, w3 4096, b3 64, w4 192, b4 3 elements;
    # a cap of 4160 floats holds one hidden layer (4096 + 64); packed from the back
    numels = [128, 64, 4096, 64, 4096, 64, 4096, 64, 192, 3]
    assert plan_buckets(numels, 4160 * 4 / 2 ** 20) == [[9, 8, 7], [6, 5], [4, 3], [2, 1], [0]]
    assert plan_buckets(numels, 0) == [[i] for i in reversed(range(10))]
    assert plan_buckets(numels, 25) == [list(reversed(range(10)))]


@pytest.mark.parametrize("bucket_mb", [0, 4160 * 4 / 2 ** 20, 0.02, 25])
def test_bucket_count_in_ledger_is_predicted(runs, bucket_mb):
    result = runs("ddp-bucketed", 2, "mlp", "adamw", bucket_mb=bucket_mb)
    expect = len(plan_buckets(numels_of(result), bucket_mb))
    assert expect == {0: 10, 25: 1}.get(bucket_mb, expect)
    for rank in range(2):
        for step in range(STEPS):
            ops = [r for r in result.ledger if r["rank"] == rank and r["step"] == step]
            assert len(ops) == expect
    assert result.compare(runs("single", model="mlp", optimizer="adamw")).match


OVERLAP_LEAD = 0.10  # overlap: the first bucket leaves ≥ 10% of backward's paced span before its end


def test_overlap_starts_communicating_during_backward(runs):
    """In virtual time (`clock="A100"` on the real NVLink), so the order is the priced compute's
    and the link's, never this machine's load: ddp-overlap issues its first all-reduce while a
    good part of backward is still to run (71% of the span in every step; asserted ≥ 10%),
    ddp-bucketed only once backward has ended (exactly: no tolerance, virtual time is exact). A run
    whose overlap communicated only after backward would fail the first, as ddp-bucketed shows it
    can."""
    for scheme, during in (("ddp-overlap", True), ("ddp-bucketed", False)):
        result = runs(scheme, 2, "gpt", "adamw", accum_steps=1, clock="A100", link="NVLink")
        for rank in range(2):
            events = [e for e in result.timeline if e["rank"] == rank]
            comms = [e["t0"] for e in events if e["kind"] == "comm"]
            backwards = [e for e in events if e["name"] == "backward"]
            assert len(backwards) == STEPS, (scheme, rank, backwards)
            for b in backwards:  # every step: the step's first message after its backward began
                first = min(t for t in comms if t >= b["t0"])
                lead = (b["t1"] - first) / (b["t1"] - b["t0"])  # share of backward still to run
                if during:
                    assert lead >= OVERLAP_LEAD, (scheme, rank, b, first, lead)
                else:
                    assert first >= b["t1"], (scheme, rank, b, first, lead)


def test_the_chapter_link_shows_each_lesson_in_virtual_time():
    """Chapter 01's measurement (`MEASURE` on `MEASURE_LINK`, the real 10GbE, A100 time): bucketing
    beats per-tensor all-reduces, overlap (WFBP) beats bucketing, DeAR beats WFBP — exactly
    reproducible, so each ordering is a fact of the model and the link, not of this machine (on
    NVLink the tiny GPT's launches outweigh its transfers and the order reverses)."""
    from parlab.data_parallel.explore.measure import MEASURE, MEASURE_LINK, run_variants

    variants = ["ddp-naive", "ddp-bucketed", "ddp-overlap", "dear"]
    rs = run_variants(4, MEASURE_LINK, 4, variants=variants, clock="A100", **MEASURE)
    step = [rs[v].step_time(1) for v in variants]
    assert step == sorted(step, reverse=True) and step[0] > 1.5 * step[-1], dict(zip(variants, step))


def test_the_paced_measurement_runs_on_one_clock(monkeypatch):
    """Chapter 01 §5 on the paced clock: every run on the real link in virtual time, no loopback
    run and no fit of gloo on this CPU (the model takes the link alone)."""
    from types import SimpleNamespace

    from parlab.core.clock import resolve
    from parlab.data_parallel.explore import measure

    calls = []

    def fake_runs(world_size, link, steps, variants=measure.VARIANTS, clock="wall", **options):
        calls.append((link, clock))
        run = SimpleNamespace(config=SimpleNamespace(link=link), clock=resolve(clock))
        return {v: run for v in variants}

    def no_raw_fit(*args, **kwargs):
        raise AssertionError("gloo fitted on this CPU's raw clock in a paced chapter")

    monkeypatch.setattr(measure, "run_variants", fake_runs)
    monkeypatch.setattr(measure, "measure_alpha_beta", no_raw_fit)
    regime = measure.measure_regime(2, "10GbE", "A100")
    assert calls == [("10GbE", "A100")] and regime["loopback"] == {} and regime["clock"].paced
    assert measure.model_terms(regime, 2) == {"floor": (0.0, float("inf")), "overhead_s": 0.0}


@pytest.mark.parametrize("algo", ["ring", "tree"])
def test_handwritten_algorithms(runs, algo):
    ref = runs("single", model="gpt", optimizer="adamw")
    for scheme in ("ddp-bucketed", "ddp-overlap"):
        assert runs(scheme, 3, "gpt", "adamw", algo=algo).compare(ref).match


def test_dear_and_priority_schedules():
    from parlab.core.launch import launch
    from tests import workers_dp

    out = launch(workers_dp.schedule_orders, 2, {})[0]
    dear, priority = out["dear"], out["ddp-priority"]
    # updates run as the next forward reaches each bucket: front layers first
    assert dear["applied_order"] == dear["forward_order"]
    assert priority["applied_order"] == priority["forward_order"]
    assert dear["forward_order"] == sorted(dear["forward_order"], reverse=True)
    # DeAR: all reduce-scatters (backward order), then the all-gathers in forward order
    ops = dear["ops"]
    scatters = [numel for op, numel in ops if op == "reduce_scatter"]
    gathers = [numel for op, numel in ops if op == "all_gather"]
    assert [op for op, _ in ops] == ["reduce_scatter"] * len(scatters) + ["all_gather"] * len(gathers)
    assert gathers == list(reversed(scatters))  # all_gather numel is the full bucket
    # priority: the first layers' unit overtakes partitions of later units released after backward
    order = [b for b, _, _ in priority["launch_order"]]
    first = priority["forward_order"][0]
    fifo = sorted(order, key=lambda b: -priority["forward_order"].index(b))  # backward order
    assert order != fifo
    assert order.index(first) < max(i for i, b in enumerate(order) if b != first)


def test_cost_model_orders_the_variants():
    numels = [3072, 1024] + [32, 32, 3072, 1024, 32, 32, 4096, 4096] * 4 + [32, 32]
    free = {v: dp_cost.predict_step_time(v, numels, 4, 0.01, 0.02, 0.005, 0.0, float("inf"))
            for v in dp_cost.VARIANTS}
    for v, p in free.items():  # no communication cost: step = compute
        assert p["step_s"] == pytest.approx(0.035) and p["exposed_s"] == pytest.approx(0.0), v
    slow = {v: dp_cost.predict_step_time(v, numels, 4, 0.01, 0.02, 0.005, 50e-6, 3e6)["step_s"]
            for v in dp_cost.VARIANTS}
    assert slow["ddp-naive"] > slow["ddp-bucketed"] > slow["ddp-overlap"] > slow["dear"]
    assert slow["ddp-priority"] < slow["ddp-overlap"]


@pytest.mark.parametrize("kwargs,match", [
    (dict(scheme="ddp-overlap", world_size=2, accum_steps=4),
     r"batch_size=12 is not divisible by world_size=2 .* accum_steps=4 = 8"),
    (dict(scheme="dear", accum_steps=0), "accum_steps=0"),
    (dict(scheme="ddp-bucketed", bucket_mb=-1), "bucket_mb=-1"),
    (dict(scheme="ddp-bucketed", bucket_mb="big"), "bucket_mb='big'"),
    (dict(scheme="ddp-priority", partition_kb=0), "partition_kb=0"),
    (dict(scheme="ddp-priority", credit=0), "credit=0"),
    (dict(scheme="ddp-overlap", algo="magic"), "algo='magic'"),
    (dict(scheme="torch-ddp", comm="nccl"), "comm='nccl'"),
    (dict(scheme="dear", algo="tree"), "algo='tree'"),
    (dict(scheme="ddp-naive", world_size=5), "batch_size=12 is not divisible by world_size=5"),
])
def test_bad_input_is_a_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        parlab.run(**kwargs)


@pytest.mark.parametrize("scheme", VARIANTS[:5])
def test_memory_is_measured(runs, scheme):
    n = 2
    result = runs(scheme, n, "gpt", "adamw", accum_steps=1)
    numels = numels_of(result)
    psi = sum(numels)
    buckets = {"ddp-naive": 0, "dear": sum(dp_cost.bucket_numels(numels, 0.05, n))}.get(
        scheme, sum(dp_cost.bucket_numels(numels, 0.05)))
    for mem in result.memory:
        assert mem["params"] == mem["grads"] == 4 * psi
        assert mem["optimizer"] == 8 * psi  # AdamW: two moments, in one or many optimizers
        assert mem["comm_buffers"] == 4 * buckets
        assert mem["activations"] > 0


def test_deferred_updates_compose_with_activation_checkpointing(runs):
    ref = runs("single", model="gpt", optimizer="adamw")
    for scheme in ("dear", "ddp-priority"):  # forward pre-hooks also fire in the recompute
        assert runs(scheme, 2, "gpt", "adamw", checkpoint=True).compare(ref).match, scheme


def test_bench_measures_steps_and_exposure(runs):
    from parlab.data_parallel.bench import compute_profile, exposed_fraction

    result = runs("dear", 2, "gpt", "adamw", accum_steps=1)
    times = result.step_times  # the one definition: step start to next step start, slowest rank
    assert len(times) == STEPS and sum(times) <= result.wall_s
    for rank in range(2):  # a step's interval holds that step's forward and backward on every rank
        for step, seconds in enumerate(times):
            compute = sum(e["t1"] - e["t0"] for e in result.timeline
                          if e["rank"] == rank and e["name"] in ("forward", "backward")
                          and e.get("args", {}).get("step") == step)
            assert 0 < compute <= seconds, (rank, step)
    assert 0.0 < exposed_fraction(result, warmup=0) < 1.0
    assert all(t > 0 for t in compute_profile(result, warmup=0))


def test_dp_ideal_steps_reduce_to_the_textbook_peaks_and_charge_late_buckets():
    """With every bucket handed over at the start of backward, the ideal steps are the textbook
    ones (WFBP F + max(B, C) + O, DeAR max(F + O, C/2) + max(B, C/2)); a bucket handed over at
    the end of backward keeps its whole transfer (all-reduce, or DeAR's reduce-scatter half)."""
    from parlab.engine.bench_regimes import dp_ideal_steps

    f, b, o = 1.0, 2.0, 0.25
    early = [(0.0, 100), (0.0, 300)]
    for c in (1.0, 2.0, 4.0, 6.0):
        ideal = dp_ideal_steps(f, b, o, early, c)
        assert ideal["ddp-naive"] == pytest.approx(f + b + c + o)
        assert ideal["ddp-overlap"] == pytest.approx(f + max(b, c) + o)
        assert ideal["dear"] == pytest.approx(max(f + o, c / 2) + max(b, c / 2))
    late = [(0.0, 300), (b, 100)]  # a quarter of the bytes handed over when backward ends
    ideal = dp_ideal_steps(f, b, o, late, 2.0)  # the late bucket: 0.5 s of all-reduce
    assert ideal["ddp-overlap"] == pytest.approx(f + b + 0.5 + o)
    assert ideal["dear"] == pytest.approx(max(f + o, 1.0) + b + 0.25)


def test_bench_all_regime_rows_choose_the_link_from_measured_forward_and_backward():
    """`bench all`'s WFBP and DeAR rows: the link is where the ideal ceiling, computed from the
    measured F, B, O and bucket hand-over times, peaks; each row carries that ceiling."""
    import re

    from parlab.engine.bench_regimes import dp_regime_rows

    rows = dp_regime_rows(repeats=1, steps=4, rows_per_rank=24)
    assert ["vs ddp-naive" in rows[0]["name"], "DeAR" in rows[1]["name"]] == [True, True]
    for row in rows:
        k = float(re.search(r"C = ([\d.]+)·B", row["name"]).group(1))
        f, b, o, n, c = (float(x) for x in re.search(
            r"F ([\d.]+) ms, B ([\d.]+) ms, O ([\d.]+) ms, (\d+) buckets, C ([\d.]+) ms",
            row["detail"]).groups())
        assert row["ratio"] > 0 and row["low"] <= row["ratio"] <= row["high"]
        assert abs(c - k * b) <= 0.01 * b + 0.11 and n >= 2
        if "DeAR" in row["name"]:  # at most the textbook peak 1 + (F + O)/(2B), and above 1
            assert 1.0 < row["ceiling"] <= 1 + (f + o) / (2 * b) + 0.01
        else:  # at most (F + 2B + O)/(F + B + O)
            assert 1.0 < row["ceiling"] <= (f + 2 * b + o) / (f + b + o) + 0.01
            assert "naive measured" in row["detail"]


def test_when_to_use_verdicts_follow_the_measured_numbers():
    """Each "When to use it" line computes its direction from the numbers it is given: flip the
    step times and the verdict flips."""
    from parlab.core.link import Link
    from parlab.data_parallel.explore import summary as ex_summary

    link = Link(1e-3, 1e6, "slow")  # α·β = 1,000 B
    faster = {"ddp-naive": 2.0, "ddp-bucketed": 1.0, "ddp-overlap": 1.0, "dear": 0.5}
    slower = {"ddp-naive": 1.0, "ddp-bucketed": 2.0, "ddp-overlap": 2.0, "dear": 2.0}
    exposed = {"ddp-naive": 0.5, "ddp-overlap": 0.2, "dear": 0.1}
    line = ex_summary.bucketing_line(faster, [10, 100, 1000], 4, link)
    assert "α·β = 1,000 B" in line and "2 of the model's 3" in line and "fusing paid" in line
    assert "did not pay" in ex_summary.bucketing_line(slower, [10, 100, 1000], 4, link)
    line = ex_summary.overlap_line(faster, exposed)
    assert "communication ÷ compute = 1.00" in line and "overlap paid" in line
    assert "no gain here" in ex_summary.overlap_line(slower, exposed)
    assert "worth it" in ex_summary.dear_line(faster, exposed, 1.5)
    assert "no gain in this regime" in ex_summary.dear_line(slower, exposed)
    assert "below WFBP's, yet not its step" in ex_summary.dear_line(slower, exposed, 1.0)
    assert "wait where the model idealizes" in ex_summary.dear_line(slower, exposed, 1.5)
    rows = [{"bucket_mb": 0.1, "buckets": 9, "step_s": 3.0, "predicted_s": 2.0, "link": link},
            {"bucket_mb": 4.0, "buckets": 1, "step_s": 1.0, "predicted_s": 1.0, "link": link}]
    line = ex_summary.bucket_size_line(rows, world_size=2)
    assert "best bucket here was 4 MiB (1 bucket), 3.00× faster than 0.1 MiB (9 buckets)" in line
    assert "picked 4 MiB — agree" in line and "2(N−1)α = 2 ms" in line
    rows[0]["predicted_s"] = 0.5
    assert "picked 0.1 MiB — differ" in ex_summary.bucket_size_line(rows, world_size=2)
