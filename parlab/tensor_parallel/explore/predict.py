"""Chapter 03's predict-then-run cell: the reader's predicted `tp-forward` bytes beside the ledger
of a real run and the closed form (Megatron-LM, Shoeybi et al. 2019, §3: 2 all-reduces per block
forward, `parlab.tensor_parallel.cost.closed_form_bytes`)."""

from __future__ import annotations


def forward_bytes(prediction, tp: int = 2, model_config: dict | None = None) -> dict:
    """Run tp on `tp` ranks for one step (the exercise's GPT, width 40), print the bytes rank 0
    sent in tp-forward (measured, from the ledger), the closed form, and the reader's `answer`,
    each comparison computed (to the byte). `prediction`: the exercise cell's `answer`."""
    import parlab
    from parlab.tensor_parallel.cost import closed_form_bytes
    from parlab.tensor_parallel.exercises import WIDER

    model_config = model_config or WIDER
    r = parlab.run("tp", world_size=tp, steps=1, model_config=model_config)
    measured = r.bytes_per_rank(phase="tp-forward")[0]
    formula = closed_form_bytes(r.config.model_config, r.config.batch_size, tp, 0, 1,
                                False)["tp-forward"]
    print(f"measured (ledger, rank 0, one step): {measured:,} B; closed form: {formula:,} B — "
          + ("equal" if measured == formula else "NOT equal"))
    if prediction is None:
        print("your prediction: none yet (set `answer` in the cell above)")
    else:
        off = prediction / measured - 1 if measured else float("nan")
        print(f"your prediction: {prediction:,} B ({off:+.1%} from the measurement) — "
              + ("right (to the byte)" if abs(prediction - measured) <= 0.5 else "not it"))
    return {"measured": measured, "formula": formula, "prediction": prediction}
