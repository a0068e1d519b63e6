"""ZeRO-1/2/3 and PyTorch's sharded schemes: equal to the single process, bytes exact, memory measured."""

import functools

import pytest

import parlab
from parlab.zero import shard as zero_shard
from parlab.zero.cost import memory_formula, step_bytes
from parlab.zero.shard import FlatLayout

STAGES = {"zero1": 1, "zero2": 2, "zero3": 3}
ODD_MLP = {"d_hidden": 37, "n_layer": 2}  # units of 111, 1406, 114 parameters
STEPS = 2


@pytest.fixture
def runs(run_cached):
    return functools.partial(run_cached, steps=STEPS)


def unit_numels(result) -> list[int]:
    return [FlatLayout.from_meta(m).numel for m in result.outputs[0].extras["layouts"]]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("scheme", list(STAGES))
def test_zero_matches_single(runs, scheme, world_size):
    comparison = runs(scheme, world_size).compare(runs("single"))
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("scheme,world_size", [("zero1", 4), ("zero2", 3), ("zero3", 4)])
def test_zero_matches_single_with_padding_and_sgd(runs, scheme, world_size):
    options = dict(model="mlp", model_config=ODD_MLP, optimizer="sgd")
    result = runs(scheme, world_size, **options)
    assert result.memory[0]["padding"] > 0  # no unit divides by the world size
    assert result.compare(runs("single", **options)).match


@pytest.mark.parametrize("scheme,world_size", [("torch-zero", 2), ("torch-zero", 4),
                                               ("torch-fsdp", 2), ("torch-fsdp", 4)])
def test_torch_sharded_match_single(runs, scheme, world_size):
    comparison = runs(scheme, world_size).compare(runs("single"))
    assert comparison.match, comparison.problems


@pytest.mark.parametrize("scheme", ["zero1", "zero3", "ddp-naive"])
def test_activation_checkpointing_is_exact_and_saves_activations(runs, scheme):
    plain, recomputed = runs(scheme, 2), runs(scheme, 2, checkpoint=True)
    assert recomputed.compare(runs("single")).match
    assert recomputed.memory[0]["activations"] < 0.5 * plain.memory[0]["activations"]


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("scheme", list(STAGES))
def test_ledger_bytes_are_the_closed_form(runs, scheme, world_size):
    steps, result = 2, runs(scheme, world_size)
    expect = steps * step_bytes(STAGES[scheme], unit_numels(result), world_size)
    assert result.bytes_per_rank() == [expect] * world_size


def test_zero3_moves_one_and_a_half_times_ddp(runs):
    n, steps = 4, 2
    zero1, zero3, ddp = runs("zero1", n), runs("zero3", n), runs("ddp-naive", n)
    assert 2 * zero3.bytes_per_rank()[0] == 3 * zero1.bytes_per_rank()[0]  # exact: 3 vs 2 collectives
    ratio = zero3.bytes_per_rank()[0] / ddp.bytes_per_rank()[0]
    assert ratio == 1.5  # the default GPT's units divide by 4: no padding, per-tensor remainders 0
    units = len(unit_numels(zero3))
    for phase in ("param-gather-fwd", "param-gather-bwd"):
        assert sum(1 for r in zero3.ledger if r["phase"] == phase and r["rank"] == 0) == \
            units * steps
    assert sum(1 for r in zero3.ledger if r["op"] == "reduce_scatter" and r["rank"] == 0) == \
        units * steps


@pytest.mark.parametrize("scheme", list(STAGES))
def test_memory_is_the_padded_formula_and_within_5_percent_of_zero_paper(runs, scheme):
    n, stage = 4, STAGES[scheme]
    result = runs(scheme, n, model="mlp", model_config=ODD_MLP)
    numels = unit_numels(result)
    psi, padded = sum(numels), sum(-(-u // n) * n for u in numels)
    exact = memory_formula(stage, padded, n)  # what a rank must hold, padding included
    paper = memory_formula(stage, psi, n)
    for mem in result.memory:
        for kind in ("params", "grads", "optimizer"):
            assert mem[kind] == exact[kind], kind
            assert abs(mem[kind] - paper[kind]) <= 0.05 * paper[kind], kind


@pytest.mark.parametrize("prefetch", [False, True])
def test_zero3_holds_one_gathered_block_beside_the_root_two_with_prefetch(runs, prefetch):
    from parlab.zero.zero_engine import gathered_peak_bytes

    result = runs("zero3", 2, prefetch=prefetch)
    numels = dict(zip([m["name"] for m in result.outputs[0].extras["layouts"]], unit_numels(result)))
    largest_block = max(v for k, v in numels.items() if k != "root")
    blocks = [v for k, v in numels.items() if k != "root"]  # in the order they run
    assert result.memory[0]["gathered_peak"] == gathered_peak_bytes(blocks, numels["root"], prefetch)
    assert result.memory[0]["gathered_peak"] == 4 * (numels["root"] + (1 + prefetch) * largest_block)


@pytest.mark.parametrize("world_size,options", [
    (2, {}), (3, {}), (4, {"checkpoint": True}),
    (4, dict(model="mlp", model_config=ODD_MLP, optimizer="sgd"))])
def test_zero3_prefetch_is_exact_and_moves_the_same_bytes(runs, world_size, options):
    on = runs("zero3", world_size, prefetch=True, **options)
    off = runs("zero3", world_size, prefetch=False, **options)
    single = runs("single", **{k: v for k, v in options.items() if k != "checkpoint"})
    assert on.compare(single).match and off.compare(single).match
    assert on.bytes_per_rank() == off.bytes_per_rank()
    ops = [[(r["op"], r["phase"], r["numel"]) for r in res.ledger if r["rank"] == 0] for res in (on, off)]
    assert sorted(ops[0]) == sorted(ops[1])  # the same collectives, only issued earlier


@pytest.mark.parametrize("scheme,world_size,options", [
    ("zero1", 2, {}), ("zero2", 3, {}), ("zero3", 2, {"prefetch": True}), ("zero3", 4, {})])
def test_ring_collectives_are_exact_with_gloos_bytes(runs, scheme, world_size, options):
    """algo="ring": the all-gathers and reduce-scatters on the pipelined ring give the same
    result as `single` and move exactly the bytes of gloo's (flat units are padded to N)."""
    ring = runs(scheme, world_size, algo="ring", **options)
    assert ring.compare(runs("single")).match
    assert ring.bytes_per_rank() == runs(scheme, world_size, **options).bytes_per_rank()
    assert {r["algo"] for r in ring.ledger if r["phase"] != "loss"} <= {"ring"}


def test_units_and_formulas():
    from parlab.models.gpt import GPT, GPTConfig

    units = zero_shard.unit_modules(GPT(GPTConfig()))
    assert [name for name, _, _ in units] == ["blocks.0", "blocks.1", "blocks.2", "blocks.3", "root"]
    assert [n for n, _ in units[-1][2]] == ["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"]
    assert memory_formula(0, 100, 4) == {"params": 400, "grads": 400, "optimizer": 800}
    assert memory_formula(3, 100, 4) == {"params": 100, "grads": 100, "optimizer": 200}
    assert step_bytes(3, [10], 4) == 3 * (12 - 3) * 4  # padded to 12
    with pytest.raises(ValueError, match="stage=4"):
        memory_formula(4, 1, 1)


@pytest.mark.parametrize("kwargs,match", [
    (dict(scheme="zero2", world_size=5), "batch_size=12 is not divisible by world_size=5"),
    (dict(scheme="zero3", save_every=2), "save_every=2 needs save_dir"),
    (dict(scheme="zero1", save_every=-1, save_dir="x"), "save_every=-1"),
    (dict(scheme="zero3", resume=True), "resume=True needs save_dir"),
    (dict(scheme="zero3", fail_at_step=9, steps=3), r"fail_at_step=9 .* steps=3"),
    (dict(scheme="zero3", world_size=2, fail_rank=2), r"fail_rank=2 .* world_size=2"),
    (dict(scheme="torch-fsdp", world_size=5), "world_size=5"),
    (dict(scheme="zero1", checkpoint="yes"), "checkpoint='yes'"),
])
def test_bad_input_is_a_value_error_naming_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        parlab.run(**kwargs)


def test_bench_all_zero3_regime_row_sets_the_forward_gather_to_the_forward_compute():
    """`bench all`'s prefetch row: the link makes the forward all-gathers last as long as the
    measured forward compute, and the ceiling is the ideal-overlap formula of the same numbers."""
    import re

    from parlab.engine.bench_regimes import zero3_regime_row

    row = zero3_regime_row(repeats=1, steps=4)
    f, b, a_f, a_b, r = (float(x) for x in re.search(
        r"F ([\d.]+) ms, B ([\d.]+) ms, A_f ([\d.]+) ms, A_b ([\d.]+) ms, R ([\d.]+) ms",
        row["detail"]).groups())
    assert abs(a_f - f) <= 0.11 and row["ratio"] > 0
    assert abs(row["ceiling"] - (f + b + a_f + a_b + r) / (max(f, a_f) + max(b, a_b + r))) < 0.01


def test_prefetch_report_prints_estimates_beside_measurements_and_diagnoses_a_shortfall():
    from parlab.core.link import Link
    from parlab.zero.explore.prefetch import report_lines

    regime = {"link": Link(20e-6, 20e6, "20 MB/s"), "forward": 0.02, "backward": 0.035,
              "gather_f": 0.02, "gather_b": 0.02, "scatter": 0.02}
    ideal = {False: 0.115, True: 0.075}
    good = report_lines({"regime": regime, "ideal": ideal, "measured": {False: 0.12, True: 0.08}})
    assert "1.50× faster measured, 1.53× at ideal overlap" in good[-1]
    assert any("   120 CPU ms measured,    115 CPU ms ideal" in line for line in good)
    short = report_lines({"regime": regime, "ideal": ideal, "measured": {False: 0.12, True: 0.11}})
    assert "less than half the ideal gain" in short[-1]
    slower = report_lines({"regime": regime, "ideal": ideal, "measured": {False: 0.1, True: 0.11}})
    assert "disagrees with the model" in slower[-1]


def test_when_to_use_follows_the_measured_memory_links_prefetch_and_checkpointing():
    """The verdict's words follow its numbers: flip states against activations, the gathers
    against the compute, or prefetch's step times, and the line says the other thing."""
    import pandas as pd

    from parlab.zero.explore import summary as ex_summary

    def row(scheme, params, grads, optimizer, activations):
        return {"scheme": scheme, "world_size": 4, "params": params, "grads": grads,
                "optimizer": optimizer, "activations": activations,
                "states": params + grads + optimizer}

    table = pd.DataFrame([row("ddp-naive", 400, 400, 800, 100), row("zero1", 400, 400, 200, 100),
                          row("zero2", 400, 100, 200, 100), row("zero3", 100, 100, 200, 100)])
    comm = [{"scheme": "zero1", "link": "slow", "measured_ms": 10.0},
            {"scheme": "zero3", "link": "slow", "measured_ms": 15.0}]
    first, third = ex_summary.stage_lines(table, comm)
    assert "zero1 held 0.62× DDP's model states (optimizer state sharded)" in first
    assert "zero2 held 0.44×" in first and "nothing to lose" in first
    assert "zero3 held 0.25×" in third and "1.50× zero1's" in third
    trade = {"saved": 0.5, "time_ratio": 1.3, "expected_ratio": 1.3, "recompute_ms": 8.0,
             "forward_ms": 10.0, "backward_ms": 20.0, "clock": "A100"}
    line = ex_summary.states_or_activations_line(table, trade)
    assert "(4.00×: states still dominate" in line and "saved 50% of them for 1.30×" in line
    table.loc[table.scheme == "zero3", "activations"] = 800
    assert "activations dominate" in ex_summary.states_or_activations_line(table, trade)
    assert "the recompute was 0.80 of a forward" in line and "paced A100 time, section 7)" in line

    regime = {"forward": 1.0, "backward": 2.0, "gather_f": 0.5, "gather_b": 0.5, "scatter": 0.5}
    report = {"regime": regime, "measured": {False: 4.0, True: 2.0}, "ideal": {False: 4.5, True: 3.0}}
    line = ex_summary.prefetch_line(report)
    assert "(covered), A_b + R 1000 ms against B 2000 ms (covered)" in line
    assert "with prefetch it ran 2.00× faster (1.50× at ideal" in line
    slow = {"regime": {**regime, "gather_f": 2.0}, "measured": {False: 2.0, True: 4.0},
            "ideal": report["ideal"]}
    line = ex_summary.prefetch_line(slow)
    assert "F 1000 ms (not covered)" in line and "at 0.50× the speed: no gain" in line
    lines = ex_summary.when_to_use(table, comm, trade, report)
    assert lines[0] == "When to use it (from this run):" and len(lines) == 5
