"""Chapters 00 and 01: every exercise's check accepts the right answer and rejects a wrong one, and
never prints the answer."""

import pytest

from parlab.core import exercises as ch00
from parlab.data_parallel import exercises as ch01

CHAPTERS = [(ch00, name) for name in ch00.answers()] + [(ch01, name) for name in ch01.answers()]


def test_every_exercise_has_an_answer_and_4_to_6_per_chapter():
    for chapter in (ch00, ch01):
        names = [ex.name for ex in chapter.exercises()]
        assert 4 <= len(names) <= 6 and sorted(names) == sorted(chapter.answers())


@pytest.mark.parametrize("chapter,name", CHAPTERS, ids=[f"{c.__name__.split('.')[1]}-{n}"
                                                       for c, n in CHAPTERS])
def test_check_accepts_right_rejects_wrong(chapter, name, capsys):
    ex = chapter.exercise(name)
    right = chapter.answers()[name]
    assert ex.check(right)
    assert not ex.check(right * 1.5 + 1) and not ex.check(None) and not ex.check("many")
    out = capsys.readouterr().out
    assert f"{right}" not in out and f"{right:,}" not in out
    assert ex.hint_text and ex.solution_text and ex.prompt
