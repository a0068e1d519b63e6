"""Chapter 00's exercises (`parlab.exercises`): a ring all-reduce's bytes and time at GPU scale,
its limit 2S, a tree's bytes on this machine (checked against a real run's ledger), where
ring and tree cross (α-β model: Thakur, Rabenseifner & Gropp, IJHPCA 2005) and the faithful
link's dilation; each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.core import cost
from parlab.core.explore import link_worker
from parlab.core.launch import launch
from parlab.core.link import REAL


def ledger_bytes(numel: int, world_size: int, rank: int, algo: str) -> int:
    """Bytes `rank` sent in a real `algo` all-reduce of `numel` float32 on `world_size` ranks, read
    from the run's ledger (launched once per setting, then remembered)."""
    key = (numel, world_size, rank, algo)
    if key not in _LEDGER:
        _LEDGER[key] = launch(link_worker, world_size, numel * 4, algo)[rank]["record"]["bytes_sent"]
    return _LEDGER[key]


_LEDGER: dict = {}


def matches_ledger(numel: int, world_size: int, rank: int, algo: str):
    """A check that accepts exactly the bytes a real run's ledger shows (`ledger_bytes`): the
    run, not a formula, decides."""
    def accepts(answer) -> bool:
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            return False
        return answer == ledger_bytes(numel, world_size, rank, algo)
    return accepts


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    n, S = 8, 7e9 * 2  # 8 GPUs, a 7B-parameter model's bf16 gradients
    ring_bytes = 2 * (n - 1) / n * S
    alpha, beta, m = 5e-6, 100e9, 16  # crossover of ring and tree at N = 16
    ring_rounds, tree_rounds = 2 * (m - 1), 2 * cost.tree_depth(m)
    crossover = (ring_rounds - tree_rounds) * alpha * beta / (tree_rounds - 2 * (m - 1) / m)
    return {"ring-bytes-gpu": ring_bytes,
            "ring-time-nvlink": ring_bytes / REAL["NVLink4"][1],
            "ring-limit": 2.0,
            "tree-bytes-here": cost.tree_all_reduce(10_000, 4, 0)[0] * 4,
            "ring-tree-crossover": crossover,
            "dilation": 150e12 / 40e9}


def exercises() -> list:
    """Chapter 00's exercises (parlab.exercises): check says right or wrong, never the answer."""
    from parlab.exercises import Exercise, numeric

    a = answers()
    return [
        Exercise("ring-bytes-gpu", "An 8-GPU node all-reduces the bf16 gradients of a 7B-parameter "
                 "model with a ring. How many bytes does each GPU send?",
                 numeric(a["ring-bytes-gpu"], rtol=0.02),
                 "Reduce-scatter then all-gather: each sends (N−1)/N of the buffer; bf16 is 2 bytes.",
                 "2·(N−1)/N·S with S = 7e9 × 2 B = 14 GB, N = 8: 2·7/8·14 GB = 24.5 GB."),
        Exercise("ring-time-nvlink", "The same all-reduce over an H100's NVLink 4 at 450 GB/s per "
                 "direction, latency negligible: how many seconds?",
                 numeric(a["ring-time-nvlink"], rtol=0.05),
                 "A rank sends and receives at once; time = bytes on the busiest direction / β.",
                 "24.5 GB / 450 GB/s ≈ 54 ms."),
        Exercise("ring-limit", "As N grows, the bytes each rank sends in a ring all-reduce of S bytes "
                 "tend to what multiple of S?", numeric(a["ring-limit"], rtol=0.001),
                 "Take the limit of 2(N−1)/N.",
                 "2(N−1)/N → 2: it grows with N but stays below 2S. The ring is bandwidth-optimal "
                 "because 2(N−1)/N·S is the lower bound for any all-reduce (Patarasuk & Yuan 2009), "
                 "not because it is independent of N."),
        Exercise("tree-bytes-here", "How many bytes does rank 0 send in a tree all-reduce of 10,000 "
                 "float32 on 4 ranks? (The check runs it and compares with the run's ledger.)",
                 matches_ledger(10_000, 4, 0, "tree"),
                 "Rank 0 is the root of a binary heap tree: it has children 1 and 2 and no parent; "
                 "in the broadcast down it sends the whole tensor to each child.",
                 "Children 2 × 10,000 × 4 B = 80,000 B (section 3's table: S per child)."),
        Exercise("ring-tree-crossover", "With α = 5 µs per round and β = 100 GB/s, above what message "
                 "size in bytes does the ring beat the tree on N = 16 ranks?",
                 numeric(a["ring-tree-crossover"], rtol=0.05),
                 "Set 2(N−1)α + 2(N−1)/N·S/β equal to 2⌊log₂N⌋(α + S/β) and solve for S.",
                 "30α + 1.875·S/β = 8α + 8·S/β ⇒ S = 22αβ / 6.125 ≈ 1.8 MB."),
        Exercise("dilation", "Suppose this CPU computes the model at 40 GFLOP/s, an A100 at 150 TFLOP/s. By "
                 "what factor does parlab.core.link.faithful multiply 1GbE's α (and divide its β)?",
                 numeric(a["dilation"], rtol=0.01),
                 "Every compute time is that much longer here; communication must be too.",
                 "N = F_acc / F_cpu = 150e12 / 40e9 = 3,750."),
    ]


def exercise(name: str):
    from parlab.exercises import find

    return find(exercises(), name)
