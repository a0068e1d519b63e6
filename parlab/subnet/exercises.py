"""Notebook 10's exercises (`parlab.exercises`): memory and bytes of subnetwork data parallelism at
GPU scale (Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data
Parallelism", 2025). The answers come from the chapter's closed forms (`parlab.subnet.cost`, held
equal to the ledger and the measured memory of real runs by the tests), applied to a 7B-parameter
model's ownership; each check says right or wrong, never the answer.
"""

from __future__ import annotations

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


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    k1, k2 = block_ownership(8, 1), block_ownership(8, 2)
    return {"forward-memory": sum(subnet_cost.memory_formula(k1, "forward", 0).values()),
            "backward-memory": sum(subnet_cost.memory_formula(k1, "backward", 0).values()),
            "owner-bytes": sum(subnet_cost.step_bytes(k2, "forward", 0).values()),
            "one-owner-bytes": sum(subnet_cost.step_bytes(k1, "forward", 0).values()),
            "refresh-bytes": subnet_cost.step_bytes(k1, "backward", 0)["param-refresh"]}


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
    Exercise("one-owner-bytes", f"{_MODEL}, k = 1, forward masking. Bytes one rank sends per step?",
             numeric(_A["one-owner-bytes"], rtol=0.005),
             "A unit with one owner has nothing to average.",
             "only the shared parameters move: 2·(N−1)/N · Ψ_shared · 4 B"),
    Exercise("refresh-bytes", f"{_MODEL}, k = 1, backward masking. Bytes one rank sends per step "
             "in the refresh all-gather alone (non-owners receive each updated block)?",
             numeric(_A["refresh-bytes"], rtol=0.005),
             "Every rank publishes the blocks it owns; a ring all-gather of N parts sends N−1 of them.",
             "(N − 1) · (4 blocks · Ψ_block) · 4 B"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
