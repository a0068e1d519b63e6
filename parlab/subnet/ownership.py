"""Who owns what: the ownership assignment of Subnetwork Data Parallelism.

Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data Parallelism" (2025):
the parameters are cut into *units*, each owned by k of the N ranks; a rank's subnetwork is its
units plus the shared parameters no unit covers (owned by all N). Granularities, found on any
`nn.Module`: block (the longest run of structurally identical members of the longest
`nn.ModuleList`) and neuron (slice s of N of the hidden units of every `up` (d→h) / `down` (h→d)
feed-forward). Unit u is owned by ranks (u·k + j) mod N, j < k: every rank exactly k times over N
units, at most N owner sets. The rules in full: docs/subnet.md, `parlab.subnet.ownership`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from parlab.core.cost import shard_bounds

GRANULARITIES = ("neuron", "block")


@dataclass(frozen=True)
class Piece:
    """A parameter, or its slice [lo, hi) along `dim` (dim None: the whole tensor)."""

    name: str  # the parameter's name in the full model (`named_parameters`)
    shape: tuple  # the full parameter's shape
    dim: int | None = None
    lo: int = 0
    hi: int = 0

    @property
    def index(self) -> tuple:
        """Indexing the full parameter with this gives the piece."""
        if self.dim is None:
            return (slice(None),)
        return (slice(None),) * self.dim + (slice(self.lo, self.hi),)

    @property
    def numel(self) -> int:
        whole = 1
        for size in self.shape:
            whole *= size
        return whole if self.dim is None else whole // self.shape[self.dim] * (self.hi - self.lo)


@dataclass(frozen=True)
class Unit:
    label: str  # "blocks.2", "blocks.0.mlp[32:64]", "shared"
    pieces: tuple  # (Piece, ...)
    owners: tuple  # ranks, ascending

    @property
    def numel(self) -> int:
        return sum(p.numel for p in self.pieces)


@dataclass(frozen=True)
class Ownership:
    world_size: int
    owners: int  # k: owners of every unit but the shared one
    granularity: str
    units: tuple  # (Unit, ...); the last is the shared unit (owned by all N), possibly empty

    def owned(self, rank: int) -> list[Unit]:
        return [u for u in self.units if rank in u.owners]

    def owned_numel(self, rank: int) -> int:
        return sum(u.numel for u in self.owned(rank))

    @property
    def numel(self) -> int:
        return sum(u.numel for u in self.units)

    def owner_sets(self) -> list[tuple]:
        """Every distinct set of owners, in a fixed order (the same on every rank)."""
        return sorted({u.owners for u in self.units if u.numel}, key=lambda s: (len(s), s))

    def set_numel(self, owners: tuple) -> int:
        """Elements of all units owned by exactly `owners`: one flat gradient buffer."""
        return sum(u.numel for u in self.units if u.owners == owners)

    def published(self, rank: int) -> list[Unit]:
        """Units `rank` sends to their non-owners after each update (backward masking): unit i
        with non-owners is sent by its owner i mod k (spread over the owners, so that the padded
        all-gather of `sync.py` wastes little)."""
        return [u for i, u in enumerate(self.units) if len(u.owners) < self.world_size
                and u.owners[i % len(u.owners)] == rank]

    def published_numel(self, rank: int) -> int:
        return sum(u.numel for u in self.published(rank))

    def matrix(self) -> list[list[bool]]:
        """[rank][unit]: whether the rank owns the unit (the ownership matrix drawn)."""
        return [[r in u.owners for u in self.units] for r in range(self.world_size)]


def owners_of(unit: int, owners: int, world_size: int) -> tuple:
    """Ranks owning unit number `unit`: (unit·k + j) mod N for j < k."""
    return tuple(sorted({(unit * owners + j) % world_size for j in range(owners)}))


def find_blocks(model: nn.Module) -> tuple[str, list[int]]:
    """(name of the longest ModuleList, indices of its longest run of identical members)."""
    lists = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        return "", []
    name, members = max(lists, key=lambda item: len(item[1]))

    def signature(module):
        return tuple((n, tuple(p.shape)) for n, p in module.named_parameters())

    best: list[int] = []
    run: list[int] = []
    for i, member in enumerate(members):
        if run and signature(member) == signature(members[run[-1]]) and signature(member):
            run.append(i)
        else:
            run = [i] if signature(member) else []
        if len(run) > len(best):
            best = list(run)
    return name, best


def find_ffns(model: nn.Module) -> list[tuple[str, str, str]]:
    """(module, up, down) names of every feed-forward submodule: exactly two Linear children,
    up d→h then down h→d."""
    found = []
    for name, module in model.named_modules():
        linears = [(n, c) for n, c in module.named_children() if isinstance(c, nn.Linear)]
        if len(linears) != 2:
            continue
        (up_name, up), (down_name, down) = linears
        if up.out_features == down.in_features and up.in_features == down.out_features:
            found.append((name, up_name, down_name))
    return found


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def assign(model: nn.Module, world_size: int, owners: int, granularity: str) -> Ownership:
    """The ownership of `model`'s parameters by `owners` of `world_size` ranks.

    ValueError, naming the value, for owners outside [1, N], an unknown granularity, or a model the
    granularity cannot split (no blocks / no feed-forward layer; fewer units than ranks to own them).
    """
    if isinstance(owners, bool) or not isinstance(owners, int) or not 1 <= owners <= world_size:
        raise ValueError(f"owners={owners!r} must be an int in [1, world_size={world_size}]: each "
                         "parameter is owned by k of the N ranks")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity={granularity!r} must be one of {GRANULARITIES}")
    params = dict(model.named_parameters())
    units: list[Unit] = []
    if granularity == "block":
        list_name, blocks = find_blocks(model)
        if len(blocks) * owners < world_size:
            raise ValueError(
                f"granularity='block' cannot split {type(model).__name__}: {len(blocks)} "
                f"interchangeable block(s) × owners={owners} < world_size={world_size}, so some "
                "rank would own no block (use more blocks, more owners, or granularity='neuron')")
        for u, i in enumerate(blocks):
            prefix = _join(list_name, str(i))
            pieces = tuple(Piece(n, tuple(p.shape)) for n, p in params.items()
                           if n.startswith(prefix + "."))
            units.append(Unit(prefix, pieces, owners_of(u, owners, world_size)))
    else:
        ffns = find_ffns(model)
        if not ffns:
            raise ValueError(f"granularity='neuron' cannot split {type(model).__name__}: it has no "
                             "feed-forward submodule (exactly two Linear children, d→h then h→d); "
                             "use granularity='block'")
        for module_name, up, down in ffns:
            up_w, down_w = _join(module_name, up, "weight"), _join(module_name, down, "weight")
            hidden = params[up_w].shape[0]
            if hidden < world_size:
                raise ValueError(f"granularity='neuron' cannot split {module_name}: {hidden} hidden "
                                 f"neurons < world_size={world_size} slices")
            up_b = _join(module_name, up, "bias")
            for s, (lo, hi) in enumerate(shard_bounds(hidden, world_size)):
                pieces = [Piece(up_w, tuple(params[up_w].shape), 0, lo, hi)]
                if up_b in params:
                    pieces.append(Piece(up_b, tuple(params[up_b].shape), 0, lo, hi))
                pieces.append(Piece(down_w, tuple(params[down_w].shape), 1, lo, hi))
                units.append(Unit(f"{module_name}[{lo}:{hi}]", tuple(pieces),
                                  owners_of(s, owners, world_size)))
    covered = {p.name for u in units for p in u.pieces}
    shared = tuple(Piece(n, tuple(p.shape)) for n, p in params.items() if n not in covered)
    units.append(Unit("shared", shared, tuple(range(world_size))))
    return Ownership(world_size, owners, granularity, tuple(units))
