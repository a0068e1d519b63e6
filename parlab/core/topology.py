"""Per-pair links: a cluster whose ranks are not all equally far apart.

Inside a server GPUs talk over NVLink, between servers over Ethernet or InfiniBand (Zhang et al.,
"HAP: SPMD DNN Training on Heterogeneous GPU Clusters with Automated Program Synthesis", EuroSys
2024, models each device pair's bandwidth). A `Topology` holds the `parlab.core.link.Link` of
every pair; passed as `link=`, `Comm` charges a message on its pair's link and a collective on the
slowest link of its group (its rounds are synchronous) — except an all-to-all, whose pieces travel
on each pair's own link at once (`all_to_all_seconds`). `two_nodes(4, intra="NVLink",
inter="1GbE")`: ranks [0, 1] and [2, 3] on two machines; a sub-communicator inside one node pays
the intra-node link only. In full: docs/core.md, `parlab.core.topology`.
"""

from __future__ import annotations

from dataclasses import dataclass

from parlab.core import link as link_mod
from parlab.core.link import Link


@dataclass(frozen=True)
class Topology:
    """links[i][j]: the Link between ranks i and j (None: no emulated delay). `nodes`: the ranks
    of each machine, for display."""

    links: tuple
    name: str = "custom"
    nodes: tuple = ()

    @property
    def world_size(self) -> int:
        return len(self.links)

    def link_between(self, i: int, j: int) -> Link | None:
        return self.links[i][j]

    def link_for(self, ranks) -> Link | None:
        """The slowest link among every pair of `ranks` (global ranks): max α, min β; None if all
        pairs are free."""
        ranks = sorted(set(ranks))
        pairs = [self.links[i][j] for a, i in enumerate(ranks) for j in ranks[a + 1:]]
        pairs = [p for p in pairs if p is not None]
        if not pairs:
            return None
        worst = min(pairs, key=lambda p: p.bandwidth_Bps)
        latency = max(p.latency_s for p in pairs)
        if latency == worst.latency_s:
            return worst
        return Link(latency, worst.bandwidth_Bps, f"slowest of {sorted({p.name for p in pairs})}")

    def all_to_all_seconds(self, me: int, pieces) -> float | None:
        """One all-to-all of global rank `me`, priced per destination pair by that pair's link;
        `pieces`: (global peer, bytes sent to it, bytes received from it) for each other rank.
        The peers fall into link classes (NVLink inside a node, InfiniBand across); each class is
        a path of its own that carries its peers' bytes while the others carry theirs (a DGX
        node's GPUs reach each other over NVLink and the other nodes over their own NICs at the
        same time: DeepSeek-V3 technical report, 2024, §3.2.2; Tutel's 2D hierarchical all-to-all,
        Hwang et al., MLSys 2023), and each message pays its α in turn:

            Σ_peers α_(me,peer) + max over classes L of max(sent_L, received_L)/β_L

        With one class this is `Link.cost(max(sent, received), n−1)`, the one-link price: None
        then (and when no pair has a delay), and `Comm` keeps pricing the op on `link_for`."""
        classes: dict = {}  # Link -> [peers, bytes sent over it, bytes received over it]
        for peer, sent, received in pieces:
            pair = self.links[me][peer]
            if pair is None:
                continue  # no emulated delay on this pair
            count = classes.setdefault(pair, [0, 0, 0])
            count[0], count[1], count[2] = count[0] + 1, count[1] + sent, count[2] + received
        if len(classes) < 2:
            return None
        alpha = sum(n * pair.latency_s for pair, (n, _, _) in classes.items())
        return alpha + max(max(sent, received) / pair.bandwidth_Bps
                           for pair, (_, sent, received) in classes.items())

    def __str__(self) -> str:
        return self.name


def from_matrix(matrix, name: str = "custom", nodes: tuple = ()) -> Topology:
    """A Topology from an N×N matrix of Links, preset names or None (the diagonal is ignored).
    ValueError names a matrix that is not square or symmetric, or an unknown preset."""
    n = len(matrix)
    if n < 1 or any(len(row) != n for row in matrix):
        raise ValueError(f"link matrix with rows of lengths {[len(r) for r in matrix]} must be N×N")
    links = [[None if i == j else link_mod.resolve(matrix[i][j]) for j in range(n)] for i in range(n)]
    asymmetric = [(i, j) for i in range(n) for j in range(n) if links[i][j] != links[j][i]]
    if asymmetric:
        raise ValueError(f"link matrix is not symmetric at pairs {asymmetric[:4]}")
    return Topology(tuple(tuple(row) for row in links), name, tuple(tuple(n) for n in nodes))


def two_nodes(world_size: int, intra="NVLink", inter="1GbE", first: int | None = None) -> Topology:
    """Ranks [0, first) on one machine, [first, world_size) on the other (first: half, rounded
    up); `intra` links inside a machine, `inter` between them (Links or preset names)."""
    first = (world_size + 1) // 2 if first is None else first
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be an int >= 1")
    if not 0 <= first <= world_size:
        raise ValueError(f"first={first!r} must be in [0, {world_size}]")
    node = [0 if r < first else 1 for r in range(world_size)]
    matrix = [[intra if node[i] == node[j] else inter for j in range(world_size)]
              for i in range(world_size)]
    nodes = (tuple(range(first)), tuple(range(first, world_size)))
    return from_matrix(matrix, f"2 nodes {list(nodes[0])}|{list(nodes[1])}: {_name(intra)} inside, "
                       f"{_name(inter)} between", nodes)


def nodes(world_size: int, per_node: int = 8, intra="NVLink", inter="HDR-IB") -> Topology:
    """Ranks in machines of `per_node` (a DGX node of 8 GPUs), in order: [0, per_node) on the
    first, ...; `intra` inside a machine, `inter` between (HDR InfiniBand: a DGX A100's 8 × 200
    Gb/s, one NIC per GPU, Narayanan et al. 2021 §5.1)."""
    for name, value in (("world_size", world_size), ("per_node", per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be an int >= 1")
    node = [r // per_node for r in range(world_size)]
    matrix = [[intra if node[i] == node[j] else inter for j in range(world_size)]
              for i in range(world_size)]
    groups = tuple(tuple(range(n, min(n + per_node, world_size)))
                   for n in range(0, world_size, per_node))
    return from_matrix(matrix, f"{len(groups)} node{'s' if len(groups) > 1 else ''} of "
                       f"{per_node}: {_name(intra)} inside, {_name(inter)} between", groups)


def _name(link) -> str:
    return link if isinstance(link, str) else getattr(link, "name", str(link))


def resolve(link, world_size: int | None = None):
    """A Topology (checked against `world_size`), or what `parlab.core.link.resolve` makes of
    `link` (a Link, a preset name, None). A nested list is read as a link matrix."""
    if isinstance(link, (list, tuple)) and link and isinstance(link[0], (list, tuple)):
        link = from_matrix(link)
    if isinstance(link, Topology):
        if world_size is not None and link.world_size != world_size:
            raise ValueError(f"link={link.name!r} is a topology of {link.world_size} ranks; "
                             f"world_size={world_size}")
        if all(p is None for row in link.links for p in row):
            return None
        return link
    return link_mod.resolve(link)

