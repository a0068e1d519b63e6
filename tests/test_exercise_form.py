"""One exercise form in every chapter, and no chapter that gives an answer away.

Every chapter's exercise cells read `q = exercises.exercise(name)`, print `q.prompt`, start from
`answer = None` and end with `right = q.check(answer)` (no dict of answers, no pre-filled guess, no
bespoke check function). Every chapter that lists its answers (`answers()`) has each accepted, a
wrong one and `None` refused, and the answer never printed. `tools.leaks` finds a chapter that prints
or writes an accepted answer; here it is shown to find one, and to let a mere neighbour pass. The
browser test runs it on every chapter's real execution (tests/test_browser.py).
"""

import importlib
import json
import pathlib
import re

import pytest

from tools.leaks import chapter_exercises, leaked_answers, telling_numbers

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
FORM = re.compile(r'^q = exercises\.exercise\("([\w-]+)"\)\nprint\(q\.prompt\)\nanswer = None  # [^\n]+\n'
                  r"right = q\.check\(answer\)$")


def _cells(path):
    return json.loads(path.read_text())["cells"]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_exercise_cell_has_the_one_form(path):
    names = {e.name for e in chapter_exercises(path)}
    sources = ["".join(c["source"]) for c in _cells(path) if c["cell_type"] == "code"]
    formed = {m.group(1) for s in sources if (m := FORM.match(s))}
    assert formed == names, (f"{path.name}: exercises without a cell of the one form "
                             f"{sorted(names - formed)}, cells for no exercise {sorted(formed - names)}")
    for source in sources:
        assert "answers = {" not in source and ".check(0" not in source, (path.name, source)


def _with_answers():
    for path in CHAPTERS:
        slug = "core" if path.stem.startswith("00") else path.stem.split("_", 1)[1]
        module = importlib.import_module(f"parlab.{slug}.exercises")
        if hasattr(module, "answers"):
            yield pytest.param(path, module, id=path.stem)


@pytest.mark.parametrize("path,module", list(_with_answers()))
def test_answers_are_accepted_and_never_printed(path, module, capsys):
    exercises = {e.name: e for e in chapter_exercises(path)}
    for name, answer in module.answers().items():
        if name not in exercises:
            continue  # an answer a chapter keeps for a check of its own (00's run on this machine)
        ex = exercises[name]
        assert ex.check(answer), name
        assert not ex.check(None), name
        if isinstance(answer, (int, float)):
            assert not ex.check(answer * 1.5 + 1), name
    out = capsys.readouterr().out
    for answer in module.answers().values():
        if isinstance(answer, (int, float)) and len(telling_numbers(f"{answer:g}")):
            assert f"{answer:g}" not in out and f"{answer:,.0f}" not in out, answer


def test_the_leak_detector_finds_an_answer_and_lets_a_neighbour_pass():
    path = ROOT / "notebooks" / "07_expert_parallel.ipynb"
    from parlab.expert_parallel.exercises import answers

    capacity = answers()["capacity"]  # 10,240 assignments: accepted within ±0.5

    def notebook(text):
        return {"cells": [{"cell_type": "markdown", "source": [text]},
                          {"cell_type": "code", "source": ["ex.summary()"],
                           "outputs": [{"output_type": "stream", "text": [text]}]}]}

    assert leaked_answers(path, notebook(f"each expert takes {capacity:,} assignments")) == [
        "capacity: 10240 in cell 0", "capacity: 10240 in cell 1"]
    assert leaked_answers(path, notebook(f"an expert takes {capacity + 1:,} assignments")) == []
    assert leaked_answers(path, notebook("2 ranks, k = 1, 14 GPUs")) == []  # too short to tell
    # three digits tell in markdown, not in a run's output (its measured numbers vary by chance)
    short = {"cells": [{"cell_type": "markdown", "source": ["an answer: 15.0 steps"]},
                       {"cell_type": "code", "source": ["x"],
                        "outputs": [{"output_type": "stream", "text": ["15.0 ms"]}]}]}
    assert leaked_answers(path, short) == ["bias: 15 in cell 0"]
    assert telling_numbers("6.00 and 24,576 and 9.60e+10, 9.6e+10 and 14") == {
        (6.0, 0.01), (24576.0, 1.0), (9.6e10, 1e8)}
