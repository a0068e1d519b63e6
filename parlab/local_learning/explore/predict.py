"""Predict, then run: chapter 05's predict-then-run exercise (`interlock-run`) measured.

The reader predicts the bytes per step interlocking backpropagation sends down across boundary 0
(Gomez et al., "Interlocking Backpropagation", JMLR 2022: at depth d the loss L_m trains stages
m−d … m, so boundary j carries one gradient tensor per loss m in [j+1, min(j+d, p−1)]);
`measure_down_bytes` runs `interlocking` and prints the ledger's bytes beside the reader's prediction
and the closed form (`cost.gradient_bytes`), with an exact verdict (bytes are facts).
"""

from __future__ import annotations

import parlab
from parlab.local_learning import cost
from parlab.local_learning.layout import resolve
from parlab.local_learning.routes import Route


def measure_down_bytes(prediction, p: int, depth: int, aux_weight: float = 1.0, steps: int = 2) -> dict:
    """Run interlocking at (p, depth); print boundary 0's measured bytes down per step, the reader's
    `prediction` and the closed form."""
    r = parlab.run("interlocking", world_size=p, steps=steps, depth=depth, aux_weight=aux_weight)
    rows = resolve(r.config).rows
    # rank 1 sends boundary 0's gradients down: [p] bytes per rank, summed over the run's steps
    measured = r.bytes_per_rank(phase="pp-bwd")[1] // steps
    closed = cost.gradient_bytes(Route.of(p, depth, aux_weight), 0, r.config.model_config, rows)
    said = "no prediction yet" if prediction is None else f"your prediction {prediction:,} B"
    print(f"interlocking p={p} depth={depth} aux_weight={aux_weight:g}, {rows} rows per step: "
          f"boundary 0 carries {measured:,} B down per step (ledger), {said}, closed form "
          f"{closed:,} B — " + ("equal" if measured == closed else "NOT equal"))
    return {"measured": measured, "closed": closed, "prediction": prediction}
