"""What notebooks/12_serving.ipynb runs, part C: LLM inference priced by the roofline
(`parlab.serving.inference`; Pope et al., MLSys 2023): prefill vs decode per kernel family against
the ridge point, the KV cache against 80 GB, static vs continuous batching (Orca, OSDI 2022) and
tensor-parallel decode latency vs batch. Every verdict is computed, so a table can say "fails".
"""

from __future__ import annotations

from parlab.serving import inference as inf

MODELS = ("gpt2-xl", "llama3-8b")
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def _holds(ok: bool) -> str:
    return "holds" if ok else "fails"


def roofline_table(model: str = "gpt2-xl", prompt: int = 1024, context: int = 1024,
                   batch: int = 1, acc: str = "A100") -> dict:
    """Per kernel family: intensity and bound of prefill (P tokens) and of one decode step."""
    s, r = inf.shape(model), inf.ridge(acc)
    pre, dec = inf.prefill(s, prompt, batch, acc), inf.decode(s, context, batch, acc)
    print(f"{model} on {acc} (ridge F/HBM = {r:.1f} FLOP/B), batch {batch}: prefill of {prompt} "
          f"tokens vs one decode step at context {context}")
    print(f"{'family':>9} | {'prefill FLOP/B':>14} {'bound':>7} {'ms':>8} | "
          f"{'decode FLOP/B':>13} {'bound':>7} {'ms':>8}")
    for fam in (*inf.FAMILIES, "total"):
        p, d = pre[fam], dec[fam]
        print(f"{fam:>9} | {p['intensity']:>14.1f} {p['bound']:>7} {1e3 * p['seconds']:>8.3f} | "
              f"{d['intensity']:>13.2f} {d['bound']:>7} {1e3 * d['seconds']:>8.3f}")
    pi, di = pre["total"]["intensity"], dec["total"]["intensity"]
    print(f"prefill is compute-bound: intensity {pi:.0f} FLOP/B >= ridge {r:.0f}: {_holds(pi >= r)}")
    print(f"decode at B={batch} is memory-bound: intensity {di:.1f} FLOP/B < ridge {r:.0f}: "
          f"{_holds(di < r)}")
    att, ratio = dec["attention"]["intensity"], s.n_head / s.n_kv_head
    print(f"decode attention's intensity ≈ n_head/n_kv_head = {s.n_head}/{s.n_kv_head} (q/y bytes "
          f"aside): {att:.2f} vs {ratio:.2f}: {_holds(abs(att - ratio) < 0.05 * ratio)}; below the "
          f"ridge at every batch (the KV read grows with it): {_holds(ratio < r)}")
    return {"prefill": pre, "decode": dec}


def kv_table(models=MODELS, memory: float = 80e9) -> None:
    """KV bytes per token and per sequence at the model's block size, and the tokens
    (batch × context) that fit in `memory` beside the weights."""
    print(f"{'model':>10} {'KV B/token':>11} {'context':>8} {'KV MB/seq':>10} {'weights GB':>10} "
          f"{'tokens in ' + format(memory / 1e9, 'g') + ' GB':>16} {'seqs at context':>15}")
    for m in models:
        s = inf.shape(m)
        tok, per_seq = inf.kv_bytes_per_token(s), inf.kv_bytes(s, 1, s.block)
        fit = inf.max_tokens(s, memory)
        print(f"{m:>10} {tok:>11,} {s.block:>8,} {per_seq / 1e6:>10.1f} "
              f"{inf.weight_bytes(s) / 1e9:>10.2f} {fit:>16,} {fit // s.block:>15,}")
    a, b = (inf.shape(m) for m in models[:2])
    print(f"per token {models[1]}'s cache is {inf.kv_bytes_per_token(b) / inf.kv_bytes_per_token(a):.2f}× "
          f"{models[0]}'s though {inf.weight_bytes(b) / inf.weight_bytes(a):.1f}× the weights: "
          f"grouped-query attention ({b.n_kv_head} k/v heads of {b.n_head})")


def batching_table(model: str = "gpt2-xl", slots: int = 8, context: int = 1024, n: int = 32,
                   seed: int = 0, acc: str = "A100") -> dict:
    """Static vs continuous batching over a seeded list of output lengths, and equal lengths."""
    s, lengths = inf.shape(model), inf.requests(n, seed)
    rows = {}
    for label, ls in (("seeded", lengths), ("all equal", [lengths[0]] * n)):
        st = inf.static_batching(s, ls, slots, context, acc)
        co = inf.continuous_batching(s, ls, slots, context, acc)
        rows[label] = (st, co)
        print(f"{label:>9}: {n} requests, lengths {min(ls)}..{max(ls)}, {slots} slots | static "
              f"{st['iterations']} iterations {st['tokens_per_s']:,.0f} tok/s | continuous "
              f"{co['iterations']} iterations {co['tokens_per_s']:,.0f} tok/s | "
              f"×{co['tokens_per_s'] / st['tokens_per_s']:.2f}")
    st, co = rows["seeded"]
    print(f"continuous >= static on the seeded list: {_holds(co['tokens_per_s'] >= st['tokens_per_s'])}")
    st, co = rows["all equal"]
    print("equal lengths: the two schedules are the same: "
          f"{_holds(abs(co['seconds'] - st['seconds']) <= 1e-9 * st['seconds'])}")
    return rows


def tp_table(model: str = "llama3-8b", context: int = 1024, tps=(1, 2, 4, 8),
             batches=(1, 8, 64, 256), acc: str = "A100") -> dict:
    """Decode step latency (ms) per tensor-parallel degree and batch; the best tp per batch."""
    s = inf.shape(model)
    ms = {(tp, b): 1e3 * inf.decode(s, context, b, acc, tp)["total"]["seconds"]
          for tp in tps for b in batches}
    print(f"{model} decode step (ms) at context {context} on {acc} + NVLink all-reduces")
    print(f"{'tp':>4} " + " ".join(f"{'B=' + str(b):>9}" for b in batches))
    for tp in tps:
        print(f"{tp:>4} " + " ".join(f"{ms[tp, b]:>9.3f}" for b in batches))
    for b in batches:
        best = min(tps, key=lambda tp: ms[tp, b])
        stop = [tp for tp in tps[1:] if ms[tp, b] >= ms[tps[tps.index(tp) - 1], b]]
        print(f"B={b}: fastest tp={best} ({ms[tps[0], b] / ms[best, b]:.2f}× tp={tps[0]}, "
              f"efficiency {ms[tps[0], b] / ms[best, b] / (best / tps[0]):.0%}); "
              + (f"tp={stop[0]} no faster than the one before: launches and all-reduce latency "
                 "do not shrink with tp" if stop else "every doubling still pays"))
    return ms


def decode_curve(model: str = "llama3-8b", context: int = 1024, batches=BATCHES, acc: str = "A100"):
    """Decode step time vs batch: the memory floor (bytes/HBM), the compute line (FLOPs/F)."""
    import matplotlib.pyplot as plt

    s, a = inf.shape(model), inf.accelerator(acc)
    rows = [inf.decode(s, context, b, acc)["total"] for b in batches]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(batches, [1e3 * r["seconds"] for r in rows], "o-", label="roofline step (+ launches)")
    ax.plot(batches, [1e3 * r["bytes"] / a.hbm_Bps for r in rows], "--", label="bytes / HBM")
    ax.plot(batches, [1e3 * r["flops"] / a.flops for r in rows], ":", label="FLOPs / F")
    ax.set(xscale="log", yscale="log", xlabel="batch (sequences)", ylabel="ms per decode step",
           title=f"{model} decode at context {context} on {acc}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    cross = next((b for b, r in zip(batches, rows) if r["flops"] / a.flops >= r["bytes"] / a.hbm_Bps), None)
    print(f"{model}: the whole step's FLOPs/F passes its bytes/HBM at batch {cross} of those drawn — "
          "later than the weight matmuls alone (their critical batch, below), because the KV read "
          "grows with the batch and decode's attention never turns compute-bound" if cross else
          f"{model}: memory-bound at every batch up to {batches[-1]} (the KV read grows with batch)")
    return fig


def explore(model: str = "gpt2-xl", acc: str = "A100") -> None:
    """The whole part: roofline, KV cache, batching, TP."""
    roofline_table(model, acc=acc)
    print()
    kv_table()
    print()
    batching_table(model, acc=acc)
    for m in MODELS:
        print()
        tp_table(m, acc=acc)
