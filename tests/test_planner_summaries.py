"""parlab.planner.explore.summaries: each summary counts every row, names the worst, prints only
`rows` rows at its default and all with rows=None (fake sweeps: no runs, except the closed forms)."""

from types import SimpleNamespace

from parlab.engine.verify import Comparison
from parlab.planner.explore import summaries


def test_closed_form_summary_counts_all_prints_three(capsys):
    table = summaries.closed_form_summary(2)
    out = capsys.readouterr().out
    n = len(table)
    assert n > 3 and f"equal the nd closed form in {n} of {n}: agrees" in out
    assert f"({n - 3} more plans: rows=None prints them all)" in out
    summaries.closed_form_summary(2, rows=None)
    assert "more plans" not in capsys.readouterr().out


ROWS = [{"plan": f"p{i}", "measured_bytes": 100 * i, "predicted_bytes": 100 * i,
         "measured_peak": 7, "predicted_peak": 7} for i in range(5)]


def test_bytes_summary_worst_row_first(capsys):
    rows = [dict(r) for r in ROWS]
    rows[1]["measured_bytes"] = 999  # one plan off
    summaries.bytes_summary(SimpleNamespace(rows=rows), rows=1)
    out = capsys.readouterr().out
    assert "closed form in 4 of 5" in out and "DOES NOT agree" in out
    assert out.splitlines()[2].split()[0] == "p1" and "(4 more plans" in out
    summaries.bytes_summary(SimpleNamespace(rows=ROWS), rows=None)
    out = capsys.readouterr().out
    assert "in 5 of 5; measured peak memory per rank = the closed form in 5 of 5: agrees" in out
    assert all(f"p{i}" in out for i in range(5))


def test_exactness_summary_worst_and_verdict(monkeypatch, capsys):
    import parlab.engine.runner as runner
    monkeypatch.setattr(runner, "run", lambda *a, **k: None)
    diffs = {"a": (1e-7, 2e-6), "b": (3e-6, 1e-8), "c": (0.0, 0.0)}

    def result(loss, param):
        return SimpleNamespace(compare=lambda ref: Comparison(True, loss, param, "w", []))

    class Plan(str):
        def describe(self):
            return str(self)

    plans = {Plan(k): result(*v) for k, v in diffs.items()}
    out = summaries.exactness_summary(SimpleNamespace(results=plans), rows=2)
    text = capsys.readouterr().out
    assert [p for p, _ in out] == ["a", "b", "c"]
    assert "3 of 3 plans equal single" in text and "every plan is exact" in text
    assert "worst |Δloss| 3.0e-06 (b)" in text and "|Δparameter| 2.0e-06 (a)" in text
    assert "≤ 0.0001: holds" in text and "(1 more plans" in text
    lines = text.splitlines()
    assert lines[3].split()[0] == "b" and lines[4].split()[0] == "a"  # worst first

