"""Chapter 06's predict-then-run cell: the reader's predicted forward bytes of Llama 3's
all-gather context parallelism (`cp-allgather`, Dubey et al. 2024, §3.3.2) beside the ledger of
a real run, its closed form (`cost.allgather_bytes`) and the ring's (`cost.ring_bytes`)."""

from __future__ import annotations


def allgather_forward_bytes(prediction, world_size: int = 2, block_size: int = 128) -> dict:
    """Run cp-allgather on `world_size` ranks (cp = world_size) for one step of the tiny GPT at
    T = `block_size`; print the bytes rank 0 sent in cp-forward (ledger), the closed form, the
    ring's closed form, and `prediction` (the reader's answer), each comparison computed."""
    import parlab
    from parlab.context_parallel import cost

    r = parlab.run("cp-allgather", world_size=world_size, cp=world_size, steps=1,
                   model_config={"block_size": block_size})
    g, B = r.config.model_config, r.config.batch_size
    measured = r.bytes_per_rank(phase="cp-forward")[0]
    form = cost.allgather_bytes(B, g.n_head, g.block_size, g.head_dim, world_size, g.n_layer)
    ring = cost.ring_bytes(B, g.n_head, g.block_size, g.head_dim, world_size, g.n_layer)
    ops = sum(1 for x in r.ledger if x["rank"] == 0 and x["phase"] == "cp-forward")
    print(f"measured (ledger, rank 0, one step, {ops} all-gathers): {measured:,} B; closed form "
          f"(cost.allgather_bytes): {form['cp-forward']:,} B — "
          + ("equal" if measured == form["cp-forward"] else "NOT equal"))
    print(f"the ring's closed form at the same shapes: {ring['cp-forward']:,} B — "
          + ("the same bytes" if ring["cp-forward"] == measured else
             f"{measured / ring['cp-forward']:.2f}× the ring's")
          + f", in {g.n_layer} collectives instead of {g.n_layer * (world_size - 1)} sends")
    if prediction is None:
        print("your prediction: none yet (set `answer` in the cell above)")
    else:
        off = prediction / measured - 1 if measured else float("nan")
        print(f"your prediction: {prediction:,} B ({off:+.1%} from the measurement) — "
              + ("right (within 0.1%)" if abs(off) <= 1e-3 else "not it"))
    return {"measured": measured, "formula": form["cp-forward"], "prediction": prediction}
