"""Chapter 13's predict-then-run cell: the reader predicts the bytes rank 0 of plan tp2 sends over
tensor parallelism in one step (Megatron-LM's two all-reduces per block forward and two backward,
Shoeybi et al. 2019), then this runs the plan with `nd` on the paced A100 clock and prints the
ledger beside the reader's prediction and the closed form (`parlab.planner.cost.nd_closed_form_bytes`).
"""

from __future__ import annotations

PHASES = ("tp-forward", "tp-backward")


def tp2_bytes(prediction, link: str = "NVLink", clock: str = "A100") -> dict:
    """Run plan tp2 of the default GPT one step; print rank 0's tp bytes (ledger, closed form, the
    reader's `prediction`). Returns {"ledger", "closed_form"} (bytes of rank 0, both phases)."""
    import parlab
    from parlab.planner.cost import nd_closed_form_bytes
    from parlab.planner.plan import Plan

    r = parlab.run("nd", world_size=2, tp=2, steps=1, link=link, clock=clock)
    table = nd_closed_form_bytes(Plan(tp=2), r.config, steps=1)
    ledger = {ph: r.bytes_per_rank(phase=ph)[0] for ph in PHASES}
    closed = {ph: table[ph][0] for ph in PHASES}
    total, predicted = sum(ledger.values()), sum(closed.values())
    print(f"plan tp2, one step ({r.config.clock.label}): rank 0's tp bytes (ledger) "
          + ", ".join(f"{ph} {ledger[ph]:,}" for ph in PHASES) + f" = {total:,} B")
    print(f"closed form: {predicted:,} B — {'equal' if total == predicted else 'NOT equal'}; "
          "your prediction: " + ("none yet" if not isinstance(prediction, (int, float)) else
                                 f"{prediction:,} B — " + ("right" if prediction == predicted else
                                                       "off: count the all-reduces per block, "
                                                       "both passes, and the ring's 2(N−1)/N")))
    return {"ledger": total, "closed_form": predicted}
