"""Hand-written collectives equal torch.distributed's, and the ledger's bytes equal the closed forms."""

import pytest
import torch

from parlab.core import cost
from parlab.core.launch import launch
from tests import workers

ALGOS = {"all_reduce": ["gloo", "ring", "tree", "naive"], "reduce_scatter": ["gloo", "ring"],
         "all_gather": ["gloo", "ring"]}


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_collectives_match_torch_for_random_lengths(world_size):
    lengths = sorted({1, 2, 3, 5, 8, 37, int(torch.randint(9, 2000, (1,)))})
    results = launch(workers.collectives_vs_torch, world_size, lengths, ALGOS, 7)
    for rank, res in enumerate(results):
        bad = [e for e in res["errors"] if not e[3] <= 1e-9]
        assert not bad, f"rank {rank}: {bad}"
        assert {e[1] for e in res["errors"] if e[0] != "all_reduce"} >= {"gloo+out", "ring+out"}


@pytest.mark.parametrize("world_size", [2, 3, 4, 5, 8])
def test_ledger_bytes_equal_closed_forms(world_size):
    lengths = [1, 7, 64, 1001]
    results = launch(workers.collectives_vs_torch, world_size, lengths, ALGOS, 0)
    closed = {"ring": cost.ring_all_reduce, "gloo": cost.ring_all_reduce,
              "tree": cost.tree_all_reduce, "naive": cost.naive_all_reduce}
    for rank, res in enumerate(results):
        records = [r for r in res["ledger"] if r["op"] == "all_reduce"]
        assert len(records) == len(lengths) * 4
        for rec in records:
            sent, recv, rounds = closed[rec["algo"]](rec["numel"], world_size, rank)
            assert (rec["elements_sent"], rec["elements_recv"]) == (sent, recv), rec
            assert rec["bytes_sent"] == sent * 8  # float64
            assert rec["rounds"] == rounds
        for rec in (r for r in res["ledger"] if r["op"] == "reduce_scatter" and r["algo"] == "ring"):
            assert (rec["elements_sent"], rec["elements_recv"]) == cost.ring_reduce_scatter(
                rec["numel"], world_size, rank)[:2]
        for rec in (r for r in res["ledger"] if r["op"] == "all_gather" and r["algo"] == "ring"):
            assert (rec["elements_sent"], rec["elements_recv"]) == cost.ring_all_gather(
                rec["numel"], world_size, rank)[:2]


@pytest.mark.parametrize("world_size", [2, 3])
def test_concurrent_hand_written_ops_get_their_own_messages(world_size):
    """Each hand-written op has its own tag range (issue order, the same on every rank), so an
    async ring op and a sync one in flight together on one Comm never swap messages."""
    for errors in launch(workers.concurrent_ring_ops, world_size, 20):
        assert errors == [0.0] * 20


def test_out_buffers_are_checked_before_anything_moves():
    results = launch(workers.bad_out_buffers, 2)
    for messages in results:
        assert len(messages) == 3 and all("out must be a contiguous" in m for m in messages)
        assert "of 3 elements" in messages[0] and "torch.float64" in messages[1]


def test_ring_all_reduce_is_two_n_minus_one_over_n_when_divisible():
    for n in (2, 4, 8):
        numel = 1024
        for rank in range(n):
            sent, recv, _ = cost.ring_all_reduce(numel, n, rank)
            assert sent == recv == 2 * (n - 1) * numel // n


def test_p2p_async_and_link_emulation():
    res = launch(workers.p2p_and_link, 2, timeout=120)
    assert res[1]["received"] == list(range(10))
    assert res[0]["send_bytes"] == 40 and res[1]["recv_bytes"] == 40
    # 1 MiB ring all-reduce on 2 ranks sends 1 MiB in 2 rounds: on a 10 MB/s, α = 0 emulated link
    # it is delivered bytes/β later. The op's own ledger record (t_start: issue, t_end: the wait's
    # return) and its Timeline "comm" event say it lasted at least the link's cost(bytes, rounds):
    # a bound the library enforces (it sleeps to delivery), not a timing race; tolerance 1 µs for
    # float rounding of the clock readings, and any real time beyond the plan is allowed.
    for rank, r in enumerate(res):
        assert r["slow_bytes"] == 1 << 20 and r["rounds"] == 2, (rank, r)
        assert r["cost_s"] == pytest.approx((1 << 20) / 10e6, rel=1e-9), (rank, r)
        assert r["planned_s"] == pytest.approx(r["cost_s"], rel=1e-6), (rank, r)
        assert r["lasted_s"] >= r["cost_s"] - 1e-6, (rank, r)
        assert r["event_s"] == pytest.approx(r["lasted_s"], abs=1e-9), (rank, r)


def test_all_to_all_matches_torch():
    for n in (2, 3, 4):
        res = launch(workers.all_to_all_check, n)
        assert all(r["ok"] for r in res), res


def test_alpha_beta_fit_recovers_known_parameters():
    alpha, beta, n = 2e-4, 1e9, 4
    sizes = [2 ** k for k in range(10, 27, 2)]
    times = [cost.all_reduce_time(s, n, alpha, beta) for s in sizes]
    fit = cost.fit_alpha_beta(sizes, times, n)
    assert fit.alpha == pytest.approx(alpha, rel=1e-6)
    assert fit.beta == pytest.approx(beta, rel=1e-6)
    with pytest.raises(ValueError):
        cost.fit_alpha_beta([1], [1.0], n)


def test_emulated_link_is_full_duplex():
    """A send and a receive in flight together each take bytes/β, not the sum of both."""
    for planned in launch(workers.duplex_exchange, 2):
        assert planned == pytest.approx([(1 << 20) / 10e6] * 2, rel=0.05)


def test_alpha_beta_fit_bounds_beta_and_flags_a_bad_fit():
    n = 2
    sizes = [2 ** k for k in range(10, 16)]
    flat = [2e-4] * len(sizes)  # latency only: least squares would claim an unbounded β
    fit = cost.fit_alpha_beta(sizes, flat, n, "tree")
    assert cost.BETA_BOUNDS[0] <= fit.beta <= cost.BETA_BOUNDS[1]
    assert fit.held_out(sizes, flat).reliable and fit.held_out_error < 0.01
    stalled = [t * 3 for t in flat]  # every held-out size 3× slower than the fit says
    assert not fit.held_out(sizes, stalled).reliable
    # one stalled size among several moves the robust (L1) fit less than least squares
    times = [cost.all_reduce_time(s, n, 1e-4, 1e9) for s in sizes]
    times[2] *= 20
    robust = cost.fit_alpha_beta(sizes, times, n, robust=True)
    plain = cost.fit_alpha_beta(sizes, times, n, robust=False)
    assert abs(robust.alpha - 1e-4) < abs(plain.alpha - 1e-4)


@pytest.mark.parametrize("world_size", [2, 3])
def test_segmented_ring_is_exact_and_its_ledger_matches_closed_forms(world_size):
    # 2,000,003 float64 elements: every chunk is cut into several segments of about
    # collectives.SEGMENT_BYTES, pipelined; values, bytes and rounds must not notice
    from parlab.core import collectives

    numel = 2_000_003
    assert collectives.segment_count(cost.shard_bounds(numel, world_size), 8) > 1
    algos = {"all_reduce": ["ring"], "reduce_scatter": ["ring"], "all_gather": ["ring"]}
    results = launch(workers.collectives_vs_torch, world_size, [numel], algos, 3)
    closed = {"all_reduce": cost.ring_all_reduce, "reduce_scatter": cost.ring_reduce_scatter,
              "all_gather": cost.ring_all_gather}
    for rank, res in enumerate(results):
        assert all(e[3] <= 1e-9 for e in res["errors"]), res["errors"]
        for rec in res["ledger"]:
            if rec["algo"] == "ring":
                sent, recv, rounds = closed[rec["op"]](rec["numel"], world_size, rank)
                assert (rec["elements_sent"], rec["elements_recv"], rec["rounds"]) == (
                    sent, recv, rounds), rec


def test_bench_all_collective_rows_carry_the_pace_and_cpu_diagnoses():
    """`bench all`'s collective rows: ring / gloo per op with the ring's and gloo's share of the
    bare ring steps' pace and the CPUs' busy share, all measured in the same launch."""
    import re

    from parlab.engine.bench_all import MB, collective_rows

    rows = collective_rows([2], [1 * MB], repeats=2)
    assert [r["name"] for r in rows] == [f"ring/gloo busbw {op} 1 MB N=2"
                                         for op in ("all_reduce", "reduce_scatter", "all_gather")]
    for row in rows:
        assert 0 < row["low"] <= row["ratio"] <= row["high"]
        ring, gloo = (float(x) for x in re.search(r"ring at (\d+)%, gloo at (\d+)%",
                                                  row["detail"]).groups())
        assert ring > 0 and gloo > 0 and re.search(r"CPUs \d+% busy", row["detail"])


def test_when_to_use_follows_the_fits_the_sweep_and_the_crossovers(capsys):
    from parlab.core.explore.summary import when_to_use

    def row(n, algo, busbw):
        return {"world_size": n, "bytes": 1 << 30, "algo": algo, "busbw_GBps": busbw, "link": "NVLink3"}

    rows = [row(4, "ring", 299.7), row(4, "tree", 225.0), row(4, "naive", 150.0),
            row(8, "ring", 299.3), row(8, "tree", 175.0), row(8, "naive", 75.0)]
    fits = {(8, "ring"): cost.AlphaBeta(1e-6, 300e9, "ring", 8),
            (4, "ring"): cost.AlphaBeta(1e-6, 1e9, "ring", 4)}
    cross = [{"link": "NVLink3", "n": 8, "paced": 1.83 * 2 ** 20}]
    lines = when_to_use(rows, fits, cross, {"held": 21, "total": 22}, ("more",))
    assert "the ring above 1.83 MB at N = 8 over NVLink3; the sweep's own order agreed at 21 of 22" \
        in lines[0]
    assert "300,000 B from the ring fit at N = 8 over NVLink3 (the link's 300,000 B), 50,000 B over " \
        "HDR-IB" in lines[1]
    assert "ring 99.8%–99.9%, tree 58.3%–75.0%, naive 25.0%–50.0% of β" in lines[2] and lines[3] == "more"
    assert capsys.readouterr().out.startswith("When to use it (from this run):\n  - ring or tree")
    fits[(8, "ring")] = cost.AlphaBeta(2e-6, 300e9, "ring", 8)  # a fit that missed the link says so
    assert "NOT the link's 300,000 B" in when_to_use(rows, fits, cross, {"held": 1, "total": 1})[1]
