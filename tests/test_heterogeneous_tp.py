"""Chapter 11, hetero-tp: uneven tensor + sequence parallel shards by speed equal `single` at world
sizes 1–4 (even and uneven splits, padded and exact collectives); the uneven collectives move the
right values and exactly the closed forms' bytes; the LP's ratios; bad input named before launch."""

import pytest

import parlab
from parlab.engine.runner import make_config
from parlab.heterogeneous import cost, tp_shares
from parlab.heterogeneous.explore import tp as ex_tp

STEPS = 2


@pytest.fixture(scope="module")
def single():
    return parlab.run("single", steps=STEPS)


CASES = [(1, None, "lp", "exact"),
         (2, None, "even", "padded"), (2, [1, 0.25], "lp", "exact"), (2, [1, 0.5], "proportional", "padded"),
         (3, None, "even", "exact"), (3, [1, 1, 0.5], "lp", "padded"),
         (3, [1, 0.5, 0.5], "proportional", "exact"),
         (4, None, "even", "padded"), (4, [1, 1, 1, 0.5], "lp", "exact"), (4, [1, 1, 1, 0.5], "lp", "padded")]


@pytest.mark.parametrize("world_size,speeds,shard,collective", CASES)
def test_hetero_tp_matches_single_and_bytes_equal_closed_form(single, world_size, speeds, shard, collective):
    r = parlab.run("hetero-tp", world_size=world_size, steps=STEPS, speeds=speeds, shard=shard,
                   collective=collective)
    assert r.compare(single).match
    split = r.outputs[0].extras["split"]
    assert split == cost.tp_split(r.config)
    expected = cost.tp_bytes(r.config)
    for phase in ("tp-forward", "tp-backward", "sp-grad-sync"):
        assert r.bytes_per_rank(phase=phase) == [b[phase] for b in expected], phase
    assert r.bytes_per_rank() == cost.hetero_tp_prediction(r.config).bytes_sent


def test_uneven_splits_follow_speed():
    cfg = make_config("hetero-tp", world_size=4, speeds=[1, 1, 1, 0.5], shard="lp")
    split = cost.tp_split(cfg)
    assert split["columns"] == [39, 38, 38, 13] and split["tokens"] == [10, 10, 9, 3]
    assert cost.tp_split(make_config("hetero-tp", world_size=3, shard="even"))["columns"] == [43, 43, 42]
    lp3 = cost.tp_split(make_config("hetero-tp", world_size=3, speeds=[1, 1, 0.5]))
    assert lp3["heads"] == [2, 1, 1]  # 4·w = [1.68, 1.68, 0.64]: at least one head each
    assert tp_shares.cut(4, [1, 1, 1, 0.05]) == [1, 1, 1, 1] and tp_shares.cut(13, [3, 1]) == [10, 3]
    assert cost.tp_split(make_config("hetero-tp", world_size=2, speeds=[1, 0.5],
                                     shard="proportional"))["columns"] == [85, 43]


def test_lp_ratios_balance_the_devices_and_a_slow_link_moves_them():
    speeds, f = [1, 1, 1, 0.5], 0.1
    w, t_star = tp_shares.solve(speeds, f)
    assert sum(w) == pytest.approx(1)
    assert [(f + x) / s for x, s in zip(w, speeds)] == pytest.approx([t_star] * 4)  # all finish together
    halves = [1, 0.5, 0.25, 0.125]
    free, _ = tp_shares.solve(halves, f)
    padded, _ = tp_shares.solve(halves, f, kappa=1.0, variant="padded")
    assert max(padded) < max(free) - 0.1  # padding pays for the largest share: the LP shrinks it
    # on the tiny GPT a 1GbE link's collectives outweigh the compute (κ ≫ 1): balance the messages
    slow_link = make_config("hetero-tp", world_size=4, speeds=[1, 1, 1, 0.5], link="1GbE")
    assert cost.tp_kappa(slow_link) > 10 and cost.tp_split(slow_link)["tokens"] == [8, 8, 8, 8]


@pytest.mark.parametrize("sizes", [[6, 2, 2, 2], [3, 3, 3, 1], [2, 1, 3]])
def test_uneven_collectives_values_and_bytes(sizes):
    rows = ex_tp.measure_collectives(sizes, inner=8, repeats=1)
    for row in rows:
        assert row["ok"], row["variant"]
        assert row["sent"] == row["closed"], row["variant"]
    n, total = len(sizes), sum(sizes)
    assert rows[0]["sent"] == [2 * (n - 1) * max(sizes) * 8 * 4] * n  # padded: (N−1)·M each way
    assert sum(rows[1]["sent"]) == 2 * (n - 1) * total * 8 * 4  # exact: (N−1)·S in all, each way


def test_uneven_bytes_closed_form():
    assert cost.uneven_bytes("all_gather", "padded", [6, 2, 2, 2], 1, 0) == 18 * 4
    assert [cost.uneven_bytes("all_gather", "exact", [6, 2, 2, 2], 1, r) for r in range(4)] == \
        [40, 40, 40, 24]  # S − S_{r+1} rows of 4 bytes
    assert [cost.uneven_bytes("reduce_scatter", "exact", [6, 2, 2, 2], 1, r) for r in range(4)] == \
        [24, 40, 40, 40]  # S − S_r
    assert cost.uneven_bytes("reduce_scatter", "padded", [5], 3, 0) == 0


@pytest.mark.parametrize("kwargs,named", [
    ({"world_size": 2, "speeds": [1, 0.5, 0.5]}, "speeds=[1, 0.5, 0.5]"),
    ({"world_size": 4, "speeds": [1, 1, 1, 0.05]}, "gives rank(s) [3] no work"),
    ({"world_size": 5, "shard": "even"}, "zero heads"),
    ({"world_size": 2, "collective": "ragged"}, "collective='ragged'"),
    ({"world_size": 2, "fixed": -0.5}, "fixed=-0.5"),
    ({"world_size": 2, "model": "mlp"}, "model='mlp'"),
    ({"world_size": 2, "checkpoint": True}, "checkpoint=True"),
])
def test_bad_input_is_named_before_launch(kwargs, named):
    with pytest.raises(ValueError) as info:
        make_config("hetero-tp", **kwargs)
    assert named in str(info.value)


def test_registered_exact():
    assert parlab.schemes()["hetero-tp"].exact


def test_diagnosis_names_a_disagreement_and_fits_f():
    speeds = [1, 1, 1, 0.5]
    base = {"speeds": speeds, "fixed": 0.1}
    even, lp = [0.25] * 4, [0.3, 0.3, 0.3, 0.1]
    rows = [{**base, "shard": "even", "work": even, "step_ms": 100.0, "model_ms": 10.0, "speedup": 1.0},
            {**base, "shard": "proportional", "work": even, "step_ms": 80.0, "model_ms": 9.0,
             "speedup": 1.25},
            {**base, "shard": "lp", "work": lp, "step_ms": 90.0, "model_ms": 8.0, "speedup": 100 / 90}]
    text = ex_tp.diagnosis(rows)
    assert "DISAGREE" in text and "why they disagree" in text
    rows[2].update(step_ms=100 / 1.75, speedup=1.75)  # (f + .25)/.5 ÷ (f + .1)/.5 = 1.75 at f = 0.1
    rows[1].update(step_ms=90.0, speedup=100 / 90, work=[0.28, 0.28, 0.28, 0.16])
    assert ex_tp.implied_fixed(rows[::2]) == pytest.approx(0.1)
    assert "the same" in ex_tp.diagnosis(rows)
