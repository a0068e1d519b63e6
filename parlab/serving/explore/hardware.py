"""What notebooks/12_serving.ipynb runs, part C beside another GPU: LLM inference priced by the
roofline on an A100 and an H100 side by side (`parlab.serving.inference`; Pope et al., MLSys 2023),
and the latency-throughput trade-off of decode (Austin et al., "How to Scale Your Model", Google
DeepMind 2025, chapter "All About Transformer Inference": batching is nearly free in latency until
the weights' matmuls reach the critical batch F/HBM, the KV cache then bounds the batch).

Both accelerators are `parlab.core.link.ACCELERATORS` entries (sustained F, datasheet HBM and
memory, NVLink of their generation); nothing here runs a model: every number is the closed form
of `parlab.serving.inference`, priced per kernel as `Clock.price` prices one. Every verdict is
computed from the printed numbers with its tolerance, so a row can say "fails".
"""

from __future__ import annotations

from parlab.serving import inference as inf

ACCS = ("A100", "H100")
BATCHES = (1, 4, 16, 64, 128, 256, 512)


def _holds(ok: bool) -> str:
    return "holds" if ok else "fails"


def _best_tp(s, context: int, batch: int, acc: str, tps=(1, 2, 4, 8)) -> tuple[int, float]:
    """(tp, ms) of the fastest tensor-parallel degree for one decode step."""
    ms = {tp: 1e3 * inf.decode(s, context, batch, acc, tp)["total"]["seconds"] for tp in tps}
    best = min(tps, key=ms.get)
    return best, ms[best]


def rows(accs=ACCS) -> list[tuple]:
    """(quantity, {acc: value}, format) for every quantity Part C prints on the A100."""
    g, ll = inf.shape("gpt2-xl"), inf.shape("llama3-8b")
    lengths = inf.requests(32, 0)
    out = []

    def add(name, fn, fmt):
        out.append((name, {a: fn(a) for a in accs}, fmt))

    add("ridge F/HBM (FLOP/B)", inf.ridge, "{:.1f}")
    add("gpt2-xl prefill 1024 tok (ms)",
        lambda a: 1e3 * inf.prefill(g, 1024, 1, a)["total"]["seconds"], "{:.2f}")
    add("gpt2-xl decode B=1 L=1024 (ms)",
        lambda a: 1e3 * inf.decode(g, 1024, 1, a)["total"]["seconds"], "{:.3f}")
    add("llama3-8b prefill 1024 tok (ms)",
        lambda a: 1e3 * inf.prefill(ll, 1024, 1, a)["total"]["seconds"], "{:.2f}")
    add("llama3-8b decode B=1 L=8192 (ms)",
        lambda a: 1e3 * inf.decode(ll, 8192, 1, a)["total"]["seconds"], "{:.3f}")
    add("llama3-8b seqs of 8192 in memory",
        lambda a: inf.max_tokens(ll, inf.accelerator(a).memory_bytes) // 8192, "{:,}")
    add("gpt2-xl static 8 slots (tok/s)",
        lambda a: inf.static_batching(g, lengths, 8, 1024, a)["tokens_per_s"], "{:,.0f}")
    add("gpt2-xl continuous 8 slots (tok/s)",
        lambda a: inf.continuous_batching(g, lengths, 8, 1024, a)["tokens_per_s"], "{:,.0f}")
    for b in (1, 64):
        add(f"llama3-8b best tp at B={b} (tp)", lambda a, b=b: _best_tp(ll, 1024, b, a)[0], "{}")
        add(f"llama3-8b its decode at B={b} (ms)", lambda a, b=b: _best_tp(ll, 1024, b, a)[1],
            "{:.3f}")
    return out


def side_by_side(accs=ACCS) -> list[tuple]:
    """One table: every Part C quantity on each accelerator and the ratio of the last to the
    first; then whether prefill speeds up by the ratio of F and decode by the ratio of HBM."""
    a0, a1 = accs[0], accs[-1]
    acc = {a: inf.accelerator(a) for a in accs}
    print("clock: " + "; ".join(
        f"paced {a} ({acc[a].flops / 1e12:.0f} TFLOP/s sustained, HBM {acc[a].hbm_Bps / 1e9:,.0f} "
        f"GB/s, {acc[a].memory_bytes / 1e9:.0f} GB, {acc[a].nvlink})" for a in accs)
          + ", priced by the roofline, closed forms only")
    table = rows(accs)
    width = max(len(name) for name, _, _ in table)
    print(f"{'quantity':<{width}} " + " ".join(f"{a:>10}" for a in accs) + f" {a1 + '÷' + a0:>10}")
    for name, values, fmt in table:
        ratio = values[a1] / values[a0] if values[a0] else float("nan")
        print(f"{name:<{width}} " + " ".join(f"{fmt.format(values[a]):>10}" for a in accs)
              + f" {ratio:>9.2f}×")
    get = {name: values for name, values, _ in table}
    f_ratio = acc[a1].flops / acc[a0].flops
    hbm_ratio = acc[a1].hbm_Bps / acc[a0].hbm_Bps
    pre = get["llama3-8b prefill 1024 tok (ms)"]
    dec = get["llama3-8b decode B=1 L=8192 (ms)"]
    pre_x, dec_x = pre[a0] / pre[a1], dec[a0] / dec[a1]
    print(f"prefill (compute-bound) is faster on the {a1} by about its F ratio {f_ratio:.2f}×: "
          f"llama3-8b {pre_x:.2f}× (within 10%: {_holds(abs(pre_x / f_ratio - 1) <= 0.10)})")
    print(f"decode at B=1 (memory-bound) is faster by about its HBM ratio {hbm_ratio:.2f}×, not "
          f"its F ratio: llama3-8b {dec_x:.2f}× (within 10%: "
          f"{_holds(abs(dec_x / hbm_ratio - 1) <= 0.10)})")
    g = get["gpt2-xl decode B=1 L=1024 (ms)"]
    share = {a: launch_share(inf.shape("gpt2-xl"), 1024, 1, a) for a in (a0, a1)}
    print(f"gpt2-xl's decode gains only {g[a0] / g[a1]:.2f}×: its {inf.shape('gpt2-xl').n_layer} "
          f"layers' kernel launches, the same µs on both GPUs, are {share[a0]:.0%} of its A100 step "
          f"and {share[a1]:.0%} of its H100 step")
    r = get["ridge F/HBM (FLOP/B)"]
    print(f"the {a1}'s ridge is {r[a1] / r[a0]:.2f}× the {a0}'s: F grew more than HBM, so decode "
          f"needs a larger batch before its matmuls are compute-bound")
    return table


def launch_share(s, context: int, batch: int, acc: str) -> float:
    """The share of one decode step that is kernel launches (a fixed cost per kernel)."""
    n = sum(k for k, _, _ in inf.kernels(s, batch, 1, context).values())
    return n * inf.accelerator(acc).launch_s / inf.decode(s, context, batch, acc)["total"]["seconds"]


def critical_batch(model: str = "llama3-8b", context: int = 1024, acc: str = "A100",
                   family: str = "mlp") -> int:
    """The smallest batch at which one decode step's `family` kernels are compute-bound (their
    intensity reaches the ridge): about F/HBM for a weight matmul, as each weight (2 bytes) does
    2·B FLOPs; bisection over the batch."""
    s = inf.shape(model)
    if family not in inf.FAMILIES or family == "attention":
        raise ValueError(f"family={family!r} must be a weight matmul: qkv, out, mlp or head")

    def compute(b):
        return inf.decode(s, context, b, acc)[family]["bound"] == "compute"

    lo, hi = 1, 1
    while not compute(hi):
        lo, hi = hi, hi * 2
        if hi > 1 << 20:
            raise ValueError(f"{family} never compute-bound below batch {hi}")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compute(mid) else (mid, hi)
    return hi if not compute(lo) else lo


def latency_throughput(model: str = "llama3-8b", context: int = 1024, batches=BATCHES,
                       accs=ACCS) -> dict:
    """Decode's trade: per batch, the step time (each sequence's time per output token) and the
    tokens per second of one GPU, on each accelerator, and whether weights + KV cache fit its
    memory; then the critical batch and what batching bought up to it and past it."""
    s = inf.shape(model)
    out = {}
    print(f"{model} decode at context {context}: per-token latency (ms per step) and throughput "
          f"(tokens/s of one GPU) against batch; memory: weights + KV cache")
    print(f"{'batch':>6} {'memory GB':>10} " + " ".join(
        f"{a + ' ms':>10} {a + ' tok/s':>12} {'fits':>5}" for a in accs))
    for b in batches:
        mem = inf.weight_bytes(s) + inf.kv_bytes(s, b, context)
        cells = []
        for a in accs:
            ms = 1e3 * inf.decode(s, context, b, a)["total"]["seconds"]
            fits = mem <= inf.accelerator(a).memory_bytes
            out[a, b] = {"ms": ms, "tok_s": b / ms * 1e3, "fits": fits, "memory": mem}
            cells.append(f"{ms:>10.3f} {b / ms * 1e3:>12,.0f} {'yes' if fits else 'no':>5}")
        print(f"{b:>6} {mem / 1e9:>10.1f} " + " ".join(cells))
    for a in accs:
        crit, ridge = critical_batch(model, context, a), inf.ridge(a)
        fit = [b for b in batches if out[a, b]["fits"]]
        below = [b for b in fit if b <= crit]
        one, knee, top = out[a, batches[0]], out[a, below[-1]], out[a, fit[-1]]
        print(f"{a}: the MLP's matmuls turn compute-bound at batch {crit} (ridge F/HBM "
              f"{ridge:.0f}; within 5%: {_holds(abs(crit / ridge - 1) <= 0.05)}); from batch "
              f"{batches[0]} to {below[-1]} throughput ×{knee['tok_s'] / one['tok_s']:.1f} for "
              f"latency ×{knee['ms'] / one['ms']:.2f}; to {fit[-1]}, the largest printed batch that "
              f"fits, throughput ×{top['tok_s'] / one['tok_s']:.1f} for latency "
              f"×{top['ms'] / one['ms']:.2f}")
        out[a, "critical"] = crit
    return out
