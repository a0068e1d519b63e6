"""What chapter 00 prints of NCCL's double binary tree, run on 8 paced A100s in 2 nodes of 4.

From `two_level_run`'s launch: per size the double tree's paced time beside its closed form
`double_tree.time_on` (each message on its pair's link; it lets the first chunk's trip finish
before the second starts, so it bounds the run from above: verdict run ≤ T ≤ run + one
InfiniBand message), beside the two-level all-reduce, flat ring and binary tree. `against_ring`
runs it on NVLink 3 alone beside section 7's ring.
"""

from __future__ import annotations

from parlab.core import double_tree
from parlab.core.explore import real_link as rl
from parlab.core.explore import two_level_run as tl
from parlab.core.explore.real_link_show import _size


def closed_form(nbytes: int, n: int, chunks: int, per_node: int = tl.PER_NODE) -> float:
    """`double_tree.time_on` on the cluster's links (`two_level_run.cluster`): NVLink 3 inside a
    node, HDR InfiniBand between."""
    topo = tl.cluster(n, per_node)
    return double_tree.time_on(nbytes, n, chunks, lambda a, b: topo.link_between(a, b).cost(
        nbytes / (2 * chunks), 1))


def rows(ranks: list[dict], sizes=tl.SIZES, per_node: int = tl.PER_NODE) -> list[dict]:
    """Per size: every algorithm's paced time (its slowest rank), the double tree's chunks and
    closed-form bracket, and whether every rank's ledger bytes equal `double_tree.traffic`."""
    n = len(ranks)
    out = []
    for nbytes in sizes:
        k = tl.dtree_chunks(nbytes, n)
        row = {"bytes": nbytes, "chunks": k,
               **{kind: max(r[(nbytes, kind)][0] for r in ranks) for kind in tl.KINDS},
               "form": closed_form(nbytes, n, k, per_node),
               "bytes_ok": all(r[(nbytes, "dtree")][1] == double_tree.traffic(nbytes // 4, n, q)[0] * 4
                               for q, r in enumerate(ranks))}
        row["message"] = rl.real(rl.INTER, rl.ACCELERATOR).cost(nbytes / (2 * k), 1)  # slowest
        row["inside"] = (row["dtree"] * (1 - 1e-9) <= row["form"]
                         <= (row["dtree"] + row["message"]) * (1 + 1e-9))
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
    print(f"run ≤ closed form ≤ run + one InfiniBand message α_e + S/(2kβ_e) (the form's first "
          f"chunk overlaps nothing) "
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
    line = (f"NCCL's double binary tree (section 9, paced A100 time, 2 nodes of {tl.PER_NODE}): "
            f"beat the flat ring at {verdict['beats_ring']} of {verdict['sizes']} sizes and the "
            f"binary tree at {verdict['beats_tree']}; the two-level all-reduce beat it at "
            f"{verdict['two_wins']}; its closed form held (within one message, from above) at "
            f"{verdict['inside']} of {verdict['sizes']}")
    return line


def against_ring(real_rows: list[dict], n: int | None = None) -> dict:
    """Run the double tree on `n` paced A100s over NVLink 3 alone (`double_tree_run`) at the sizes
    of section 7's sweep (`paced_sweep.sweep` rows), print it beside its ring and tree and its
    closed form `double_tree.time`; return where it beat the ring. `n`: 8 when swept, else the
    sweep's largest N."""
    from parlab.core.explore import double_tree_run

    swept = {r["world_size"] for r in real_rows}
    n = n or (8 if 8 in swept else max(swept))
    sizes = sorted({r["bytes"] for r in real_rows if r["world_size"] == n})
    ranks = double_tree_run.run(n, rl.INTRA, sizes=sizes)
    alpha, beta = rl._ab(rl.INTRA)
    print(f"clock: paced {rl.ACCELERATOR} time, {n} ranks over NVLink 3 alone (α = 1 µs, 300 GB/s): "
          f"the double tree run beside section 7's ring and tree; the closed form "
          f"(3H − 1 + p(k − 1))·(α + S/(2kβ)) with H = {double_tree.height(n)}, "
          f"p = {double_tree.port_messages(n)}")
    print(f"{'size':>8} {'k':>3} {'double tree':>12} {'closed form':>12} {'ring':>10} {'tree':>10}"
          "  faster than the ring")
    out = []
    for nbytes in sizes:
        run_s, _, k = (max(r[nbytes][0] for r in ranks), None, ranks[0][nbytes][2])
        form = double_tree.time(nbytes, n, alpha, beta, k)
        ring, tree = (next(r["seconds"] for r in real_rows
                           if r["world_size"] == n and r["bytes"] == nbytes and r["algo"] == a)
                      for a in ("ring", "tree"))
        # the form's chunks are S/(2k) exactly, the run's whole elements: one message, +0.01%
        ok = run_s * (1 - 1e-9) <= form <= run_s + (alpha + nbytes / (2 * k * beta)) * (1 + 1e-4)
        out.append({"bytes": nbytes, "dtree": run_s, "form": form, "ring": ring, "tree": tree,
                    "ok": ok, "wins": run_s < ring})
        print(f"{_size(nbytes):>8} {k:>3} {tl._us(run_s):>12} {tl._us(form):>12} "
              f"{tl._us(ring):>10} {tl._us(tree):>10}  {'yes' if run_s < ring else 'no'}")
    held = sum(r["ok"] for r in out)
    wins = [r for r in out if r["wins"]]
    print(f"run ≤ closed form ≤ run + one message (+0.01%: the run's chunks are whole elements) at "
          f"{held} of {len(out)} sizes: "
          f"{'holds' if held == len(out) else 'does NOT hold'}; the double tree beats the ring at "
          f"{len(wins)} of {len(out)} sizes"
          + (f", up to {_size(max(r['bytes'] for r in wins))}" if wins else "")
          + (f"; the ring is faster from {_size(min(r['bytes'] for r in out if not r['wins']))}"
             if len(wins) < len(out) else ""))
    return {"held": held, "sizes": len(out), "wins": len(wins), "rows": out}


def bench_rows(nodes: int, per_node: int, sizes) -> list[dict]:
    """`python -m parlab bench allreduce --paced`: run `two_level_run` on `nodes` × `per_node`
    paced A100s and print each size's four algorithms (A100 µs) beside the two-level and double
    tree closed forms; the rows (`rows`, with "two_form")."""
    n = nodes * per_node
    ranks = tl.run(n, per_node, sizes)
    table = rows(ranks, sizes, per_node)
    print(f"clock: paced {rl.ACCELERATOR} time; {tl.cluster(n, per_node).name}; shapes-only sizes")
    print(f"{'bytes':>13} " + " ".join(f"{name:>12}" for _, name in NAMES)
          + f" {'two-level form':>15} {'dtree form':>11} {'k':>3}")
    for r in table:
        r["two_form"] = rl.two_level(r["bytes"], nodes, per_node)
        print(f"{r['bytes']:>13,} " + " ".join(f"{tl._us(r[kind]):>12}" for kind, _ in NAMES)
              + f" {tl._us(r['two_form']):>15} {tl._us(r['form']):>11} {r['chunks']:>3}")
    return table
