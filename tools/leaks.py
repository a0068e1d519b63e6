"""Exercises that check, never tell: does a chapter print or write an answer its exercises accept?

An exercise's `check` hides its answer, but the chapter around it can still give it away: a table
cell, a summary line, a sentence of markdown. `leaked_answers(notebook, executed)` reads the
chapter's markdown and every output of its executed copy, takes each number written there, and asks
every exercise of the chapter (`parlab/<slug>/exercises.py`; chapter 00's is `parlab/core/`)
whether it would accept that number. A number that would be accepted is a leak.

A number counts as the answer when it is the answer as written: within half a unit of its last
written digit of the middle of the range the check accepts around it ("14" for an answer of 14 GPUs
accepted within ±0.5; not "13.6", which the same check also accepts but which says something else).
Only numbers written with three or more digits count in markdown ("240", "1.25", "24,576", "6.00"),
four or more in outputs ("24,576", "0.4286", "9.600e+10"): a "2" or a "14" stands in every chapter
for a hundred reasons and says nothing about an answer, and an output's measured times and ratios
change from run to run, so a three-digit "1.25×" there would now and then equal an answer by
chance — a flaky test, not a leak. An exercise whose answer is a short number must therefore make
the reader compute it from numbers of its own prompt (the chapter's conventions ask for GPU-scale
problems for that reason; whether the page states the formula that computes a short answer
from the prompt's numbers is `tools/formula_leaks.py`'s question). Text answers
("bias", "backward") are not searched: a chapter names its schemes and options everywhere.
The exercises' own cells are not read: they print the problem, which holds the numbers it needs.
A predict-then-run exercise (`kind="predict"`) is followed by the one code cell that measures what
the reader predicted: that cell shows its answer on purpose, after the prediction, and is not read
for that exercise.
"""

from __future__ import annotations

import importlib
import pathlib
import re

# (chapter, exercise, number): a number a chapter prints that an exercise accepts by coincidence,
# another quantity that happens to have the answer's value; each with what it is.
COINCIDENCES = {
    ("11_heterogeneous", "proportional-rows", 1024.0):
        "GPT-2 XL's 1024 tokens per sequence (HAP at a real width), not rank 1's share of rows",
}

# a number as people write it: 24,576 · 1.25 · 6.00 · 9.6e+10 · 462422016.0 (not part of a word)
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?([eE][-+]?\d+)?(?![\w])")


def chapter_exercises(notebook: pathlib.Path) -> list:
    """The `Exercise`s of the chapter `notebook` (NN_<slug>.ipynb ↔ parlab/<slug>/exercises.py)."""
    slug = notebook.stem.split("_", 1)[1] if not notebook.stem.startswith("00") else "core"
    module = importlib.import_module(f"parlab.{slug}.exercises")
    return list(module.EXERCISES) if hasattr(module, "EXERCISES") else list(module.exercises())


def telling_numbers(text: str, min_digits: int = 3) -> set[tuple[float, float]]:
    """(value, unit of its last written digit) of the numbers in `text` written with `min_digits`
    or more digits."""
    found = set()
    for whole, fraction, exponent in NUMBER.findall(text):
        digits = (whole + fraction).replace(",", "").replace(".", "").lstrip("0")
        if len(digits) >= min_digits:
            unit = 10.0 ** (-(len(fraction) - 1) if fraction else 0) * 10.0 ** int(exponent[1:] or 0)
            found.add((float(whole.replace(",", "") + fraction + exponent), unit))
    return found


def _is_exercise_cell(cell: dict, names: set[str]) -> bool:
    source = "".join(cell.get("source", ""))
    return cell["cell_type"] == "code" and any(f'"{n}"' in source or f"'{n}'" in source
                                               for n in names)


def _output_text(cell: dict) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        parts.append("".join(output.get("data", {}).get("text/plain", "")))
        parts.append("".join(output.get("data", {}).get("text/markdown", "")))
    return "\n".join(parts)


def leaked_answers(notebook: pathlib.Path, executed: dict) -> list[str]:
    """'exercise-name: 1.25 in cell 12' for every telling number of the chapter's markdown and
    outputs that an exercise of the chapter accepts; [] when nothing gives an answer away."""
    exercises = chapter_exercises(notebook)
    names = {e.name for e in exercises}
    leaks = []
    measured_by = None  # the predict exercise whose measuring cell comes next
    for index, cell in enumerate(executed["cells"]):
        if _is_exercise_cell(cell, names):
            measured_by = next((e.name for e in exercises if e.kind == "predict"
                                and f'exercise("{e.name}")' in "".join(cell.get("source", ""))), None)
            continue
        revealing, measured_by = (measured_by if cell["cell_type"] == "code" else None), \
            (None if cell["cell_type"] == "code" else measured_by)
        markdown = cell["cell_type"] == "markdown"
        text = "".join(cell.get("source", "")) if markdown else _output_text(cell)
        for number, unit in sorted(telling_numbers(text, 3 if markdown else 4)):
            for exercise in exercises:
                if (notebook.stem, exercise.name, number) in COINCIDENCES \
                        or exercise.name == revealing:
                    continue
                if _accepts(exercise, number) and \
                        abs(number - _accepted_middle(exercise, number)) <= unit / 2:
                    leaks.append(f"{exercise.name}: {number:g} in cell {index}")
    return leaks


def _accepts(exercise, number: float) -> bool:
    try:
        return bool(exercise.expect(number))
    except (TypeError, ValueError):  # a check that takes no number
        return False


def _accepted_middle(exercise, number: float) -> float:
    """The middle of the range of values around `number` that `exercise` accepts (its answer, for a
    check that accepts an interval): each edge found by doubling a step, then bisection."""
    edges = []
    for sign in (1.0, -1.0):
        inside, step = number, max(abs(number), 1.0) * 1e-12
        while _accepts(exercise, number + sign * step) and step < 1e3 * max(abs(number), 1.0):
            inside, step = number + sign * step, step * 2
        outside = number + sign * step
        for _ in range(80):
            middle = (inside + outside) / 2
            inside, outside = (middle, outside) if _accepts(exercise, middle) else (inside, middle)
        edges.append(inside)
    return sum(edges) / 2
