"""Chapter 13's presentation: the planner panel's dp button follows the world size (no browser:
the panel is built and clicked in Python), and the predicted-vs-measured score counts held-out
plans only — a plan the calibration was fitted on never enters the error, the Spearman
correlation, the printed report or the scatter's held-out markers."""

import pytest

from parlab.planner import costmodel, explore, search

DEGREES = {"world_size": [1, 2, 4, 8], "dp": [1, 2, 4, 8], "tp": [1, 2, 4], "pp": [1, 2, 4],
           "cp": [1, 2, 4]}


def test_panel_dp_follows_the_world_size(capsys):
    """At world size 1 the dp button shows 1 (it showed 2 while the callback ran dp=1): the one dp
    that exists is the only choice offered, and it is the value the callback runs with."""
    pytest.importorskip("ipywidgets")
    from parlab.widgets import experiment_panel

    runs = []
    panel = experiment_panel(lambda **values: runs.append(values), DEGREES,
                             follow=explore.panel_follow, world_size=4, dp=2, tp=1, pp=1, cp=1)
    buttons = {b.description: b for b in panel.children[:-1]}
    assert buttons["dp"].options == (4,) and buttons["dp"].value == 4 and runs[-1]["dp"] == 4
    buttons["world_size"].value = 1
    assert buttons["dp"].options == (1,) and buttons["dp"].value == 1
    assert runs[-1] == {"world_size": 1, "dp": 1, "tp": 1, "pp": 1, "cp": 1}
    assert panel.children[-1].outputs[0]["text"].startswith("world_size=1, dp=1,")
    buttons["world_size"].value = 8
    buttons["tp"].value = 2
    assert buttons["dp"].options == (4,) and runs[-1]["dp"] == 4
    buttons["pp"].value = 4  # tp·pp = 8 leaves one rank for dp
    assert runs[-1]["dp"] == 1
    assert len(runs) == 5  # one run per click: the follow's own changes run nothing
    buttons["world_size"].value = 2  # tp·pp = 8 does not divide 2: dp 1, the callback says why
    assert buttons["dp"].value == 1 and runs[-1]["world_size"] == 2
    capsys.readouterr()


def _predictions():
    """Every plan of world size 4 predicted from a profile and an α-β fit with round numbers
    (test_planner_model's), and 'measurements' = the prediction ×1.1 plus 1% per plan: an
    error that differs from plan to plan, without a run."""
    from parlab.core.cost import AlphaBeta
    from parlab.planner.profile import CommFit, Line, Profile
    cfg = explore.model_config()
    prof = Profile(Line(1e-4, 1e9), Line(2e-4, 5e8), Line(5e-5, 1e9), Line(5e-5, 5e8),
                   1e-5, 1e-9, 2, cfg, 1e-4)
    fit = CommFit(4, {n: AlphaBeta(1e-4 * n, 1e9, "ring", n) for n in (2, 4)}, 1e-4, 1e9)
    preds = [costmodel.predict(p, cfg, prof, fit) for p in
             search.candidate_plans(4, cfg, zero_stages=(0,))]
    measured = {p.plan: {"step_s": p.step_s * (1.1 + 0.01 * i), "peak_bytes": p.memory["total"],
                         "bytes": sum(p.bytes_per_dim.values())} for i, p in enumerate(preds)}
    return preds, measured


def test_score_counts_held_out_plans_only(capsys):
    """Plans the calibration was fitted on predict the runs they were fitted on (≈0 error): they
    are marked, disjoint from the held-out plans, left out of the median error, the Spearman
    correlation, the printed report and the scatter's scored points; the pick and regret still
    range over every plan."""
    import statistics
    preds, measured = _predictions()
    calibration = set(search.pure_plans([p.plan for p in preds]))
    assert calibration
    for p in preds:  # a calibration plan reproduces its own run: it would pull the median to 0
        if p.plan in calibration:
            measured[p.plan] = {**measured[p.plan], "step_s": p.step_s}
    rows, j = explore.score(preds, measured, calibration)
    calib = {r["plan"] for r in rows if r["calibration"]}
    held = [r for r in rows if not r["calibration"]]
    assert calib == {p.describe() for p in calibration} and held
    assert not calib & {r["plan"] for r in held}
    assert j.scored == len(held)
    assert j.median_error == pytest.approx(statistics.median(abs(r["error"]) for r in held),
                                           abs=1e-3)
    every = search.judge(preds, measured)  # what scoring every plan would say
    assert every.scored == len(rows) and every.median_error < j.median_error
    assert (j.choice, j.regret) == (every.choice, every.regret)
    with pytest.raises(ValueError, match="held-out"):
        search.judge(preds, measured, calibration={p.plan for p in preds})

    s = explore.Sweep(4, None, rows, j, costmodel.Calibration(), {}, preds, measured, "0", None,
                      "fitted on the one-dimensional plans")
    assert s.calibration_plans == calibration
    explore.goals_report(s)
    out = capsys.readouterr().out
    assert f"scored: the held-out plans ({len(held)} of {len(rows)}); not scored" in out
    assert f"median |error| {j.median_error:.1%}" in out
    from parlab.planner.explore import guide as ex_guide
    fig = ex_guide.scatter(s)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert f"calibration plans (fitted on): not scored ({len(calib)})" in labels
    assert f"over {len(held)} plans" in fig.axes[0].get_title()
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_when_to_use_prints_thresholds_from_the_run(capsys):
    """The decision guide's closing lines come from the sweep, the scaling points, the replayed
    traces and the Megatron table given to it: change the sweep and the numbers change."""
    from parlab.planner.explore import guide as ex_guide
    from parlab.planner.scaling import extrapolate
    preds, measured = _predictions()
    rows, j = explore.score(preds, measured, set())
    s = explore.Sweep(4, None, rows, j, costmodel.Calibration(), {}, preds, measured, "0", None,
                      "leave one out")
    scale = [{"dim": "dp", "mode": "strong", "n": n, "throughput": t, "wait_us": 5.0,
              "step_us": 10.0, "degrees": (n, 1, 1, 1), "eff": t / (n * 100.0)}
             for n, t in ((1, 100.0), (2, 60.0))]
    replay = [{"plan": "tp ×2", "2× compute": 0.9, "2× bandwidth": 0.95, "½ latency α": 0.6}]
    table = extrapolate.megatron_table("A100")
    ex_guide.when_to_use(s, scale, replay, table)
    out = capsys.readouterr().out
    ordered = sorted(rows, key=lambda r: r["measured_ms"])
    ratio = ordered[-1]["measured_ms"] / ordered[0]["measured_ms"]
    assert out.startswith("When to use it (from this run):")
    assert f"ran {ratio:.1f}× faster than the slowest ({ordered[-1]['plan']})" in out
    assert f"twice its held-out median error ({2 * j.median_error:.1%})" in out
    assert "dp strong : stops paying at 1→2 ranks" in out or "stops paying at 1→2" in out
    assert "½ latency α pays most for tp ×2" in out
    agree = sum(r["verdict"].startswith("agrees") for r in table)
    assert f"tp and pp for {agree} of {len(table)} models" in out
    from types import SimpleNamespace
    s.results = {preds[0].plan: SimpleNamespace(config=SimpleNamespace(
        steps=2, batch_size=12, model_config=explore.model_config()))}
    assert s.describe().startswith(f"{len(rows)} plans at world size 4 (scheme nd), each run 2 steps")
    ex_guide.hardware_ratios(table, extrapolate.megatron_table("H100"))
    assert "H100 vs A100: compute ×" in capsys.readouterr().out


def test_panel_offers_only_degrees_that_divide_the_world_size():
    """World size 1 offers tp, pp and cp of 1 alone (a 2 or 4 that cannot apply drops to 1), and
    the panel prints what changed from its previous setting."""
    follow = explore.panel_follow({"world_size": 1, "dp": 4, "tp": 4, "pp": 2, "cp": 1})
    assert {k: follow[k] for k in ("tp", "pp", "cp", "dp")} == {
        "tp": ([1], 1), "pp": ([1], 1), "cp": ([1], 1), "dp": ([1], 1)}
    follow = explore.panel_follow({"world_size": 2, "dp": 1, "tp": 4, "pp": 1, "cp": 1})
    assert follow["tp"] == ([1, 2], 2) and follow["dp"] == ([1], 1)
    explore.panel_changes({})
    explore.panel_changes({"world_size": 4, "tp": 2})
    assert explore.panel_changes({"world_size": 1, "tp": 1}) == "changed: world_size 4 → 1, tp 2 → 1"
