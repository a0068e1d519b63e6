"""The measurement after notebook 02's predict-then-run exercise (`zero2-bytes`): ZeRO-2 on the
GPT with n_embd = 40 at N = 4, one step; the ledger's bytes per rank beside the reader's answer and
the closed form (`parlab.zero.cost.step_bytes`, Rajbhandari et al., SC 2020, §7.2.2).
"""

from __future__ import annotations

import parlab
from parlab.zero.cost import step_bytes

WIDER = {"n_embd": 40}  # the exercise's GPT (parlab.zero.exercises.WIDER)


def _unit_numels(cfg) -> list[int]:
    from parlab.engine.loop import build_model
    from parlab.zero.shard import unit_modules

    return [sum(p.numel() for _, p in params) for _, _, params in unit_modules(build_model(cfg))]


def zero2_bytes(prediction=None, world_size: int = 4) -> dict:
    """Run ZeRO-2 for one step; print the busiest rank's ledger bytes, the closed form and the
    reader's `prediction` (the exercise cell's `answer`), within the check's tolerance (0.5 B) or not."""
    run = parlab.run("zero2", world_size=world_size, steps=1, model_config=WIDER)
    measured = max(run.bytes_per_rank())
    formula = step_bytes(2, _unit_numels(run.config), world_size)
    print(f"ZeRO-2, GPT n_embd = {WIDER['n_embd']}, N = {world_size}, one step: the "
          f"ledger's busiest rank sends {measured:,.0f} B; closed form 2(N-1)/N · Σ padded units "
          f"· 4 B = {formula:,} B; equal: {measured == formula}")
    if prediction is None:
        print("your prediction: none yet (set `answer` in the cell above)")
    else:
        print(f"your prediction: {prediction:,} B — within 0.5 B of the measurement: "
              f"{abs(prediction - measured) <= 0.5}")
    return {"measured": measured, "formula": formula}
