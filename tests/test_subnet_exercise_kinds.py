"""Chapter 10 (issue 52): the two design exercises are the boundary of their budgets, and the
predict-then-run answer is the closed form of the chapter's GPT."""

from parlab.core.link import REAL
from parlab.subnet import cost as subnet_cost
from parlab.subnet import exercises


def _worst(values):
    return max(values)


def test_owners_for_memory_is_the_largest_that_fits():
    k = exercises.owners_for_memory()

    def states(k):
        o = exercises.block_ownership(8, k)
        return _worst(sum(subnet_cost.memory_formula(o, "backward", r).values()) for r in range(8))
    assert states(k) <= 60e9 < states(k + 1)


def test_owners_for_link_is_the_largest_within_the_budget():
    k = exercises.owners_for_link()
    beta = REAL["NDR-IB"][1]

    def seconds(k):
        o = exercises.block_ownership(8, k)
        return _worst(sum(subnet_cost.step_bytes(o, "forward", r).values()) for r in range(8)) / beta
    assert seconds(k) <= 0.5 < seconds(k + 1)


def test_gpt_bytes_is_the_worked_solution():
    # rank 0 owns blocks 0 and 2 with rank 1; the shared parameters go round all four
    assert exercises.gpt_bytes() == (2 * 1 // 2 * 2 * 12_416 + 2 * 3 * 4_160 // 4) * 4


def test_every_kind_is_there():
    kinds = [e.kind for e in exercises.EXERCISES]
    assert 5 <= len(kinds) <= 6 and kinds.count("design") >= 2 and kinds.count("predict") >= 1
