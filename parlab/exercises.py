"""Exercises that check, never tell: every chapter ends with worked problems whose `check(answer)`
says right or wrong without printing the answer, a hint on request, and a solution the reader
unfolds on purpose (the scaling-book's style of GPU-scale worked problems).

    ex = Exercise("ring-bytes", "Bytes one rank sends in a ring all-reduce of 1 GB on 8 ranks?",
                  expect=numeric(2 * 7 / 8 * 1e9, rtol=0.01),
                  hint="Reduce-scatter then all-gather: each moves (N-1)/N of the buffer.",
                  solution="2·(N−1)/N·S = 1.75 GB")
    ex.check(1.75e9)   # prints "right" and returns True
    ex.hint()          # prints the hint
    ex.solution()      # prints the worked solution

A chapter's `exercises` module (`parlab/<slug>/exercises.py`) builds its exercises
(`EXERCISES = [...]`, `exercise(name)`); tests prove each check accepts the right answer and
rejects wrong ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


def numeric(expected: float, rtol: float = 0.01, atol: float = 0.0) -> Callable[[object], bool]:
    """A check that accepts a number within `rtol` (relative) or `atol` of `expected`."""
    def accepts(answer) -> bool:
        if isinstance(answer, bool) or not isinstance(answer, (int, float)) \
                or not math.isfinite(answer):
            return False
        return abs(answer - expected) <= max(atol, rtol * abs(expected))
    return accepts


def one_of(*accepted, normalise: Callable = lambda a: str(a).strip().lower()):
    """A check that accepts any of `accepted` (strings compared case- and space-insensitively)."""
    wanted = {normalise(a) for a in accepted}
    return lambda answer: normalise(answer) in wanted


KINDS = ("compute", "design", "predict")


@dataclass(frozen=True)
class Exercise:
    name: str
    prompt: str
    expect: Callable[[object], bool]  # accepts(answer) -> bool; never reveals the answer
    hint_text: str = ""
    solution_text: str = ""
    # "compute": work a quantity out; "design": choose a configuration at GPU scale, combining the
    # chapter's ideas; "predict": predict, then run the cell after the exercise, which measures it
    kind: str = "compute"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"exercise {self.name!r}: kind={self.kind!r} is not one of {KINDS}")

    def check(self, answer) -> bool:
        """Print whether `answer` is right; never the answer itself. `answer = None` (a cell's
        starting point) is not yet an answer."""
        if answer is None:
            print(f"{self.name}: no answer yet — set `answer` and run the cell again")
            return False
        right = bool(self.expect(answer))
        print(f"{self.name}: " + ("right" if right else
                                  "not yet — try again, or call .hint() for a nudge"))
        return right

    def hint(self) -> None:
        print(self.hint_text or "no hint for this one")

    def solution(self) -> None:
        """The worked solution: call it when you want to see it."""
        print(self.solution_text or "no written solution")


def find(exercises: list[Exercise], name: str) -> Exercise:
    for ex in exercises:
        if ex.name == name:
            return ex
    raise ValueError(f"exercise {name!r} is unknown; choose one of {[e.name for e in exercises]}")
