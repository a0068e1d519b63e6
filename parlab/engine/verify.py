"""Is a parallel run the same computation as the single-process reference?

Two runs match when every step's loss and every final parameter agree within `rtol` (default
1e-4, fp32): |a - b| <= rtol·max(|b|, 1) for losses, and max|a - b| <= rtol·max(max|b|, 1e-3)
per parameter tensor — relative to the tensor's scale, so that entries near zero do not demand
more than float32 can give.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Comparison:
    match: bool
    max_loss_diff: float
    max_param_diff: float  # relative to each tensor's max |value|
    worst_param: str
    problems: list

    def __str__(self) -> str:
        return (f"match: {self.match}  (max loss diff {self.max_loss_diff:.2e}, max relative "
                f"parameter diff {self.max_param_diff:.2e} in {self.worst_param or '-'})")


def compare_states(state, reference, rtol: float = 1e-4):
    """(max relative diff, worst name, problems) between two {name: tensor} dicts."""
    problems, worst, worst_name = [], 0.0, ""
    if set(state) != set(reference):
        problems.append(f"parameter names differ: missing {sorted(set(reference) - set(state))}, "
                        f"extra {sorted(set(state) - set(reference))}")
    for name in sorted(set(state) & set(reference)):
        a, b = state[name].float(), reference[name].float()
        if a.shape != b.shape:
            problems.append(f"{name}: shape {tuple(a.shape)} != {tuple(b.shape)}")
            continue
        scale = max(b.abs().max().item() if b.numel() else 0.0, 1e-3)
        diff = (a - b).abs().max().item() / scale if b.numel() else 0.0
        if diff > worst:
            worst, worst_name = diff, name
        if not diff <= rtol:
            problems.append(f"{name}: relative diff {diff:.2e} > {rtol:g}")
    return worst, worst_name, problems


def compare(result, reference, rtol: float = 1e-4) -> Comparison:
    problems = []
    if len(result.losses) != len(reference.losses):
        problems.append(f"{len(result.losses)} losses vs {len(reference.losses)}")
    loss_diff = 0.0
    for i, (a, b) in enumerate(zip(result.losses, reference.losses)):
        diff = abs(a - b)
        loss_diff = max(loss_diff, diff)
        if not diff <= rtol * max(abs(b), 1.0):
            problems.append(f"step {i}: loss {a:.8f} vs {b:.8f}")
    worst, worst_name, state_problems = compare_states(result.state, reference.state, rtol)
    problems += state_problems
    return Comparison(not problems, loss_diff, worst, worst_name, problems)
