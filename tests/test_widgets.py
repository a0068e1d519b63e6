"""The panel says what changed: after a click its second line names each knob that moved, from the
previous value to the new one; the first run has no such line (no browser: built and clicked in
Python)."""

import pytest

from parlab.widgets import changes


def test_changes_name_what_moved_and_nothing_on_the_first_run():
    assert changes(None, {"world_size": 2}) == ""
    assert changes({"world_size": 2, "m": 4}, {"world_size": 2, "m": 4}) == ""
    assert changes({"world_size": 1, "m": 4}, {"world_size": 2, "m": 8}) == \
        "changed: world_size 1 → 2, m 4 → 8"


def test_the_panel_prints_the_change_after_a_click():
    pytest.importorskip("ipywidgets")
    from parlab.widgets import experiment_panel

    panel = experiment_panel(lambda world_size, size: print(f"ran {world_size} {size}"),
                             {"world_size": [1, 2, 4], "size": [8, 16]}, world_size=1)
    first = panel.children[-1].outputs[0]["text"].splitlines()
    assert first == ["world_size=1, size=8", "ran 1 8"]
    panel.children[0].value = 2
    assert panel.children[-1].outputs[0]["text"].splitlines() == \
        ["world_size=2, size=8", "changed: world_size 1 → 2", "ran 2 8"]
