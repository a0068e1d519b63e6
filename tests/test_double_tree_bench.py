"""`python -m parlab bench allreduce --paced`: the two-level all-reduce, flat ring, binary tree and
double tree on 2 nodes of 2 paced A100s at 1 MB shapes-only; the row's two-level time equals its
closed form and the double tree's lies within the stated tolerance under its own, with its ledger
bytes equal to the closed form. Paced time only, one launch."""

import csv
import math

from parlab.core import bench


def test_bench_paced_rows(capsys, tmp_path):
    out = tmp_path / "rows.csv"
    assert bench.main(["--paced", "--nodes", "2", "--per-node", "2", "--min-kb", "1024",
                       "--max-mb", "1", "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert "paced A100 time" in text and "double tree" in text and "1,048,576" in text
    (row,) = list(csv.DictReader(out.open()))
    assert math.isclose(float(row["two"]), float(row["two_form"]), rel_tol=1e-9)
    assert row["inside"] == "True" and row["bytes_ok"] == "True"
