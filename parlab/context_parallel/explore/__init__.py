"""What notebook 06 (context parallelism) runs: figures of the ring and the all-to-all, memory and
ledger measurements, the video serving trade-off, the widget's callback and rank workers.

Papers: Ring Attention (Liu et al., ICLR 2024), DeepSpeed-Ulysses (Jacobs et al. 2023), the
zig-zag split (rank r holds chunks r and 2cp−1−r: the Llama 3 paper, Dubey et al. 2024, §3.3.2, and
the ring-flash-attention implementation; Striped Attention, Brandon et al. 2023, balances the
causal mask differently, striping tokens round-robin), Latent Parallelism (Wu et al. 2025).
"""

from __future__ import annotations

import functools

import torch

import parlab
from parlab.context_parallel import ring_attention as ring
from parlab.context_parallel.cost import critical_path, lp_bytes, lp_compute_fraction, sp_bytes  # noqa: F401
from parlab.context_parallel.latent_parallel import relative_error, serve
from parlab.context_parallel.ring_recompute import ring_attention_recompute
from parlab.context_parallel.ulysses import ulysses_attention
from parlab.context_parallel.video_denoiser import VideoConfig, sample
from parlab.core.comm import Comm
from parlab.core.launch import launch
from parlab.core.memory import ActivationMeter
from parlab.engine.registry import get_scheme
from parlab.models.gpt import attention

SCHEMES = {"ring": "cp-ring", "ulysses": "cp-ulysses", "allgather": "cp-allgather"}


# ----------------------------------------------------------------------------- one process
def score_memory(seq_len: int, batch: int = 1, n_head: int = 4, head_dim: int = 8) -> int:
    """Measured bytes autograd saves for one attention call over seq_len tokens (one process)."""
    q, k, v = (torch.randn(batch, n_head, seq_len, head_dim, requires_grad=True)
               for _ in range(3))
    meter = ActivationMeter(exclude=[q, k, v])
    with meter:
        out = attention(q, k, v, causal=True)  # (B, nh, T, hs)
    del out
    return meter.peak


def online_softmax_check(seq_len: int = 32, blocks=(1, 4, 8, 16)) -> dict:
    """Max |blockwise − full| for several block sizes, causal (the rule on one process)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, seq_len, 8, generator=g) for _ in range(3))
    full = attention(q, k, v, causal=True)
    return {b: (ring.blockwise_attention(q, k, v, b) - full).abs().max().item() for b in blocks}


# ----------------------------------------------------------------------------- figures
def ring_figure(cp: int = 4, layout: str = "zigzag"):
    """One panel per rank: the (query chunk × key chunk) score blocks it computes, coloured by
    the ring step that brings the key block; empty = skipped by the causal mask."""
    import matplotlib.pyplot as plt
    import numpy as np

    n = 2 * cp
    fig, axes = plt.subplots(1, cp, figsize=(2.6 * cp, 2.8))
    cmap = plt.get_cmap("viridis", cp)
    for r, ax in enumerate(np.atleast_1d(axes)):
        grid = np.full((n, n), np.nan)
        for s in range(cp):
            for qc in ring.layout_chunks(layout, r, cp):
                for kc in ring.layout_chunks(layout, (r - s) % cp, cp):
                    if kc <= qc:
                        grid[qc, kc] = s
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=cp - 0.5)
        ax.set_title(f"rank {r}: {int(np.sum(~np.isnan(grid)))} blocks", fontsize=9)
        ax.set_xlabel("key chunk")
        ax.set_ylabel("query chunk")
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
    fig.suptitle(f"ring attention, cp={cp}, {layout} split (colour: ring step)")
    fig.tight_layout()
    return fig


def ulysses_figure(cp: int = 4, n_head: int = 4, seq_len: int = 16):
    """Who holds what, before and after Ulysses' all-to-all: (tokens × heads) coloured by rank."""
    import matplotlib.pyplot as plt
    import numpy as np

    before = np.repeat(np.arange(cp), seq_len // cp)[:, None].repeat(n_head, 1)  # (T, nh)
    after = np.repeat(np.arange(cp), n_head // cp)[None, :].repeat(seq_len, 0)  # (T, nh)
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.2))
    for ax, grid, title in zip(axes, (before, after), ("sequence-sharded (T/cp, all heads)",
                                                       "head-sharded (all T, nh/cp heads)")):
        ax.imshow(grid.T, cmap=plt.get_cmap("tab10", 10), vmin=0, vmax=9, aspect="auto")
        ax.set_xlabel("token")
        ax.set_ylabel("head")
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"Ulysses all-to-all, cp={cp} (colour: rank)")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- runs
@functools.cache
def reference(steps: int = 3, seq_len: int = 32, optimizer: str = "adamw"):
    return parlab.run("single", steps=steps, model_config={"block_size": seq_len},
                      optimizer=optimizer)


def run(method: str, world_size: int, cp: int | None = None, steps: int = 3, seq_len: int = 32,
        **options):
    return parlab.run(SCHEMES[method], world_size=world_size, steps=steps,
                      model_config={"block_size": seq_len}, cp=cp, **options)


def ledger_vs_formula(result) -> list[dict]:
    """Measured bytes per rank and phase, per training step (the run's totals ÷ its steps), next
    to the closed form; `equal` compares the run's totals to the byte."""
    cfg, g = result.config, result.config.model_config
    dims = result.outputs[0].extras["degrees"]
    form = get_scheme(cfg.scheme).forms["attention_bytes"]
    expect = form(cfg.batch_size // dims["dp"], g.n_head, g.block_size, g.head_dim, dims["cp"],
                  g.n_layer)
    rows = []
    for phase in ("cp-forward", "cp-backward"):
        measured = result.bytes_per_rank(phase=phase)
        rows.append({"scheme": cfg.scheme, "phase": phase,
                     "measured per rank per step": [b // cfg.steps for b in measured],
                     "formula per rank per step": expect[phase],
                     "equal": set(measured) == {cfg.steps * expect[phase]}})
    return rows


def _attention_memory_rank(rank, world_size, method, seq_len, batch, n_head, head_dim):
    comm = Comm(None)
    layout = "contiguous" if method == "ulysses" else "zigzag"
    positions = ring.all_positions(layout, world_size, seq_len)
    q, k, v = (torch.randn(batch, n_head, seq_len // world_size, head_dim, requires_grad=True)
               for _ in range(3))  # (B, nh, T/cp, hs)
    meter = ActivationMeter(exclude=[q, k, v])
    with meter:
        if method == "ring":
            out = ring.ring_attention(q, k, v, comm, positions)
        elif method == "ring-recompute":
            out = ring_attention_recompute(q, k, v, comm, positions)
        else:
            out = ulysses_attention(q, k, v, comm, positions)
    out.sum().backward()
    return meter.peak


def attention_memory(method: str, cp: int, seq_len: int, batch: int = 1, n_head: int = 4,
                     head_dim: int = 8) -> int:
    """Peak bytes saved for backward by one sharded attention call, on the busiest rank."""
    if cp == 1:
        return score_memory(seq_len, batch, n_head, head_dim)
    return max(launch(_attention_memory_rank, cp, method, seq_len, batch, n_head, head_dim,
                      timeout=120))


def memory_table(seq_lens=(32, 64, 128), cps=(1, 2, 4)) -> list[dict]:
    rows = []
    for method in ("ring", "ring-recompute", "ulysses"):
        for T in seq_lens:
            row = {"method": method, "T": T}
            for cp in cps:
                row[f"cp={cp}"] = attention_memory(method, cp, T)
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------- video
def video_tradeoff(world_size: int = 2, halos=(0, 1, 2, 4), cfg: VideoConfig | None = None):
    """Bytes per denoising step and error vs the single process: SP (ring, Ulysses), LP per halo."""
    cfg = cfg or VideoConfig()
    ref = sample(cfg)
    rows = []
    for method in ("ring", "ulysses"):
        result = serve("sp", cfg, world_size, method=method)
        rows.append({"mode": f"sp-{method}", "halo": "-",
                     "bytes/step": max(result.bytes_per_step()),
                     "formula": sp_bytes(cfg, world_size, method),
                     "compute/rank": 1 / world_size,
                     "error": relative_error(result.output, ref)})
    for h in halos:
        result = serve("lp", cfg, world_size, halo=h)
        rows.append({"mode": "lp", "halo": h, "bytes/step": max(result.bytes_per_step()),
                     "formula": max(sum(lp_bytes(cfg, world_size, h, r, s)
                                        for s in range(cfg.denoise_steps)) / cfg.denoise_steps
                                    for r in range(world_size)),
                     "compute/rank": lp_compute_fraction(cfg, world_size, h),
                     "error": relative_error(result.output, ref)})
    return rows


def plot_tradeoff(rows, ax=None):
    """Error vs bytes per step, as in the paper's communication/quality figure."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    lp = [r for r in rows if r["mode"] == "lp"]
    ax.plot([r["bytes/step"] for r in lp], [max(r["error"], 1e-8) for r in lp], "o-",
            label="latent parallelism")
    for r in lp:
        ax.annotate(f"h={r['halo']}", (r["bytes/step"], max(r["error"], 1e-8)), fontsize=8)
    for r in rows:
        if r["mode"].startswith("sp"):
            ax.plot([r["bytes/step"]], [max(r["error"], 1e-8)], "s", label=r["mode"])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bytes sent per rank per denoising step")
    ax.set_ylabel("relative error vs single process (0 drawn at 1e-8)")
    ax.legend(fontsize="small")
    return ax


# ----------------------------------------------------------------------------- widget
def panel(world_size: int = 2, method: str = "ring", seq_len: int = 32):
    """The widget's callback: one AdamW step at cp = world_size, vs the single process.

    AdamW like every run of the chapter, compared with the project's relative tolerance
    (`parlab.engine.verify`: 1e-4 of each parameter tensor's largest entry). A per-element
    tolerance would fail here: AdamW's first step divides each gradient by its own magnitude (+ε),
    so entries whose gradients nearly cancel turn the float noise of another summation order into
    a visible difference — ddp-naive shows the same."""
    result = run(method, world_size, cp=world_size, steps=1, seq_len=seq_len)
    print(result.compare(reference(1, seq_len)))
    sent = [a + b for a, b in zip(result.bytes_per_rank(phase="cp-forward"),
                                  result.bytes_per_rank(phase="cp-backward"))]
    for rank, mem in enumerate(result.memory):
        print(f"rank {rank}: attention bytes sent {sent[rank]:,}, activations "
              f"{mem['activations']:,} B")


# ----------------------------------------------------------------------------- side by side
def _torch_context_parallel_rank(rank, world_size):
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh("cpu", (world_size,))
    q, k, v = (torch.randn(1, 4, 32, 8) for _ in range(3))  # (B, nh, T, hs)
    try:
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return f"ran: output {tuple(out.shape)}"
    except Exception as err:  # noqa: BLE001 - the point is to show what PyTorch says on CPU
        return f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"


def torch_context_parallel(world_size: int = 2) -> str:
    """Try PyTorch's own context_parallel() on CPU ranks; return what rank 0 got."""
    return launch(_torch_context_parallel_rank, world_size, timeout=120)[0]


def _union(intervals) -> float:
    """Seconds covered by at least one of the (start, end) intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _digits(seconds: float) -> float:
    """Three significant digits: a virtual step of the tiny model is milliseconds of A100 time and
    its messages on NVLink microseconds, so a fixed number of decimals would print zeros."""
    return float(f"{seconds:.3g}")


def link_comparison(world_size: int, link: str = "NVLink", steps: int = 2,
                    clock: str = "A100") -> list[dict]:
    """cp-ring vs cp-ulysses on a link: the α-β prediction of rank 0's communication time (Σ over
    its ops of α·rounds + bytes/β, the way parlab.core.link charges them: a send and a recv each
    occupy the link) next to its measured step time (communication + compute), and what rank 0's
    ops measured: the sum of their durations and the time at least one was in flight, each to three
    significant digits. On a paced `clock` (default A100, `parlab.core.clock`) `link` is the real
    link, undilated, and every time is virtual, in the accelerator's seconds; "wall": this CPU,
    raw. "NVLink" under a paced clock is that accelerator's own NVLink
    (A100: NVLink 3, 300 GB/s per direction; `parlab.core.clock.pace_link`)."""
    rows = []
    for method in ("ring", "ulysses"):
        r = run(method, world_size, cp=world_size, steps=steps, link=link, clock=clock)
        spec = r.config.link
        mine = [x for x in r.ledger if x["rank"] == 0]

        def cost(ops, spec=spec):
            return sum(spec.cost(max(x["bytes_sent"], x["bytes_recv"]), x["rounds"])
                       for x in ops) / steps
        attention_ops = [x for x in mine if str(x["phase"]).startswith("cp-")]
        spans = [(x["t_start"], x["t_end"]) for x in mine]
        rows.append({"scheme": r.config.scheme, "clock": r.clock.label,
                     "attention ops/step": len(attention_ops) // steps,
                     "attention bytes sent/step": sum(x["bytes_sent"] for x in attention_ops) // steps,
                     "predicted attention s": _digits(cost(attention_ops)),
                     "predicted all comm s": _digits(cost(mine)),
                     "measured ops, summed s": _digits(sum(b - a for a, b in spans) / steps),
                     "measured in flight s": _digits(_union(spans) / steps),
                     "measured step s": _digits(sum(r.step_times) / steps)})
    return rows


def explain_link(rows: list[dict]) -> None:
    """When the predicted communication exceeds the whole measured step, say why from the
    measurement: the prediction charges every op one after another, but the ring posts its K and
    V sends and receives together (and Ulysses' all-to-alls overlap each other's halves), so the
    ops' durations summed exceed the time any of them was in flight."""
    for row in rows:
        if row["predicted all comm s"] <= row["measured step s"]:
            ratio = row["measured ops, summed s"] / row["predicted all comm s"]
            why = (f"its ops measured {row['measured ops, summed s']} s summed, {ratio:.2f}× the "
                   "prediction: the link's own time" if ratio <= 1.1 else
                   f"its ops' spans sum to {row['measured ops, summed s']} s, {ratio:.0f}× the "
                   "prediction: a span runs from the op's post to its wait, and the ring posts the "
                   "next K/V block before a block's attention and waits after it, so each span "
                   "covers the compute it overlaps")
            print(f"{row['scheme']}: predicted communication {row['predicted all comm s']} s fits in "
                  f"the measured step {row['measured step s']} s; {why}")
            continue
        concurrency = row["measured ops, summed s"] / max(row["measured in flight s"], 1e-9)
        print(f"{row['scheme']}: predicted communication {row['predicted all comm s']} s > the whole "
              f"measured step {row['measured step s']} s because the prediction is a serial sum. "
              f"Measured on rank 0: its ops' durations sum to {row['measured ops, summed s']} s, but "
              f"some op was in flight for only {row['measured in flight s']} s — {concurrency:.1f} "
              "ops in flight at a time on average (sends and receives posted together, overlapping "
              "each other and the compute). The serial sum is an upper bound, not the step.")


def last_step(events: list[dict]) -> list[dict]:
    """The timeline events of the last training step (from the last forward's start on any rank):
    one step is what a Gantt chart can show legibly."""
    starts = {}
    for e in events:
        if e["kind"] == "compute" and e["name"] == "forward":
            starts[e["rank"]] = max(starts.get(e["rank"], 0.0), e["t0"])
    t0 = min(starts.values())
    return [dict(e, t0=e["t0"] - t0, t1=e["t1"] - t0) for e in events if e["t0"] >= t0]

