"""The exercise machinery checks without telling."""

from parlab.exercises import Exercise, find, numeric, one_of


def test_check_accepts_the_right_answer_and_never_prints_it(capsys):
    ex = Exercise("ring", "bytes?", numeric(1.75e9, rtol=0.01), "hint", "2·(N−1)/N·S = 1.75 GB")
    assert ex.check(1.75e9) and ex.check(1.76e9)
    assert not ex.check(1e9) and not ex.check("1.75e9") and not ex.check(float("nan"))
    out = capsys.readouterr().out
    assert "1.75" not in out and "right" in out and "not yet" in out
    ex.solution()
    assert "1.75 GB" in capsys.readouterr().out


def test_one_of_and_find():
    ex = Exercise("which", "which?", one_of("Ulysses", "ulysses attention"))
    assert ex.check("  ULYSSES ") and not ex.check("ring")
    assert find([ex], "which") is ex
    try:
        find([ex], "nope")
    except ValueError as error:
        assert "nope" in str(error)
    else:
        raise AssertionError("an unknown exercise must be refused")
