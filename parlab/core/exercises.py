"""Chapter 00's exercises (`parlab.exercises`): the β a fit of Thakur's tree form reads from paced
runs at N = 32, a tree's bytes (checked against a real run's ledger), where ring and tree cross
(α-β model: Thakur, Rabenseifner & Gropp, IJHPCA 2005), two design problems (a bucket size that
keeps latency under 10% on InfiniBand; the two-level all-reduce's gain on 4 DGX A100 nodes) and
one predict-then-run on the paced clock; each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.core import cost
from parlab.core.explore import link_worker
from parlab.core.explore import real_link as rl
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
    ib_alpha, ib_beta = REAL["HDR-IB"]
    # Thakur's tree sends 2⌊log₂32⌋·S level after level; the clock charges an inner rank's 3·S once
    tree_beta = 2 * cost.tree_depth(32) / 3 * ib_beta / 1e9
    alpha, beta, m = 5e-6, 100e9, 16  # crossover of ring and tree at N = 16
    ring_rounds, tree_rounds = 2 * (m - 1), 2 * cost.tree_depth(m)
    crossover = (ring_rounds - tree_rounds) * alpha * beta / (tree_rounds - 2 * (m - 1) / m)
    return {"tree-beta-fit": tree_beta,
            "tree-bytes-here": cost.tree_all_reduce(10_000, 4, 0)[0] * 4,
            "ring-tree-crossover": crossover,
            # 2(N−1)α ≤ 10% of 2(N−1)α + 2(N−1)/N·S/β  ⇔  S ≥ 9·N·α·β
            "bucket-latency-10pct": 9 * 16 * ib_alpha * ib_beta,
            "two-level-speedup": rl.flat_ring(1e9, 32) / rl.two_level(1e9, 4),
            "predict-ring-paced-us": rl.priced("ring", 8, PREDICT_BYTES, "NVLink3") * 1e6}


PREDICT_BYTES = 24 << 20  # the predict-then-run exercise's all-reduce: 24 MiB of float32


def exercises() -> list:
    """Chapter 00's exercises (parlab.exercises): check says right or wrong, never the answer."""
    from parlab.exercises import Exercise, numeric

    a = answers()
    return [
        Exercise("tree-beta-fit", "Section 8 fits Thakur's tree form, 2⌊log₂N⌋(α + S/β), to the "
                 "paced tree all-reduce. Fitted the same way to paced runs on N = 32 A100s over HDR "
                 "InfiniBand (α = 2 µs, β = 25 GB/s per GPU, one GPU per node), what β in GB/s does "
                 "the fit read?", numeric(a["tree-beta-fit"], rtol=0.02),
                 "Count the copies of S the form sends one after another, and the bytes the clock "
                 "charges the busiest rank of the binary heap tree in its busier direction.",
                 "The form charges 2⌊log₂32⌋·S = 10·S/β_fit; the clock charges an inner rank (a "
                 "parent, two children) 3·S/β once: 10/β_fit = 3/β ⇒ β_fit = 10/3 × 25 GB/s ≈ 83 GB/s."),
        Exercise("tree-bytes-here", "How many bytes does rank 0 send in a tree all-reduce of 10,000 "
                 "float32 on 4 ranks? (The check runs it and compares with the run's ledger.)",
                 matches_ledger(10_000, 4, 0, "tree"),
                 "Rank 0 is the root of a binary heap tree: it has children 1 and 2 and no parent; "
                 "in the broadcast down it sends the whole tensor to each child.",
                 "Children 2 × 10,000 × 4 B = 80,000 B (section 3's table: S per child)."),
        Exercise("ring-tree-crossover", "With α = 5 µs per round and β = 100 GB/s, above what message "
                 "size in bytes does the ring beat the tree on N = 16 ranks (Thakur's sequential "
                 "tree)?", numeric(a["ring-tree-crossover"], rtol=0.05),
                 "Set 2(N−1)α + 2(N−1)/N·S/β equal to 2⌊log₂N⌋(α + S/β) and solve for S.",
                 "30α + 1.875·S/β = 8α + 8·S/β ⇒ S = 22αβ / 6.125 ≈ 1.8 MB."),
        Exercise("bucket-latency-10pct", "Design: 16 A100s, one per node, all-reduce gradient "
                 "buckets with the ring over HDR InfiniBand (α = 2 µs, β = 25 GB/s). Choose the "
                 "smallest bucket, in bytes, whose rounds' latency is at most 10% of its all-reduce "
                 "time.", numeric(a["bucket-latency-10pct"], rtol=0.05),
                 "The ring's time is 2(N−1)α + 2(N−1)/N·S/β; ask the first term to be ≤ 0.1 × the sum.",
                 "0.9·2(N−1)α ≤ 0.1·2(N−1)/N·S/β ⇒ S ≥ 9·N·α·β = 9·16·2 µs·25 GB/s = 7.2 MB: "
                 "buckets of ~8 MB and up are bandwidth-bound (PyTorch DDP's default is 25 MB).",
                 kind="design"),
        Exercise("two-level-speedup", "Design: 4 DGX A100 nodes (32 GPUs; NVLink 3 inside at α = 1 "
                 "µs, 300 GB/s; HDR InfiniBand between at α = 2 µs, 25 GB/s per GPU) all-reduce 1 GB "
                 "(1e9 bytes). By what factor is the two-level all-reduce (ring reduce-scatter "
                 "inside, ring all-reduce across nodes on 8 rails, all-gather inside) faster than one "
                 "flat ring over all 32 GPUs?", numeric(a["two-level-speedup"], rtol=0.05),
                 "The flat ring's every round waits for InfiniBand; the two-level one sends only "
                 "S/8 per GPU across nodes, in 4-rank rings.",
                 "flat: 2·31·α_IB + 2·31/32·S/β_IB ≈ 77.6 ms; two-level: 2·7·(α_NV + S/8/β_NV) ≈ "
                 "5.9 ms + 2·3·α_IB + 2·3/4·(S/8)/β_IB ≈ 7.5 ms: ≈ 5.8× faster.",
                 kind="design"),
        Exercise("predict-ring-paced-us", "Predict, then run the next cell: how many microseconds "
                 "does a ring all-reduce of 24 MiB (24·2²⁰ bytes) of float32 take on 8 A100s over "
                 "NVLink 3 (α = 1 µs, β = 300 GB/s) on the paced clock?",
                 numeric(a["predict-ring-paced-us"], rtol=0.03),
                 "Rounds 2(N−1), bytes on the busier direction 2(N−1)/N·S.",
                 "14·1 µs + 1.75·25,165,824 B / 300 GB/s = 14 + 146.8 ≈ 161 µs; the run measures it.",
                 kind="predict"),
    ]


def exercise(name: str):
    from parlab.exercises import find

    return find(exercises(), name)
