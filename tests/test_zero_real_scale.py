"""parlab.zero.real_scale: ZeRO's closed forms at real shapes (gpt2-xl, llama3-8b) — model states
per stage (Rajbhandari et al., SC 2020), activations (Korthikanti et al., MLSys 2023), HSDP, CPU
offload (Ren et al., ATC 2021) and one step's memory profile — worked by hand here, and the states
checked against a shapes-only run of the gpt2 preset's width and vocabulary."""

import pytest

from parlab.zero import real_scale as rs
from parlab.zero.cost import memory_formula, mixed_precision_formula

LLAMA = 8_030_261_248


def test_psi_and_units_add_up():
    assert rs.psi("llama3-8b") == LLAMA and rs.psi("gpt2-xl") == 1_556_920_000
    root, blocks = rs.units("llama3-8b")
    assert len(blocks) == 32 and root + sum(blocks) == LLAMA
    assert root == 2 * 128256 * 4096 + 4096  # untied head and embedding, final RMSNorm


def test_stage_table_by_hand():
    rows = {(r["stage"], r["N"]): r for r in rs.stage_rows("llama3-8b", worlds=(8,))}
    act = 32 * 8192 * 4096 * 34  # selective recomputation, one sequence per rank
    assert rows[2, 8]["activations"] == act
    assert rows[2, 8]["total"] == pytest.approx(2 * LLAMA + 14 * LLAMA / 8 + act)
    assert rows[3, 8]["total"] == pytest.approx(16 * LLAMA / 8 + act)
    assert [rows[s, 8]["fits"] for s in range(4)] == [False, False, True, True]
    none = rs.activation_bytes("gpt2-xl", recompute="none")
    assert none == 48 * 1024 * 1600 * (34 + 5 * 25 * 1024 / 1600)
    assert rs.activation_bytes("gpt2-xl", 3, 512, "full") == 48 * 512 * 3 * 1600 * 2


def test_hsdp_priced_by_hand():
    one = rs.hsdp_price("llama3-8b", 1)
    assert one["fsdp_s"] == one["hsdp_s"] and one["hsdp_inter_bytes"] == 0
    two = rs.hsdp_price("llama3-8b", 2)
    nv, ib = (1e-6, 300e9), (2e-6, 25e9)  # NVLink 3, HDR InfiniBand
    fsdp = 3 * (15 * ib[0] + 15 / 16 * 2 * LLAMA / ib[1])
    hsdp = 3 * (7 * nv[0] + 7 / 8 * 2 * LLAMA / nv[1]) + 2 * ib[0] + 2 * LLAMA / 8 / ib[1]
    assert two["fsdp_s"] == pytest.approx(fsdp) and two["hsdp_s"] == pytest.approx(hsdp)
    assert two["hsdp_states"] == 16 * LLAMA / 8 and two["fsdp_states"] == 16 * LLAMA / 16


def test_offload_moves_four_psi_over_n():
    r = rs.offload_price("llama3-8b", 8)
    assert r["pcie_bytes"] == 4 * LLAMA / 8 and r["pcie_s"] == 4 * LLAMA / 8 / 32e9
    assert r["gpu_states"] == 2 * LLAMA and r["compute_s"] == pytest.approx(6 * LLAMA * 8192 / 150e12)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_profile_ends_at_the_stage_formula_and_ranks_the_peaks(stage):
    prof = rs.memory_profile("gpt2-xl", stage, 8)
    psi = rs.psi("gpt2-xl")
    assert prof[-1][1] == pytest.approx(sum(mixed_precision_formula(stage, psi, 8).values()))
    assert len(prof) == 2 + 2 * 48
    peaks = {s: max(b for _, b in rs.memory_profile("gpt2-xl", s, 8)) for s in (1, 2, 3)}
    assert peaks[3] < peaks[2] < peaks[1]


def test_bad_input_names_the_value():
    for call, word in [(lambda: rs.psi("gpt5"), "gpt5"), (lambda: rs.hsdp_price("gpt2-xl", 0), "nodes"),
                       (lambda: rs.activation_bytes("gpt2-xl", recompute="some"), "recompute"),
                       (lambda: rs.memory_profile("gpt2-xl", 4, 2), "stage")]:
        with pytest.raises(ValueError, match=word):
            call()


def test_exercise_answers_are_accepted():
    from parlab.zero import exercises

    assert exercises.answers()["llama-microbatch"] == 33  # ⌊(80e9 − LLAMA) / (32·8192·4096·2)⌋
    for name, answer in exercises.answers().items():
        assert exercises.exercise(name).check(answer), name


def test_states_match_a_shapes_only_run_at_gpt2_width():
    """The closed forms the tables use, against ZeRO-3 run shapes-only at the gpt2 preset's width and
    vocabulary (two layers, to keep it short): fp32 params, grads and Adam moments to the byte."""
    import parlab
    from parlab.models.gpt import GPTConfig, param_count
    from parlab.models.presets import PRESETS

    cfg = {"n_layer": 2}
    psi = param_count(GPTConfig(**{**PRESETS["gpt2"], **cfg}))
    run = parlab.run("zero3", world_size=2, model="gpt2", model_config=cfg, shapes_only=True,
                     clock="A100", steps=1, batch_size=2)
    want = memory_formula(3, psi, 2)
    got = run.memory[0]
    assert (got["params"], got["grads"], got["optimizer"]) == (want["params"], want["grads"],
                                                               want["optimizer"])
