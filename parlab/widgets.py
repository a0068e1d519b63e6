"""One widget panel for every chapter: buttons for the knobs, an output that re-runs on change.

    panel = experiment_panel(parlab.explore.collectives.show_all_reduce,
                             {"world_size": [1, 2, 3, 4], "size_kb": [1, 64, 1024]},
                             world_size=2, size_kb=64)

Each knob is a row of ToggleButtons (a click, not a drag: easy for people and for the browser
test). On every change the output is cleared and `fn(**values)` runs again; the first line it
shows is always the current values (`world_size=2, size_kb=64`), so a reader — and the browser
test — can see which experiment the output belongs to. `fn` lives in the package: a notebook
never defines the code it runs. The panel is an extra: every notebook also prints its key
results in plain cells.
"""

from __future__ import annotations

from collections.abc import Callable


def header(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def experiment_panel(fn: Callable, controls: dict[str, list], run_now: bool = True, **defaults):
    import ipywidgets as w
    from IPython.display import display

    buttons = {}
    for name, options in controls.items():
        value = defaults.get(name, options[0])
        if value not in options:
            raise ValueError(f"{name}={value!r} is not one of the choices {options}")
        buttons[name] = w.ToggleButtons(options=options, value=value, description=name,
                                        style={"button_width": "auto", "description_width": "initial"})
        buttons[name].add_class(f"parlab-control-{name}")
    output = w.Output()
    output.add_class("parlab-output")

    def rerun(_change=None):
        import matplotlib.pyplot as plt

        values = {name: b.value for name, b in buttons.items()}
        output.clear_output(wait=True)
        # JupyterLab 4.6 sends widget messages through a kernel subshell, whose thread draws every
        # stale pyplot figure after each message (pyplot's post_execute hook) while this callback
        # draws the same figure: the two renders collide and the plot comes out blank. With pyplot
        # non-interactive here, only the explicit show below draws.
        with plt.ioff(), output:
            print(header(values))
            try:
                fn(**values)
            except Exception as err:  # noqa: BLE001 - show it in the panel, keep the panel alive
                print(f"error: {type(err).__name__}: {err}")
            if plt.get_fignums():
                plt.show()

    for b in buttons.values():
        b.observe(rerun, names="value")
    panel = w.VBox(list(buttons.values()) + [output])
    panel.add_class("parlab-panel")
    if run_now:
        rerun()
    display(panel)
    return panel
