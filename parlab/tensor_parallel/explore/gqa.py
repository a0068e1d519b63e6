"""Chapter 03's GQA table: Llama 3 8B's attention bytes per tp rank at each degree, key/value heads
replicated past tp = n_kv (`parlab.tensor_parallel.gqa`; Ainslie et al., EMNLP 2023)."""

from __future__ import annotations


def show(preset: str = "llama3-8b", degrees=(1, 2, 4, 8, 16, 32), batch_rows: int = 1,
         seq_len: int = 8192, element_size: int = 2) -> list[dict]:
    """Print, per degree, the heads one rank holds and its bytes (bf16 by default), the degree
    where the K/V bytes stop shrinking (computed) and what that costs at the largest degree."""
    from parlab.models.presets import PRESETS
    from parlab.tensor_parallel import gqa

    cfg = PRESETS[preset]
    table = gqa.rows(cfg, degrees, batch_rows, seq_len, element_size)
    print(f"{preset}: {cfg['n_head']} query heads, {cfg['n_kv_head']} key/value heads, "
          f"{cfg['n_layer']} layers; B={batch_rows}, T={seq_len:,}, {8 * element_size}-bit")
    print(f"{'tp':>3} {'q heads':>7} {'kv heads':>8} {'copies':>6} {'q weight MB':>11} "
          f"{'k,v weight MB':>13} {'K/V per layer MB':>16} {'K/V all layers GB':>17}")
    for r in table:
        print(f"{r['tp']:>3} {r['q_heads']:>7} {r['kv_heads']:>8} {r['copies']:>6} "
              f"{r['q_weight_B'] / 1e6:>11.2f} {r['kv_weight_B'] / 1e6:>13.2f} "
              f"{r['kv_layer_B'] / 1e6:>16.2f} {r['kv_all_layers_B'] / 1e9:>17.3f}")
    stop = gqa.stops_shrinking(table)
    if stop is None:
        print("the K/V bytes per rank shrink at every degree listed")
    else:
        last = table[-1]
        ideal = table[0]["kv_all_layers_B"] / last["tp"]  # as if K/V split like the query heads
        same = "=" if stop == cfg["n_kv_head"] else "≠"
        print(f"K/V bytes per rank stop shrinking past tp={stop} ({same} n_kv_head="
              f"{cfg['n_kv_head']}: computed from the rows); at tp={last['tp']} each key/value "
              f"head lives on {last['copies']} ranks: "
              f"{last['kv_all_layers_B'] / 1e9:.3f} GB of K/V per rank where an even split would "
              f"hold {ideal / 1e9:.3f} GB ({last['kv_all_layers_B'] / ideal:.0f}×)")
    return table


def exact(world_size: int, steps: int = 2, n_kv_head: int = 1) -> dict:
    """Replication built and run: the chapter's GPT with `n_kv_head` key/value heads (fewer than
    the tp = `world_size` ranks, so each is copied) under `tp` against one process, and the
    copies' gradient sum in the ledger beside its closed form
    (`parlab.tensor_parallel.cost.closed_form_bytes`). Prints the match and the bytes."""
    import parlab
    from parlab.tensor_parallel.cost import closed_form_bytes
    from parlab.tensor_parallel.gqa import copies_of

    model_config = {"n_kv_head": n_kv_head}
    reference = parlab.run("single", steps=steps, model_config=model_config)
    result = parlab.run("tp", world_size=world_size, tp=world_size, steps=steps,
                        model_config=model_config)
    cfg = result.config
    match = result.compare(reference)
    ledger = result.bytes_per_rank(phase="kv-grad-sync")[0] // steps
    formula = closed_form_bytes(cfg.model_config, cfg.batch_size, world_size, 0, steps,
                                False).get("kv-grad-sync", 0) // steps
    copies = copies_of(cfg.model_config, world_size)
    print(f"GPT with {cfg.model_config.n_head} query heads, {n_kv_head} key/value head(s), "
          f"tp={world_size}: each key/value head on {copies} ranks")
    print(f"  tp vs one process: {match}")
    print(f"  copies' gradient sum, rank 0 per step: ledger {ledger:,} B, closed form "
          f"{formula:,} B — " + ("equal" if ledger == formula else "NOT equal"))
    return {"match": match.match, "ledger": ledger, "formula": formula, "copies": copies}
