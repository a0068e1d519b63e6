"""Chapter 11, HAP at a real width (parlab.heterogeneous.explore.hap_real): hetero-hap's shapes-only
run is its real paced run without the numbers; at GPT-2 XL's width on an A100 + V100 over EDR IB
the search shards the large matmuls, each choice's reason adds up to the gain over replicating,
and the searched program's paced shapes-only run lands on the model within the computed
tolerance; at the tiny width the same search buys little (the contrast)."""

import pytest

import parlab
from parlab.heterogeneous import hap_time, program_search
from parlab.heterogeneous import programs as pg
from parlab.heterogeneous.explore import hap_real as hr

PACED = dict(world_size=2, speeds=[1, 0.5], clock="A100", link="NVLink", steps=2)


@pytest.mark.parametrize("program", ["dp col col row col col row", "rep row dp rep col col row"])
def test_a_shapes_only_hap_run_is_the_real_run_without_its_numbers(program):
    real = parlab.run("hetero-hap", program=program, shard="proportional", **PACED)
    shapes = parlab.run("hetero-hap", program=program, shard="proportional", shapes_only=True, **PACED)
    assert shapes.step_times == real.step_times  # virtual time: equal, not within 1%
    assert shapes.timeline == real.timeline
    assert shapes.ledger == real.ledger
    assert shapes.losses is None and shapes.state is None


def test_the_tiny_gpts_lines_are_those_counted_at_two_and_three_units():
    """The compute model is counted at half and all of each operator's units; on the tiny GPT every
    kernel stays on one side of its ridge point, so the line passes through the counts at u = 2
    and 3 (where the chapter counted it before) to rounding."""
    from parlab.core.shapes import shapes
    from parlab.heterogeneous.explore.hap import WIDE_BATCH

    cfg = hr.tiny_config(hr.real_config(1, batch_size=WIDE_BATCH, shapes_only=True))
    prof, m = hap_time.profile(cfg), cfg.model_config
    for op in pg.OPS:
        for choice in pg.CHOICES[op]:
            for u in (2, 3):
                with shapes():
                    work = hap_time._count(*hap_time._harness(op, choice, u, m, cfg.batch_size), cfg)
                    if op == "stream":
                        ends = hap_time._count(*hap_time._ends_harness(u, m, cfg.batch_size), cfg)
                for phase in hap_time.PHASES:
                    price = prof.clock.price(work[phase])
                    if op == "stream":
                        price += prof.clock.price(ends[phase]) / m.n_layer
                    assert prof.seconds(op, choice, phase, u) == pytest.approx(price, rel=1e-9), \
                        (op, choice, phase, u)


@pytest.fixture(scope="module")
def real():
    cfg = hr.real_config(2)
    return cfg, program_search.synthesise(cfg)


def test_at_a_real_width_the_search_shards_the_large_matmuls(real):
    cfg, found = real
    assert all(found.program[op] != pg.REPLICATE for op in ("c_attn", "c_fc", "mlp_proj"))
    slow = found.weights[1]
    assert 0.15 < slow < 0.25  # about its FLOP share (1/4), less what its collectives cost it
    why = hr.reasons(cfg, found)
    assert why["exact"] and why["consistent"]  # saved − added = the gain; every kept op says why
    g = hr.gain(cfg, found)
    assert g["gain"] > 1.2  # 1.32× in A100 time: 59.59 against 78.85 ms replicated


def test_the_model_meets_the_paced_shapes_only_run_within_the_tolerance(real):
    cfg, found = real
    row = hr.measure(cfg, found, steps=3)
    assert row["within"]
    assert row["tolerance_ms"] < 0.03 * row["model_ms"]  # a tolerance that still says something


def test_at_the_tiny_width_the_search_buys_little(real):
    cfg, found = real
    tiny = hr.tiny_config(cfg)
    tiny_found = program_search.synthesise(tiny)
    g = hr.gain(tiny, tiny_found)
    assert g["gain"] < 1.1  # launch-bound: 1.05× over replicating everything
    assert g["slow_share"] == pytest.approx(program_search.W_MIN, abs=1e-4)  # the least it may
    assert hr.contrast(hr.gain(cfg, found), g)


@pytest.mark.parametrize("kwargs,named", [({"n_layer": 0}, "n_layer=0"), ({"n_layer": True}, "n_layer=True"),
                                          ({"devices": ("A100", "TPU")}, "devices=('A100', 'TPU')")])
def test_bad_input_is_named(kwargs, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        hr.real_config(**kwargs)
