"""Chapter 00's paced sweep (parlab.core.explore.paced_sweep): every time is the clock's price, real
and shapes-only alike; Thakur's forms fitted to it read the link's α, and β off by the ratio of byte
counts the diagnosis computes; the clock's own form recovers the link; the crossover predicts the
order the sweep measured. One launch of 4 ranks; paced time only, no raw clock."""

import math

import pytest

from parlab.core.explore import paced_sweep as ps
from parlab.core.explore import real_link_show as show


@pytest.fixture(scope="module")
def rows():
    return ps.sweep((4,), "NVLink3", max_mb=1, real_max=16 << 10)  # 1 KB .. 1 MB, shapes-only > 16 KB


def test_sweep_is_the_clocks_price(rows, capsys):
    assert len(rows) == 6 * 3
    assert all(math.isclose(r["seconds"], r["priced_s"], rel_tol=1e-9) and r["bytes_ok"] for r in rows)
    verdict = ps.show_sweep(rows)
    assert verdict["priced"] == verdict["ledger"] == verdict["rows"] == 18
    assert "at 18 of 18: holds" in capsys.readouterr().out


def test_fits_read_the_link_and_the_diagnosis_explains_beta(rows, capsys):
    fits = ps.show_fits(rows)
    for algo in ("ring", "tree", "naive"):
        assert fits[(4, algo)].alpha == pytest.approx(1e-6, rel=1e-6)
        assert fits[(4, algo)].held_out_error < 1e-6
    assert fits[(4, "ring")].beta == pytest.approx(300e9, rel=1e-6)
    # Thakur: tree 2⌊log₂4⌋ = 4 copies of S, naive 2(N−1) = 6; the clock: 2·S and 3·S
    assert fits[(4, "tree")].beta == pytest.approx(600e9, rel=1e-6)
    assert fits[(4, "naive")].beta == pytest.approx(600e9, rel=1e-6)
    out = capsys.readouterr().out
    assert out.count(": explained") == 2 and "NOT" not in out
    assert "the link's, at 3 of 3 (N, algorithm): holds" in out


def test_crossover_predicts_the_measured_order(rows, capsys):
    verdict = show.show_run(rows)
    assert verdict == {"held": 6, "total": 6}
    assert "picks the ring at 256 KB, 1 MB; the run agrees at 0 of 2" in capsys.readouterr().out
