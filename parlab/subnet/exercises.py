"""Notebook 10's exercises (`parlab.exercises`): memory and bytes of subnetwork data parallelism at
GPU scale (Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data
Parallelism", 2025): three to compute, two design problems (the most owners per block that fit an
H100's memory budget; the most that keep a step's bytes under a time budget on NDR InfiniBand) and
one predict-then-run on the chapter's GPT. The answers come from the chapter's closed forms
(`parlab.subnet.cost`, held equal to the ledger and the measured memory of real runs by the tests),
applied to a 7B-parameter model's ownership; each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.core.link import REAL
from parlab.engine.runner import make_config
from parlab.exercises import Exercise, find, numeric
from parlab.subnet import cost as subnet_cost
from parlab.subnet.ownership import Ownership, Piece, Unit, owners_of

BLOCKS, BLOCK, SHARED = 32, 200_000_000, 600_000_000  # 32 blocks of 0.2B + 0.6B shared = 7B


def block_ownership(world_size: int, owners: int, blocks: int = BLOCKS, block: int = BLOCK,
                    shared: int = SHARED) -> Ownership:
    """Block-level ownership of a model of `blocks` blocks of `block` parameters and `shared` shared
    ones, units assigned as `ownership.assign` assigns a real model's."""
    units = [Unit(f"blocks.{u}", (Piece(f"blocks.{u}.weight", (block,)),),
                  owners_of(u, owners, world_size)) for u in range(blocks)]
    units.append(Unit("shared", (Piece("shared.weight", (shared,)),), tuple(range(world_size))))
    return Ownership(world_size, owners, "block", tuple(units))


def largest_owners(fits, world_size: int = 8) -> int:
    """The largest k in 1..N for which `fits(block_ownership(N, k))` holds (0: none)."""
    return max((k for k in range(1, world_size + 1) if fits(block_ownership(world_size, k))), default=0)


def owners_for_memory(budget: float = 60e9, mask: str = "backward") -> int:
    """Largest k whose model states per rank (the worst rank) fit `budget` bytes."""
    return largest_owners(lambda o: max(sum(subnet_cost.memory_formula(o, mask, r).values())
                                        for r in range(o.world_size)) <= budget)


def owners_for_link(budget_s: float = 0.5, link: str = "NDR-IB", mask: str = "forward") -> int:
    """Largest k whose busiest rank's bytes per step take at most `budget_s` on `link` (bytes/β)."""
    beta = REAL[link][1]
    return largest_owners(lambda o: max(sum(subnet_cost.step_bytes(o, mask, r).values())
                                        for r in range(o.world_size)) / beta <= budget_s)


def gpt_bytes(world_size: int = 4, owners: int = 2) -> int:
    """Rank 0's bytes per step of `sdp` on the chapter's GPT, forward masking, block level."""
    cfg = make_config("sdp", world_size=world_size, steps=1, owners=owners, mask="forward",
                      granularity="block")
    return sum(subnet_cost.step_bytes(subnet_cost.ownership_of(cfg), "forward", 0).values())


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    k1, k2 = block_ownership(8, 1), block_ownership(8, 2)
    return {"forward-memory": sum(subnet_cost.memory_formula(k1, "forward", 0).values()),
            "backward-memory": sum(subnet_cost.memory_formula(k1, "backward", 0).values()),
            "owner-bytes": sum(subnet_cost.step_bytes(k2, "forward", 0).values()),
            "owners-for-memory": owners_for_memory(),
            "owners-for-link": owners_for_link(),
            "gpt-bytes": gpt_bytes()}


_A = answers()
_MODEL = ("A 7B-parameter model: 32 transformer blocks of 0.2B parameters and 0.6B shared ones "
          "(embeddings, final norm), fp32, AdamW; N = 8 ranks, block level")

EXERCISES = [
    Exercise("forward-memory", f"{_MODEL}, k = 1, forward masking. Bytes of model states "
             "(parameters, gradients, AdamW's two moments) one rank holds?",
             numeric(_A["forward-memory"], rtol=0.005),
             "A rank owns k/N of the blocks plus the shared parameters; 16 bytes per owned one.",
             "16 · (Ψ_shared + 32·k/N · Ψ_block)"),
    Exercise("backward-memory", f"{_MODEL}, k = 1, backward masking. Bytes of model states per "
             "rank?", numeric(_A["backward-memory"], rtol=0.005),
             "The forward needs every parameter (4Ψ); gradients and AdamW state exist for owned ones.",
             "4Ψ + 12 · (Ψ_shared + 32·k/N · Ψ_block)"),
    Exercise("owner-bytes", f"{_MODEL}, k = 2, forward masking. Bytes one rank sends per step? "
             "(Units go to ranks (u·k + j) mod N; a ring all-reduce inside each owner set; the "
             "shared parameters among all 8.)", numeric(_A["owner-bytes"], rtol=0.005),
             "Find rank 0's blocks and their owner sets first: how many distinct sets are there?",
             "rank 0 owns 8 blocks, all with owners (0, 1): 2·(1/2)·8·Ψ_block, plus "
             "2·(7/8)·Ψ_shared, times 4 bytes"),
    Exercise("owners-for-memory", f"Design: a{_MODEL[1:]}, backward masking, on H100s (80 GB): keep "
             "20 GB for activations, so model states may take at most 60 GB per GPU. What is the "
             "largest k (owners per block; more owners, more data per block's gradient) that fits?",
             numeric(_A["owners-for-memory"], rtol=0),
             "Backward masking holds all parameters (4Ψ) plus gradients and AdamW state of owned ones; "
             "rank 0 owns 32·k/8 blocks plus the shared parameters.",
             "largest k with 4Ψ + 12·(Ψ_shared + 4k·Ψ_block) ≤ 60 GB", kind="design"),
    Exercise("owners-for-link", f"Design: a{_MODEL[1:]}, forward masking, the ranks joined by NDR "
             "InfiniBand (50 GB/s per GPU). The step's gradient traffic should take at most 0.5 s "
             "(bytes/β, the busiest rank). What is the largest k that meets it?",
             numeric(_A["owners-for-link"], rtol=0),
             "Rank 0 owns 4k blocks, all with the same k owners; the shared parameters are all-reduced "
             "among all 8.",
             "largest k with [2(k−1)/k · 4k·Ψ_block + 2·(7/8)·Ψ_shared] · 4 B / β ≤ 0.5 s",
             kind="design"),
    Exercise("gpt-bytes", "Predict, then run the cell below: the chapter's GPT has 4 blocks of "
             "12,416 parameters and 4,160 shared ones (embeddings, final norm). sdp with N = 4, "
             "k = 2, forward masking, block level, fp32: bytes rank 0 sends per step?",
             numeric(_A["gpt-bytes"], rtol=0.005),
             "Unit u goes to ranks (u·k + j) mod N: which blocks does rank 0 own, and with whom?",
             "rank 0 owns blocks 0 and 2 with rank 1: [2·(1/2)·2·12,416 + 2·(3/4)·4,160] · 4 B",
             kind="predict"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
