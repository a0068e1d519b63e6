"""Every chapter in notebooks/ runs top to bottom under papermill, into build/, at each parameter set
listed in its metadata (`metadata.parlab.ci_parameters`) that differs from its own parameters cell:
the stored defaults already run under nbval (`make notebooks`) and in the browser test, so running
them a third time here would only cost CI minutes."""

import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def stored_parameters(nb: dict) -> dict:
    """The literals of the notebook's `parameters` cell."""
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            values: dict = {}
            exec("".join(cell["source"]), {}, values)  # typed literals only (tools/hygiene.py)
            return values
    return {}


def _cases():
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        meta, stored = nb.get("metadata", {}).get("parlab", {}), stored_parameters(nb)
        for i, params in enumerate(meta.get("ci_parameters", [{}])):
            if all(stored.get(k) == v for k, v in params.items()):
                continue  # the stored defaults: nbval and the browser test run them
            label = ",".join(f"{k}={v}" for k, v in params.items()) or "defaults"
            yield pytest.param(path, params, i, id=f"{path.stem}[{label}]")


@pytest.mark.parametrize("path,params,index", list(_cases()))
def test_notebook_executes(path, params, index):
    import papermill

    out_dir = ROOT / "build" / "executed"
    out_dir.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(str(path), str(out_dir / f"{path.stem}-{index}.ipynb"),
                               parameters=params, kernel_name="python3", cwd=str(path.parent),
                               progress_bar=False, execution_timeout=600)  # a hung cell fails


def test_notebooks_are_stripped():
    """Stored notebooks carry outputs only in golden cells, and no run metadata (tools/hygiene.py)."""
    from tools.hygiene import check

    assert check(NOTEBOOKS) == []
