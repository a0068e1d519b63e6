"""Issue 46: a notebook's bad parameter is refused in the cell right after the parameters cell,
naming the parameter, its value and what it may be (`parlab.notebook_parameters`).

Before, twenty malformed values passed to chapter 01 with papermill failed late or never:
`world_size="four"` in the next cell as "'str' object cannot be interpreted as an integer",
`steps`, `link` and `clock` at code cell 15 after 15-25 s, `steps=10**12` at the cell's timeout,
and `accelerator="Z100"` not at all. Here every chapter's parameters cell is held against the
table, every parameter is refused a bad value by the one check, and each chapter, executed by
papermill with one bad value, stops in its check cell (one chapter executed, a kernel start; the
others checked in process).
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from parlab.core.checks import Bool, Choice, Float, Int
from parlab.notebook_parameters import CHAPTERS, Items, check_parameters
from tests.test_notebooks import NOTEBOOKS, stored_parameters

ROOT = pathlib.Path(__file__).resolve().parent.parent
STEMS = [path.stem for path in NOTEBOOKS]


def _notebook(stem: str) -> dict:
    return json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())


def _declared(nb: dict) -> list[str]:
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    namespace: dict = {}
    exec("".join(cell["source"]), namespace)  # typed literals only (tools/hygiene.py)
    return list(namespace["__annotations__"])


def test_every_chapter_has_a_range_for_every_parameter_and_checks_it_next():
    assert sorted(CHAPTERS) == STEMS
    for stem in STEMS:
        nb = _notebook(stem)
        assert _declared(nb) == [k for k in CHAPTERS[stem] if k != "rules"], stem
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert f'check_parameters("{stem}", globals())' in "".join(code[1]["source"]), stem


@pytest.mark.parametrize("stem", STEMS)
def test_the_stored_and_ci_parameters_pass(stem):
    nb = _notebook(stem)
    stored = stored_parameters(nb)
    assert check_parameters(stem, stored) is None  # nothing shown in the cell
    for params in nb["metadata"].get("parlab", {}).get("ci_parameters", []):
        check_parameters(stem, {**stored, **params})


def _bad(option):
    """A value of the wrong type for `option`."""
    return {Int: "four", Float: "fast", Bool: "yes", Choice: "Z100", Items: "[2, 4]"}[type(option)]


@pytest.mark.parametrize("stem", STEMS)
def test_every_parameter_is_refused_a_bad_value_by_name(stem):
    stored = stored_parameters(_notebook(stem))
    for name, option in CHAPTERS[stem].items():
        if name == "rules":
            continue
        value = _bad(option)
        with pytest.raises(ValueError, match=rf"^chapter {stem}'s parameters: {name}="
                                             rf"{re.escape(repr(value))} must be "):
            check_parameters(stem, {**stored, name: value})


@pytest.mark.parametrize("stem,params,message", [
    ("01_data_parallel", {"steps": 10 ** 12}, r"steps=1000000000000 must be an int >= 1 and <= 200"),
    ("01_data_parallel", {"world_size": 0}, r"world_size=0 must be one of \(2, 3, 4\)"),
    ("01_data_parallel", {"world_size": 4},
     r"world_size × accum_steps = 4 × 2 must divide the global batch of 12 rows"),
    ("01_data_parallel", {"accelerator": "Z100"}, r"accelerator='Z100' must be one of \('V100', "),
    ("01_data_parallel", {"clock": "Z100"}, r"clock='Z100' must be one of \('wall', 'V100', "),
    ("01_data_parallel", {"link": "2GbE"}, r"link='2GbE' must be one of \('1GbE', '10GbE', "),
    ("00_collectives", {"sweep_world_sizes": [2, 99]},
     r"sweep_world_sizes\[1\]=99 must be an int >= 2 and <= 16"),
    ("00_collectives", {"sweep_world_sizes": []}, r"sweep_world_sizes=\[\] must be a list of 1 to 4"),
    ("13_planner", {"scale_dims": ["dp", "xy"]}, r"scale_dims\[1\]='xy' must be one of \('dp', "),
    ("11_heterogeneous", {"clock": "wall"}, r"clock='wall' must be one of \('V100', 'A100', 'H100'\)"),
    ("12_serving", {"density": 1.5}, r"density=1.5 must be a finite number >= 0 and <= 1"),
    ("09_asynchrony", {"straggler": float("nan")}, r"straggler=nan must be a finite number >= 1"),
])
def test_ranges_and_rules(stem, params, message):
    with pytest.raises(ValueError, match=rf"^chapter {stem}'s parameters: {message}"):
        check_parameters(stem, {**stored_parameters(_notebook(stem)), **params})


def test_an_unknown_chapter_or_a_missing_parameter_is_named():
    with pytest.raises(ValueError, match=r"chapter='99_nothing' must be one of \['00_collectives'"):
        check_parameters("99_nothing", {})
    with pytest.raises(ValueError, match=r"chapter 02_zero: parameter 'world_size' is not defined"):
        check_parameters("02_zero", {})


# One bad value per chapter, every kind of mistake the issue lists at least once.
BAD = {"00_collectives": {"world_size": "four"}, "01_data_parallel": {"accelerator": "Z100"},
       "02_zero": {"steps": 10 ** 12}, "03_tensor_parallel": {"link": "2GbE"},
       "04_pipeline": {"clock": "Z100"}, "05_local_learning": {"world_size": 10 ** 9},
       "06_context_parallel": {"steps": 0}, "07_expert_parallel": {"link": "2GbE"},
       "08_compression": {"clock": "Z100"}, "09_asynchrony": {"world_size": -1},
       "10_subnet": {"steps": 10 ** 12}, "11_heterogeneous": {"clock": "Z100"},
       "12_serving": {"link": "2GbE"}, "13_planner": {"world_size": "four"}}


# Executed with papermill: one chapter, a wrong type refused where papermill injects it (a kernel's
# start, ~10 s on a loaded machine: one proves the wiring). Every chapter's check cell is the one
# call right after its parameters cell (held by
# test_every_chapter_has_a_range_for_every_parameter_and_checks_it_next) and its BAD value — types,
# ranges and choices — is refused by that call in this process
# (test_each_chapters_bad_value_is_refused_in_process).
EXECUTED = ["00_collectives"]


@pytest.mark.parametrize("stem", STEMS)
def test_each_chapters_bad_value_is_refused_in_process(stem):
    (name, value), = BAD[stem].items()
    with pytest.raises(ValueError, match=rf"^chapter {stem}'s parameters: {name}="
                                         rf"{re.escape(repr(value))} must be "):
        check_parameters(stem, {**stored_parameters(_notebook(stem)), name: value})


@pytest.mark.slow
@pytest.mark.parametrize("stem", EXECUTED)
def test_papermill_stops_a_bad_value_in_the_check_cell(stem, tmp_path, monkeypatch):
    """Code cells: 1 the parameters, 2 papermill's injected ones, 3 the check: the run stops
    there, with a ValueError naming the parameter and its value."""
    import papermill

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's parlab
    (name, value), = BAD[stem].items()
    with pytest.raises(papermill.PapermillExecutionError) as err:
        papermill.execute_notebook(str(ROOT / "notebooks" / f"{stem}.ipynb"),
                                   str(tmp_path / "out.ipynb"), parameters=BAD[stem],
                                   kernel_name="python3", cwd=str(ROOT / "notebooks"),
                                   progress_bar=False, execution_timeout=120)
    assert err.value.exec_count == 3 and "check_parameters" in err.value.source
    assert err.value.ename == "ValueError"
    assert err.value.evalue.startswith(f"chapter {stem}'s parameters: {name}={value!r} must be ")
