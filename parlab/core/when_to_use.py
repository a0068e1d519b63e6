"""A chapter's closing verdict, "When to use it (from this run)": one printer for every chapter.

Each chapter's `explore.summary` computes its lines from the run's own measurements (a threshold,
a ratio, the direction of a comparison, and the diagnosis where the run contradicts the model);
this prints them under the one heading the chapters share and returns them for tests.
"""

from __future__ import annotations

HEADING = "When to use it (from this run):"


def when_to_use(lines: list[str], show: bool = True) -> list[str]:
    """Print `lines` as bullets under HEADING when `show`; return them unchanged."""
    if show:
        print(HEADING)
        for line in lines:
            print(f"  - {line}")
    return lines
