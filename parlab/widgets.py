"""One widget panel for every chapter: buttons for the knobs, an output that re-runs on change.

    panel = experiment_panel(parlab.core.explore.show_all_reduce,
                             {"world_size": [1, 2, 3, 4], "size_kb": [1, 64, 1024]},
                             world_size=2, size_kb=64)

Each knob is a row of ToggleButtons (a click, not a drag: easy for people and for the browser
test). On every change the output is cleared and `fn(**values)` runs again; the first line it
shows is always the current values (`world_size=2, size_kb=64`), so a reader — and the browser
test — can see which experiment the output belongs to; after a click the second line says what
changed from the previous setting (`changed: world_size 2 → 4`). `fn` lives in the package: a notebook
never defines the code it runs. The panel is an extra: every notebook also prints its key
results in plain cells.
"""

from __future__ import annotations

from collections.abc import Callable


def header(values: dict) -> str:
    """The panel's first line: world_size first (readers and the browser test look for it there),
    then the other controls in their order."""
    ordered = sorted(values.items(), key=lambda item: item[0] != "world_size")  # stable
    return ", ".join(f"{k}={v}" for k, v in ordered)


def changes(before: dict | None, after: dict) -> str:
    """The panel's second line after a click: what changed from the previous setting
    ("changed: world_size 1 → 2"); empty on the first run."""
    moved = [f"{name} {before[name]} → {value}" for name, value in after.items()
             if before is not None and before.get(name) != value]
    return f"changed: {', '.join(moved)}" if moved else ""


def _capture(fn: Callable, values: dict, previous: dict | None = None) -> tuple[str, list[bytes]]:
    """Run fn(**values); return what it printed and PNGs of the figures it drew.

    The panel fills its Output by setting the output list, not with `with output:`. Capturing
    through `with output:` routes the kernel's messages by parent id, and under ipykernel 7 (widget
    messages arrive on a subshell thread while pyplot's post-execute hook draws open figures) it
    has produced blank plots in JupyterLab and a notebook execution that never returned
    (nbclient waiting on a cell whose kernel was idle). Printing to a buffer and saving figures
    ourselves does not depend on either.
    """
    import contextlib
    import io

    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    with plt.ioff(), contextlib.redirect_stdout(buffer):
        print(header(values))
        if changes(previous, values):
            print(changes(previous, values))
        try:
            fn(**values)
        except Exception as err:  # noqa: BLE001 - show it in the panel, keep the panel alive
            print(f"error: {type(err).__name__}: {err}")
        images = []
        for number in plt.get_fignums():
            figure = plt.figure(number)
            png = io.BytesIO()
            figure.savefig(png, format="png", dpi=90, bbox_inches="tight")
            images.append(png.getvalue())
        plt.close("all")
    return buffer.getvalue(), images


def experiment_panel(fn: Callable, controls: dict[str, list], run_now: bool = True,
                     follow: Callable | None = None, **defaults):
    """follow: values -> {name: (options, value)} for knobs that depend on the others (chapter 13's
    dp takes the ranks tp·pp·cp leave): applied before every run, so a button never offers a choice
    that cannot exist and always shows the value `fn` runs with."""
    import ipywidgets as w
    from IPython.display import Image, display

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
    following = []  # non-empty while `follow` sets buttons: their changes do not re-run
    shown = []  # the values of the experiment the output shows now

    def apply_follow():
        if follow is None:
            return
        following.append(True)
        try:
            for name, (options, value) in follow({n: b.value for n, b in buttons.items()}).items():
                buttons[name].options = list(options)
                buttons[name].value = value
        finally:
            following.pop()

    def rerun(_change=None):
        if following:
            return
        apply_follow()
        values = {name: b.value for name, b in buttons.items()}
        text, images = _capture(fn, values, shown[-1] if shown else None)
        shown[:] = [values]
        output.outputs = ()
        output.append_stdout(text)
        for png in images:
            output.append_display_data(Image(data=png, format="png"))

    for b in buttons.values():
        b.observe(rerun, names="value")
    panel = w.VBox(list(buttons.values()) + [output])
    panel.add_class("parlab-panel")
    if run_now:
        rerun()
    else:
        apply_follow()
    display(panel)
    return panel
