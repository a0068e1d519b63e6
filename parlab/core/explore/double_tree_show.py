"""What chapter 00 prints of NCCL's double binary tree, run on 8 paced A100s in 2 nodes of 4.

The run is `parlab.core.explore.two_level_run` (one launch for every algorithm). Per size: the
double tree's paced time (its slowest rank; each chunk message priced on its pair's link, NVLink 3
or HDR InfiniBand) beside its α-β closed form `double_tree.time_on` (Sanders, Speck & Träff,
Parallel Computing 2009; on one link T = (3H − 1 + p(k − 1))·(α + S/(2kβ)), H = ⌈log₂N⌉ the
tree's levels, k chunks per tree, p messages per chunk on the busiest port): the first chunk's
trip up and down the trees plus k − 1 times the busiest port's seconds per chunk, each message
α + S/(2kβ) on its own pair's link. The closed form lets the first chunk's trip finish before
the second starts, so it bounds the run from above: the verdict is run ≤ T ≤ (1 + TOLERANCE)·run.
Beside it, the flat ring, the binary tree and the two-level all-reduce of the same run, and which
is fastest, computed.
"""

from __future__ import annotations

from parlab.core import double_tree
from parlab.core.explore import real_link as rl
from parlab.core.explore import two_level_run as tl
from parlab.core.explore.real_link_show import _size

TOLERANCE = 0.15  # the closed form's fill overlaps nothing: it may exceed the run by this much


def closed_form(nbytes: int, n: int, chunks: int) -> float:
    """`double_tree.time_on` on the cluster's links (`two_level_run.cluster`): NVLink 3 inside a
    node, HDR InfiniBand between."""
    topo = tl.cluster(n)
    return double_tree.time_on(nbytes, n, chunks, lambda a, b: topo.link_between(a, b).cost(
        nbytes / (2 * chunks), 1))


def rows(ranks: list[dict], sizes=tl.SIZES) -> list[dict]:
    """Per size: every algorithm's paced time (its slowest rank), the double tree's chunks and
    closed-form bracket, and whether every rank's ledger bytes equal `double_tree.traffic`."""
    n = len(ranks)
    out = []
    for nbytes in sizes:
        k = tl.dtree_chunks(nbytes, n)
        row = {"bytes": nbytes, "chunks": k,
               **{kind: max(r[(nbytes, kind)][0] for r in ranks) for kind in tl.KINDS},
               "form": closed_form(nbytes, n, k),
               "bytes_ok": all(r[(nbytes, "dtree")][1] == double_tree.traffic(nbytes // 4, n, q)[0] * 4
                               for q, r in enumerate(ranks))}
        row["inside"] = row["dtree"] * (1 - 1e-9) <= row["form"] <= (1 + TOLERANCE) * row["dtree"]
        out.append(row)
    return out


NAMES = (("two", "two-level"), ("flat", "flat ring"), ("tree", "binary tree"),
         ("dtree", "double tree"))


def show(ranks: list[dict], sizes=tl.SIZES) -> dict:
    """Print the double tree's checks and rows beside the other algorithms; return the verdicts."""
    n = len(ranks)
    table = rows(ranks, sizes)
    equal = all(r["dtree_equal"] for r in ranks)
    check = [double_tree.traffic(tl.CHECK_NUMEL, n, q)[0] * 4 for q in range(n)]
    got = [r["dtree_check_bytes"] for r in ranks]
    print(f"clock: paced {rl.ACCELERATOR} time, the same 2 nodes of {tl.PER_NODE} (NVLink 3 inside, "
          "HDR InfiniBand between); each chunk is its own message, priced on its pair's link, "
          "one at a time on a rank's outgoing port; sizes shapes-only")
    print(f"double tree result = torch's all_reduce (gloo) on {tl.CHECK_NUMEL:,} integer-valued "
          f"float32 per rank, 3 chunks per tree, on all {n} ranks: {equal}")
    print(f"ledger bytes sent per rank: {got}; closed form Σ_trees (up + children)·S_t: {check}: "
          f"{'equal' if got == check else 'NOT equal'} (p = {double_tree.port_messages(n)} messages "
          f"per chunk on the busiest port, H = {double_tree.height(n)} levels)")
    print(f"{'size':>8} {'k':>3} {'double tree':>12} {'closed form':>12} {'ratio':>6} "
          + " ".join(f"{name:>12}" for kind, name in NAMES if kind != "dtree") + "  fastest")
    for r in table:
        fastest = min(NAMES, key=lambda kn: r[kn[0]])[1]
        print(f"{_size(r['bytes']):>8} {r['chunks']:>3} {tl._us(r['dtree']):>12} "
              f"{tl._us(r['form']):>12} {r['form'] / r['dtree']:>6.3f} "
              + " ".join(f"{tl._us(r[kind]):>12}" for kind, _ in NAMES if kind != "dtree")
              + f"  {fastest}")
    inside = sum(r["inside"] for r in table)
    beats_ring = [r for r in table if r["dtree"] < r["flat"]]
    beats_tree = sum(r["dtree"] < r["tree"] for r in table)
    two_wins = sum(r["two"] < r["dtree"] for r in table)
    print(f"run ≤ closed form ≤ {1 + TOLERANCE:.2f} × run (the form's first chunk overlaps nothing) "
          f"at {inside} of {len(table)} sizes: {'holds' if inside == len(table) else 'does NOT hold'}; "
          f"ledger = closed form at {sum(r['bytes_ok'] for r in table)} of {len(table)}")
    ratios = [r["flat"] / r["dtree"] for r in beats_ring]
    print(f"the double tree beats the flat ring at {len(beats_ring)} of {len(table)} sizes"
          + (f" ({_size(beats_ring[0]['bytes'])} to {_size(beats_ring[-1]['bytes'])}, "
             f"{min(ratios):.2f}× to {max(ratios):.2f}× faster)" if beats_ring else "")
          + f", the binary tree at {beats_tree}; the two-level all-reduce beats the double tree "
          f"at {two_wins} of {len(table)}")
    return {"equal": equal, "check_bytes": got == check, "inside": inside,
            "beats_ring": len(beats_ring), "beats_tree": beats_tree, "two_wins": two_wins,
            "sizes": len(table), "bytes_ok": all(r["bytes_ok"] for r in table), "rows": table}


def when_line(verdict: dict) -> str:
    """The summary's line on the double tree, from the run's verdicts (`show`)."""
    line = (f"- NCCL's double binary tree (section 10, paced A100 time, 2 nodes of {tl.PER_NODE}): "
            f"beat the flat ring at {verdict['beats_ring']} of {verdict['sizes']} sizes and the "
            f"binary tree at {verdict['beats_tree']}; the two-level all-reduce beat it at "
            f"{verdict['two_wins']}; its closed form held (within {TOLERANCE:.0%}, from above) at "
            f"{verdict['inside']} of {verdict['sizes']}")
    print(line)
    return line
