"""Refresh a chapter's golden cells: execute it, keep outputs only where they are golden.

    python tools/update_golden.py notebooks/00_collectives.ipynb

Runs the notebook with papermill at its stored parameters into build/golden/, copies back the
outputs of the cells marked golden (metadata "keep_output": true, source starting with
"# NBVAL_CHECK_OUTPUT"), strips every other output, execution count and run metadata
(papermill, widget state), and writes the notebook in place. nbval then checks those outputs on
every `make test`.
"""

import pathlib
import sys

import nbformat
import papermill


def is_golden(cell) -> bool:
    return cell.cell_type == "code" and bool(cell.metadata.get("keep_output"))


def strip(nb) -> None:
    """What `nbstripout --keep-count` leaves, plus an execution count on golden cells (nbval
    skips a cell without one as "unrun")."""
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    count = 0
    for index, cell in enumerate(nb.cells):
        cell["id"] = str(index)  # nbstripout's normalised ids
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.execution_count = None
            if is_golden(cell):
                count += 1
                cell.execution_count = count
            else:
                cell.outputs = []


def main(paths: list[str]) -> int:
    for name in paths:
        path = pathlib.Path(name).resolve()
        out = path.parent.parent / "build" / "golden" / path.name
        out.parent.mkdir(parents=True, exist_ok=True)
        papermill.execute_notebook(str(path), str(out), kernel_name="python3",
                                   cwd=str(path.parent), progress_bar=False)
        executed = nbformat.read(out, as_version=4)
        original = nbformat.read(path, as_version=4)
        by_id = {c.get("id"): c for c in executed.cells}
        for cell in original.cells:
            if is_golden(cell):
                ran = by_id.get(cell.get("id"))
                cell.outputs = [o for o in ran.outputs if o.get("output_type") != "display_data"] \
                    if ran is not None else []
        strip(original)
        nbformat.write(original, path)
        print(f"{path.name}: {sum(map(is_golden, original.cells))} golden cells refreshed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
