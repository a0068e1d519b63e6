"""What every chapter's exercises and opening promise (issues 51 and 52, "Across the chapters"):

- 5–6 exercises, at least two design problems at GPU scale (`kind="design"`) and at least one
  predict-then-run (`kind="predict"`) whose cell is followed by the code cell that measures it;
- an answer cell that says what to give: no "(say the unit)" placeholder where the check takes a
  number (the comment names the unit);
- one clock, named at the top: a `**Clock:**` line in the chapter's opening markdown.
"""

import json
import pathlib

import pytest

from tools.leaks import chapter_exercises

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _cells(path):
    return json.loads(path.read_text())["cells"]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_five_or_six_exercises_two_designs_and_a_prediction(path):
    exercises = chapter_exercises(path)
    kinds = [e.kind for e in exercises]
    assert 5 <= len(exercises) <= 6, \
        f"{path.name}: {len(exercises)} exercises ({[e.name for e in exercises]})"
    assert kinds.count("design") >= 2, f"{path.name}: design problems {kinds.count('design')} < 2"
    assert kinds.count("predict") >= 1, f"{path.name}: no predict-then-run exercise"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_a_prediction_is_followed_by_the_cell_that_measures_it(path):
    cells = _cells(path)
    names = {e.name for e in chapter_exercises(path)}
    for exercise in chapter_exercises(path):
        if exercise.kind != "predict":
            continue
        at = next(i for i, c in enumerate(cells)
                  if c["cell_type"] == "code" and f'exercise("{exercise.name}")' in "".join(c["source"]))
        following = [c for c in cells[at + 1:] if c["cell_type"] == "code"][:1]
        assert following, f"{path.name}: {exercise.name} is the last code cell: nothing measures it"
        source = "".join(following[0]["source"])
        assert not any(f'exercise("{n}")' in source for n in names), \
            f"{path.name}: {exercise.name} is followed by another exercise, not by its measurement"
        assert "answer" in source, \
            f"{path.name}: the cell after {exercise.name} should print the measurement beside `answer`"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_answer_cells_name_the_unit(path):
    for cell in _cells(path):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "answer = None" in source:
            assert "say the unit" not in source, f"{path.name}: {source!r}"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_the_chapter_names_its_clock_at_the_top(path):
    markdown = ["".join(c["source"]) for c in _cells(path)[:6] if c["cell_type"] == "markdown"]
    assert any(line.startswith("**Clock:**") for text in markdown for line in text.splitlines()), \
        f"{path.name}: no '**Clock:**' line in the opening markdown (the first six cells)"
