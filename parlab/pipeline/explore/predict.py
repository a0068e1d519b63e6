"""Predict, then run: the chapter's predict-then-run exercise (`bubble-measured`) measured.

The reader predicts 1F1B's bubble at p stages and m micro-batches; `measure_bubble` runs
`pp-1f1b` on the paced A100 (virtual time, `parlab.core.clock`: the same to the bit on every run)
and prints the measured bubble beside the reader's prediction and the closed form (p−1)/(m+p−1)
(Huang et al., GPipe, NeurIPS 2019, §2.3; Narayanan et al., SC 2021, §2.2.1), with a verdict
within `tolerance` points.
"""

from __future__ import annotations

from parlab.pipeline import cost


def measure_bubble(prediction, p: int, m: int, tolerance: float = 0.05, steps: int = 2) -> dict:
    """Run 1F1B at (p, m) paced on the A100; print measured, the reader's `prediction`, closed form."""
    from parlab.pipeline import explore

    got = explore.measured_vs_ideal("pp-1f1b", p, m, steps=steps, draw=False, clock="A100")
    theory = cost.theory_bubble("1f1b", p, m)
    gap = got["measured"] - theory
    said = "no prediction yet" if prediction is None else f"your prediction {float(prediction):.1%}"
    print(f"1F1B p={p} m={m} (paced A100): measured bubble {got['measured']:.1%}, {said}, closed "
          f"form (p−1)/(m+p−1) = {theory:.1%}: measured − closed form {gap * 100:+.1f} points — "
          + ("agrees" if abs(gap) <= tolerance else "does NOT agree")
          + f" (±{tolerance * 100:.0f} points)")
    if prediction is not None:
        off = float(prediction) - got["measured"]
        print(f"your prediction is {off * 100:+.1f} points off the measurement")
    return {"measured": got["measured"], "theory": theory, "prediction": prediction}
