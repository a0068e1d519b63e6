"""AlpaComm's load balance for cross-mesh resharding: whole tiles to the least-loaded holder, then a
searched send order so concurrent transfers do not collide on one host's NIC.

Zhuang et al., "On Optimizing the Communication of Model Parallelism" (MLSys 2023, arXiv
2211.05322), §3: (1) sender selection (`assign_senders`): each tile goes whole to the holder with
the least bytes assigned so far; (2) send order (`search_order`): the paper's depth-first search
with pruning, past `budget` nodes the best order found (from `earliest_start_order`); the
paper's randomized greedy for large problems is not implemented. The NIC model (`makespan`):
a task holds its sender's out-NIC and its receivers' in-NICs for its whole duration.

Simplifications (α + bytes/β per task, no partial overlap, one host per rank unless
`topology.nodes`) and how ours differs from Alpa's released code (a node budget, not one second
of wall time, so every rank plans alike): docs/tensor_parallel.md, `parlab.tensor_parallel.alpacomm`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """One tile's transfer: from `sender` to the ranks `receivers` (a chain), `seconds` long."""

    sender: int
    receivers: tuple
    seconds: float


def assign_senders(tiles) -> list[int]:
    """tiles: [(size, holders)] in plan order -> the sender of each tile: the holder with the least
    size assigned so far, the first listed holder on a tie (every tile whole)."""
    load: dict = {}
    out = []
    for size, holders in tiles:
        sender = min(holders, key=lambda h: (load.get(h, 0), list(holders).index(h)))
        load[sender] = load.get(sender, 0) + size
        out.append(sender)
    return out


def max_load(tiles, senders) -> int:
    """The largest total size one holder sends under `senders`."""
    load: dict = {}
    for (size, _), s in zip(tiles, senders):
        load[s] = load.get(s, 0) + size
    return max(load.values(), default=0)


def host_map(topology=None, ranks=()) -> dict:
    """rank -> host: the machine of `topology.nodes` (`parlab.core.topology`) when it has nodes,
    else every rank its own host."""
    nodes = getattr(topology, "nodes", ()) or ()
    out = {r: r for r in ranks}
    for h, members in enumerate(nodes):
        for r in members:
            out[r] = ("host", h)
    return out


def _resources(task: Task, hosts: dict) -> set:
    chain = (task.sender,) + tuple(task.receivers)
    res = {("out", hosts.get(a, a)) for a in chain[:-1]}  # sender and forwarders
    res |= {("in", hosts.get(b, b)) for b in chain[1:]}
    return res


def makespan(tasks, order, hosts: dict | None = None) -> float:
    """Finish time of the last task when tasks start in `order`, each as soon as all its NICs are
    free (list scheduling on the NIC model of this module's docstring)."""
    hosts = hosts or {}
    free: dict = {}
    end = 0.0
    for i in order:
        res = _resources(tasks[i], hosts)
        start = max((free.get(r, 0.0) for r in res), default=0.0)
        finish = start + tasks[i].seconds
        for r in res:
            free[r] = finish
        end = max(end, finish)
    return end


def search_order(tasks, hosts: dict | None = None, budget: int = 20000) -> tuple[list[int], float]:
    """(order, makespan): AlpaComm's depth-first search with pruning over send orders.

    The first incumbent is `earliest_start_order`, and children are tried in its order. A branch
    is cut when its lower bound — for every NIC, the time it is already busy to plus the work
    still waiting for it — is not below the best makespan found; tasks identical in sender,
    receivers and length are tried in one order only (swapping them changes nothing). Exact while
    the search visits at most `budget` nodes; past that the best order found so far."""
    hosts = hosts or {}
    n = len(tasks)
    res = [_resources(t, hosts) for t in tasks]
    best_order = earliest_start_order(tasks, hosts)
    best = [makespan(tasks, best_order, hosts), list(best_order)]
    key = [(tasks[i].sender, tuple(tasks[i].receivers), tasks[i].seconds) for i in range(n)]
    visited = [0]

    def bound(free, remaining):
        work: dict = {}
        for i in remaining:
            for r in res[i]:
                work[r] = work.get(r, 0.0) + tasks[i].seconds
        return max([free.get(r, 0.0) + w for r, w in work.items()] + list(free.values()) + [0.0])

    def dfs(prefix, free, remaining):
        visited[0] += 1
        if not remaining:
            end = max(free.values(), default=0.0)
            if end < best[0]:
                best[0], best[1] = end, list(prefix)
            return
        if visited[0] > budget or bound(free, remaining) >= best[0]:
            return
        tried = set()
        starts = {i: max(free.get(r, 0.0) for r in res[i]) for i in remaining}
        for i in sorted(remaining, key=lambda i: (starts[i], -tasks[i].seconds, i)):
            if key[i] in tried:
                continue
            tried.add(key[i])
            start = starts[i]
            nxt = dict(free)
            for r in res[i]:
                nxt[r] = start + tasks[i].seconds
            dfs(prefix + [i], nxt, remaining - {i})

    dfs([], {}, frozenset(range(n)))
    return best[1], best[0]


def earliest_start_order(tasks, hosts: dict | None = None) -> list[int]:
    """A list order built greedily: next, the task whose NICs are free soonest (the longest on a
    tie) — the search's first incumbent, and its order of trying children."""
    hosts = hosts or {}
    res = [_resources(t, hosts) for t in tasks]
    free: dict = {}
    order, remaining = [], set(range(len(tasks)))
    while remaining:
        i = min(remaining, key=lambda i: (max((free.get(r, 0.0) for r in res[i]), default=0.0),
                                          -tasks[i].seconds, i))
        start = max((free.get(r, 0.0) for r in res[i]), default=0.0)
        for r in res[i]:
            free[r] = start + tasks[i].seconds
        order.append(i)
        remaining.discard(i)
    return order


def brute_force_order(tasks, hosts: dict | None = None) -> tuple[list[int], float]:
    """(order, makespan) over every permutation: the reference the search is tested against."""
    best = min(itertools.permutations(range(len(tasks))),
               key=lambda o: (makespan(tasks, o, hosts), o))
    return list(best), makespan(tasks, best, hosts)


def brute_force_assignment(tiles) -> int:
    """The least possible max load over every whole-tile assignment (tests only: exponential)."""
    return min(max_load(tiles, senders)
               for senders in itertools.product(*[list(h) for _, h in tiles]))
