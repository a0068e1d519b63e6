"""Chapter 00's real-link section (parlab.core.explore.real_link): the paced run equals the clock's
price from parlab.core.cost's bytes, the crossovers split ring from tree, and the next steps
(two-level, double tree) price as their closed forms say. Paced time only: no raw clock."""

import math

from parlab.core.explore import real_link as rl
from parlab.core.explore import real_link_show as show
from parlab.core.launch import launch


def test_paced_run_equals_the_clocks_price():
    sizes = [4096, 1 << 20]
    ranks = launch(rl.paced_worker, 4, sizes, "NVLink3", timeout=600.0)
    for nbytes in sizes:
        for algo in rl.ALGOS:
            measured = max(r[(algo, nbytes)][0] for r in ranks)
            assert math.isclose(measured, rl.priced(algo, 4, nbytes, "NVLink3"), rel_tol=1e-12)
            sent = ranks[0][(algo, nbytes)][1]
            assert sent == rl.BYTES[algo](nbytes // 4, 4, 0)[0] * 4


def test_ring_price_is_thakurs_and_the_crossover_splits_ring_from_tree():
    for n in (4, 8, 16):
        for link in ("NVLink3", "HDR-IB"):
            assert math.isclose(rl.priced("ring", n, 1 << 20, link), rl.thakur("ring", n, 1 << 20, link))
            for price, star in ((rl.priced, rl.crossover(n, link)),
                                (rl.thakur, rl.thakur_crossover(n, link))):
                assert price("ring", n, int(star / 2), link) > price("tree", n, int(star / 2), link)
                assert price("ring", n, int(star * 2), link) < price("tree", n, int(star * 2), link)
    assert math.isclose(rl.crossover(16, "HDR-IB", price=rl.thakur), rl.thakur_crossover(16, "HDR-IB"),
                        rel_tol=1e-6)


def test_two_level_and_double_tree():
    alpha_i, beta_i = 1e-6, 300e9
    alpha_e, beta_e = 2e-6, 25e9
    s = 1e9
    expected = 2 * 7 * (alpha_i + s / 8 / beta_i) + 2 * alpha_e + (s / 8) / beta_e  # 2 nodes
    assert math.isclose(rl.two_level(s, 2), expected, rel_tol=1e-12)
    assert rl.two_level(s, 2) < rl.flat_ring(s, 16)
    t, k = rl.double_tree(s, 16, "HDR-IB")  # (3H − 1 + p(k − 1))·(α + S/(2kβ)), H = 4, p = 4
    assert k >= 1 and math.isclose(t, (3 * 4 - 1 + 4 * (k - 1)) * (alpha_e + s / (2 * k * beta_e)))
    assert t <= (3 * 4 - 1 + 4 * k) * (alpha_e + s / (2 * (k + 1) * beta_e))  # no worse than k + 1
    assert rl.double_tree(1024, 16, "HDR-IB")[1] == 1


def test_two_level_table_and_sweep_verdicts(capsys):
    rows = show.two_level_table(nodes=2)
    assert all(r["speedup"] > 1 for r in rows)
    sweep = show.price_sweep(16, "HDR-IB")
    assert sweep[0]["best"] == "tree" and sweep[-1]["best"] == "ring"
    assert "two-level wins" in capsys.readouterr().out
