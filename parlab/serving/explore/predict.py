"""The measurement after notebook 12's predict-then-run exercise (`edge-total`): the chapter's
grouped network split over 4 devices with every feature exchanged, one request of 3 images; the
ledger's bytes summed over devices beside the reader's answer and the closed form
(`parlab.serving.cost.dense_edge_bytes`; the split of Lin & Wang, 2021).
"""

from __future__ import annotations

from parlab.serving import cost, edge
from parlab.serving.explore import edge as ex_edge


def edge_total(prediction=None, world_size: int = 4, images: int = 3) -> dict:
    """Run the split for one request; print the bytes every device sent (ledger), their sum, the
    closed form and the reader's `prediction` (the exercise cell's `answer`), within the check's
    tolerance (0.5 B) or not."""
    _, (xt, _) = ex_edge.data()
    result = edge.run_edge(ex_edge.tuned(1.0), xt[:images], world_size)
    per_device = result.bytes_per_rank(0)
    measured = sum(per_device)
    formula = sum(cost.dense_edge_bytes(ex_edge.CONFIG, world_size, images, r)
                  for r in range(world_size))
    print(f"{world_size} devices, every feature, one request of {images} images: ledger bytes per "
          f"device {per_device}, in all {measured:,} B; closed form {formula:,} B; "
          f"equal: {measured == formula}")
    if prediction is None:
        print("your prediction: none yet (set `answer` in the cell above)")
    else:
        print(f"your prediction: {prediction:,} B — within 0.5 B of the measurement: "
              f"{abs(prediction - measured) <= 0.5}")
    return {"measured": measured, "formula": formula}
