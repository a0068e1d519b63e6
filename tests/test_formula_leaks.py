"""No chapter hands over a short answer by a formula: `tools.formula_leaks` reads every formula of a
chapter's markdown and evaluates it on the numbers an exercise's prompt gives its symbols; a one- or
two-digit answer the exercise accepts is a leak. Shown here to find one written in LaTeX, in plain
text and by a counted word ("8 ranks"), to let a choice among the prompt's numbers, a predict
exercise and a longer answer pass, and to find nothing in any chapter.
"""

import json
import pathlib

import pytest

from parlab.exercises import Exercise, numeric, one_of
from tools.formula_leaks import expression, formula_leaks, formulas_of, prompt_bindings

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _page(tmp_path, *markdown):
    path = tmp_path / "99_page.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": [m]} for m in markdown]}))
    return path


def test_latex_and_plain_formulas_become_expressions():
    assert expression(r"2\frac{N-1}{N}\Psi", latex=True) == ("2 * ( ( v_N - 1 ) / ( v_N ) ) * v_Ψ",
                                                             {"v_N", "v_Ψ"})
    assert expression(r"\lceil L / p \rceil", latex=True)[0] == "ceil ( v_L / v_p )"
    assert expression("2(N−1)·α", latex=False) == ("2 * ( v_N - 1 ) * v_α", {"v_N", "v_α"})
    assert expression("N", latex=False) is None  # a symbol alone computes nothing
    assert "2(N−1)" in formulas_of("each rank sends in 2(N−1) rounds of the ring")
    assert "k/N" in formulas_of("backward masking uses `k/N` of the batch")
    assert prompt_bindings("On 8 ranks with p = 4 stages and m=16, α = 2 µs")["v_N"] == {8.0}
    assert prompt_bindings("an H100 node of 8")  == {}  # "H100" is no count of nodes


def test_a_short_answer_given_by_a_stated_formula_is_found(tmp_path):
    rounds = Exercise("rounds", "How many rounds does a ring all-reduce take at N = 8?",
                      expect=numeric(14, atol=0.5))
    counted = Exercise("rounds-8", "How many rounds does the ring take on 8 ranks?",
                       expect=numeric(14, atol=0.5))
    latex = _page(tmp_path, r"The ring takes $2(N-1)$ rounds of $S/N$ bytes.")
    assert formula_leaks(latex, [rounds, counted]) == [
        "rounds-8: 2(N-1) in cell 0 with N=8 gives it", "rounds: 2(N-1) in cell 0 with N=8 gives it"]
    plain = _page(tmp_path, "A ring all-reduce runs 2(N−1) rounds.")
    assert formula_leaks(plain, [rounds]) == ["rounds: 2(N−1) in cell 0 with N=8 gives it"]


def test_choices_predictions_and_long_answers_pass(tmp_path):
    page = _page(tmp_path, r"The bubble is $(p-1)/(m+p-1)$ of the step; tp stays $\le 8$, "
                           r"and the ring sends $2(N-1)S/N$ bytes.")
    choice = Exercise("tp", "Choose tp among 4, 8 and 16 for N = 9 GPUs.",
                      expect=numeric(8, atol=0.5), kind="design")  # (N−1) = 8 is an option anyway
    predicted = Exercise("bubble", "Predict the bubble at p = 4, m = 6.",
                         expect=numeric(1 / 3, atol=0.005), kind="predict")
    long = Exercise("bytes", "Bytes a rank sends for S = 1000 on N = 8?",
                    expect=numeric(1750, atol=0.5))
    text = Exercise("which", "Which is faster at N = 8?", expect=one_of("ring"))
    assert formula_leaks(page, [choice, predicted, long, text]) == []
    worked = Exercise("bubble-worked", "The bubble fraction at p = 4, m = 6 (a fraction)?",
                      expect=numeric(1 / 3, atol=0.005))
    assert formula_leaks(page, [worked]) == []  # 0.333… has more than two digits: leaks.py's
    half = Exercise("bubble-half", "The bubble fraction at p = 4, m = 4 (a fraction)?",
                    expect=numeric(3 / 7, atol=0.005))
    quarter = Exercise("bubble-quarter", "The bubble fraction at p = 3, m = 6 (a fraction)?",
                       expect=numeric(0.25, atol=0.005))
    assert formula_leaks(page, [half, quarter]) == [
        "bubble-quarter: (p-1)/(m+p-1) in cell 0 with m=6, p=3 gives it"]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_chapter_states_the_formula_of_a_short_answer(path):
    assert formula_leaks(path) == [], path.name
