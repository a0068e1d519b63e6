"""Is a parallel run the same computation as the single-process reference?

Two runs match when every step's loss and every final parameter agree within `rtol` (default
1e-4, fp32): |a - b| <= rtol·max(|b|, 1) for losses, and max|a - b| <= rtol·max(max|b|, 1e-3)
per parameter tensor. Mixed precision (`parlab.core.precision`) compares with `single` of the
same precision within the format's unit round-off u = 2^-p (bf16 u = 2^-8, fp16 u = 2^-11):
losses |a - b| <= u·max(|b|, 1), and the whole parameter vector ‖θ - θ_ref‖₂ <= u·‖θ_ref‖₂ —
not per element, because Adam turns a differently rounded cancelling gradient into an update of
up to ±lr; a wrong scheme still moves every weight by ~lr (`tests/test_precision.py`). The
argument in full: docs/engine.md, `parlab.engine.verify`.
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


def mixed_tolerance(precision: str) -> float:
    """u = 2^-p of the compute format (see the module docstring): bf16 2^-8, fp16 2^-11."""
    from parlab.core.precision import unit_roundoff
    return unit_roundoff(precision)


def compare_norm(state, reference, rtol: float):
    """(‖a - b‖₂ / ‖b‖₂ over every parameter, problems): the mixed-precision bound."""
    problems = []
    if set(state) != set(reference):
        return float("inf"), [f"parameter names differ: missing "
                              f"{sorted(set(reference) - set(state))}, extra "
                              f"{sorted(set(state) - set(reference))}"]
    num = den = 0.0
    for name in sorted(reference):
        a, b = state[name].double(), reference[name].double()
        if a.shape != b.shape:
            problems.append(f"{name}: shape {tuple(a.shape)} != {tuple(b.shape)}")
            continue
        num += ((a - b) ** 2).sum().item()
        den += (b ** 2).sum().item()
    diff = (num / den) ** 0.5 if den else num ** 0.5
    if not diff <= rtol:
        problems.append(f"parameters: relative L2 diff {diff:.2e} > {rtol:g}")
    return diff, problems


def compare(result, reference, rtol: float | None = None) -> Comparison:
    """`result` against `reference`: elementwise within rtol (default 1e-4) in fp32; in mixed
    precision losses and the parameter vector's norm within the format's u (module docstring)."""
    # anything with losses and a state compares (a one-process emulation has no config)
    precision = getattr(getattr(result, "config", None), "precision", "fp32")
    ref_precision = getattr(getattr(reference, "config", None), "precision", "fp32")
    if precision != "fp32" or ref_precision != "fp32":
        return _compare_mixed(result, reference, precision, ref_precision, rtol)
    rtol = 1e-4 if rtol is None else rtol
    problems = []
    loss_diff = _compare_losses(result.losses, reference.losses, rtol, problems)
    worst, worst_name, state_problems = compare_states(result.state, reference.state, rtol)
    problems += state_problems
    return Comparison(not problems, loss_diff, worst, worst_name, problems)


def _compare_losses(losses, reference, rtol: float, problems: list) -> float:
    """Append to `problems` every step whose loss differs by more than rtol (relative, at least
    absolute rtol); return the largest difference."""
    if len(losses) != len(reference):
        problems.append(f"{len(losses)} losses vs {len(reference)}")
    loss_diff = 0.0
    for i, (a, b) in enumerate(zip(losses, reference)):
        diff = abs(a - b)
        loss_diff = max(loss_diff, diff)
        if not diff <= rtol * max(abs(b), 1.0):
            problems.append(f"step {i}: loss {a:.8f} vs {b:.8f}")
    return loss_diff


def _compare_mixed(result, reference, precision, ref_precision, rtol) -> Comparison:
    problems = []
    if precision != ref_precision:
        problems.append(f"precision={precision!r} compared with a {ref_precision!r} reference: "
                        "compare with single of the same precision")
    rtol = mixed_tolerance(precision if precision != "fp32" else ref_precision) \
        if rtol is None else rtol
    loss_diff = _compare_losses(result.losses, reference.losses, rtol, problems)
    diff, state_problems = compare_norm(result.state, reference.state, rtol)
    return Comparison(not (problems + state_problems), loss_diff, diff, "‖θ‖₂ (all parameters)",
                      problems + state_problems)
