"""Chapters 02, 03, 04 and 06 end with exercises whose check says right or wrong, never the answer.

For every exercise: the worked answer (recomputed here from the chapter's closed forms, not read
back from the check) is accepted, a wrong one and a non-number are refused, and nothing printed by
`check` contains the answer. Hints and solutions exist for each.
"""

import pytest

from parlab.context_parallel import exercises as cp_exercises
from parlab.pipeline import exercises as pp_exercises
from parlab.tensor_parallel import exercises as tp_exercises
from parlab.zero import exercises as zero_exercises

# The right answers, worked out independently of the checks (see each exercise's solution).
RIGHT = {
    zero_exercises: {
        "zero2-gpu": 32 / (2 + 14 / 64),               # billions: 2Ψ + 14Ψ/N <= 32 GB
        "zero3-fit": 14,                                # 16·70e9/N <= 80e9
        "zero3-bytes-gpu": (3 * 7 / 8 * 14 / 300) / (6 * 7e9 * 8192 / 150e12),  # comm s / compute s
        "zero3-padding": (1734 + 4 * 6454) * 4,         # n_embd=40: Σ ⌈u/3⌉ · 4 B
        "zero2-bytes": 2 * 3 * 82640,                   # n_embd=40: 2 · 3/4 · Ψ · 4 B
        "llama-microbatch": 33,  # ⌊(80e9 − 16Ψ/16) / (32 · 8192 · 4096 · 2 B)⌋, Ψ = 8.03e9
    },
    tp_exercises: {
        "tp-or-zero3-bytes": 4.5 * 12288,                # 14·BTC = 63·C² B per GPU and block
        "gpt3-sp-fit": 175e9 * 16 / 64 / 1e9 + 8 * 12 * 2048 * 12288 / 8 * (34 + 80) / 1e9,
        "tp-forward-bytes": 4 * 2 * 12 * 32 * 40 * 4,     # C = 40
        "balanced-reshard": 4,  # 240 · 8192·28672·2 B / (m · 50 GB/s) < 1 s: m > 2.25
        # C where 72C²/F·(1/8 − 1/16) = 8C·(1.875/β_IB − 1.75/β_NV): NDR 50 GB/s, NVLink 4 450 GB/s
        "tp-past-node-width": 128 * (1.875 / 50e9 - 1.75 / 450e9) * 400e12 / 72,
        # comm 4·1.75·2C/β ÷ (72C²/(8F) + comm), C = 8,192, H100: 400 TFLOP/s, 450 GB/s
        "tp-exposed-mfu": 0.2549 / (1.5099 + 0.2549),
    },
    pp_exercises: {
        "interleaved-bubble": 5,                        # 7/(16v+7) < 0.1: v >= 4, v | 10 layers
        "1f1b-memory-gpu": 13 * 6 * 0.4,                # GB: (p - s) · L/p · 0.4, p=16, s=3
        # s, v = 5: m(f+b)·(v·m+p-1)/(v·m) + (2v-1)·m·T·C·2 B / 50 GB/s
        "p2p-bytes": (16 * 0.12 * 87 / 80 + 9 * 16 * 4096 * 8192 * 2 / 50e9) * 1e3,  # ms
        "lost-mfu": 0.55 * 24 * 0.12 / (31 * 0.12 + 0.15),  # MFU · m(f+b) / ((m+p-1)(f+b) + exposed)
        "schedule-fits": "zb",                          # gpipe 57+80, interleaved v=4 57+24.4 > 80
        "bubble-measured": 1 / 7,                       # (p-1)/(m+p-1), p=2, m=6
    },
    cp_exercises: {
        "ring-bytes-gpu": 7 * 2 * 8 * 131072 * 128 * 2 / 1e6,  # 34·4.29 GB/cp <= 20 GB: cp = 8
        "contiguous-efficiency": 17 / 31,               # (2cp+1)/(4cp-1)
        "hiding-cp": 64,                                # t >= 2·n_kv·F/(n_h·β_NDR) = 2000: cp <= 65
        "usp-ib-bytes": 2 * 65536 * 128 * 2 / 1e6,      # (r-1)·2·(n_kv/u)·(T/r)·hs·2 B
        "allgather-bytes": 4 * 1 * 2 * 12 * 4 * 64 * 8 * 4,  # layers·(cp-1)·2·B·nh·(T/cp)·hs·4 B
        "blend-halo": 11,                                # 1/(h+2) <= 0.08
    },
}

CASES = [(module, ex) for module in RIGHT for ex in module.EXERCISES]


def test_every_chapter_has_four_to_six_exercises_all_with_an_answer_here():
    for module, answers in RIGHT.items():
        names = [e.name for e in module.EXERCISES]
        assert 4 <= len(names) <= 6, module.__name__
        assert set(names) == set(answers), module.__name__


@pytest.mark.parametrize("module,ex", CASES, ids=[e.name for _, e in CASES])
def test_check_accepts_the_right_answer_and_refuses_a_wrong_one(module, ex, capsys):
    right = RIGHT[module][ex.name]
    assert ex.check(right) is True
    if isinstance(right, str):
        wrong = "ring" if right != "ring" else "zigzag"
    else:
        wrong = right * 1.5 + 1
        assert ex.check(float("nan")) is False
        assert ex.check(str(right)) is False
    assert ex.check(wrong) is False
    assert ex.check(None) is False
    out = capsys.readouterr().out
    assert "right" in out and "not yet" in out
    if not isinstance(right, str):
        for shown in (f"{right:g}", f"{right:,}", f"{right:.3g}"):
            assert shown not in out.replace(ex.name, ""), (ex.name, shown)


@pytest.mark.parametrize("module,ex", CASES, ids=[e.name for _, e in CASES])
def test_each_exercise_has_a_hint_and_a_solution_on_request(module, ex, capsys):
    assert module.exercise(ex.name) is ex
    ex.hint()
    ex.solution()
    out = capsys.readouterr().out
    assert "no hint" not in out and "no written solution" not in out
    with pytest.raises(ValueError, match="nope"):
        module.exercise("nope")
