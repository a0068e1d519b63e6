"""Notebook 08 §5: how much of one gradient each compressor loses, tensor by tensor, beside the
bytes its run sent.

The relative error ‖C(g) − g‖/‖g‖ of every compressor the chapter runs, on every tensor of a real
gradient (the tiny GPT after one backward on step 0's batch, the gradient §1 draws), at each
scheme's *default* options (`explore.options_of`: top-k and random-k at 1%, QSGD at 4 bits,
PowerSGD at rank 4) — what one step loses before error feedback (Seide et al. 2014's 1-bit SGD;
Karimireddy et al. 2019) carries it to the next. Beside it, the bytes rank 0 sent per step in
the same scheme's run (`explore.run_all`, its ledger). Compressors: top-k (Lin et al. 2018's
sparsification, without DGC's momentum correction, clipping and warm-up), random-k, QSGD
(Alistarh et al. 2017, no bucketing), EF-signSGD's scaled sign (Karimireddy et al. 2019) and
PowerSGD (Vogels et al. 2019, §3: one power iteration; here from a Q seeded once, not the run's
per-step seed nor its warm start — a simplification of ours). Local SGD and DiLoCo compress in
time, not the gradient: they have no per-step error and are not in the map.
"""

from __future__ import annotations

import functools
import math

import torch

from parlab import models
from parlab.compression import cost
from parlab.compression.explore import low_rank, options_of, times_fewer
from parlab.compression.powersgd import factor_rank
from parlab.core.when_to_use import when_to_use

COMPRESSORS = ["topk", "randomk", "qsgd", "signsgd", "powersgd"]


def real_gradients(model: str = "gpt") -> list[tuple[str, torch.Tensor]]:
    """Every parameter's gradient after one backward on step 0's batch (as `explore.real_gradient`)."""
    from parlab.models.data import global_batch

    net = models.build_model(model, models.model_config(model), 0)
    x, y = global_batch(model, 0, 12, 0, getattr(models.model_config(model), "block_size", 0))
    net.loss(x, y).backward()
    return [(name, p.grad.detach().clone()) for name, p in net.named_parameters()]


def compressed(scheme: str, grad: torch.Tensor, **options) -> torch.Tensor:
    """C(g): what the receivers decode of `grad` under `scheme` with `options` (no error feedback)."""
    if not isinstance(cost.cost_of(scheme), cost.Gathered):  # PowerSGD: rank-r factors
        rank = factor_rank(grad.shape, options.get("rank", 4))
        if rank == 0:  # a vector: PowerSGD sends it whole
            return grad.clone()
        matrix = grad.reshape(grad.shape[0], -1)  # (n, m)
        return low_rank(matrix, rank).view_as(grad)
    encoder = cost.compressor(scheme, **options)
    flat = grad.reshape(-1)  # (n,)
    return encoder.decode(encoder.encode(flat), flat.numel()).view_as(grad)


@functools.cache
def relative_errors(model: str = "gpt", schemes=tuple(COMPRESSORS)) -> tuple[list[str], dict]:
    """Tensor names and, per scheme at its default options, ‖C(g) − g‖/‖g‖ per tensor and over
    the whole gradient (√Σ‖C(g_i) − g_i‖² / √Σ‖g_i‖²)."""
    grads = real_gradients(model)
    norm = math.sqrt(sum(g.norm().item() ** 2 for _, g in grads))
    out = {}
    for scheme in schemes:
        options = {k: v for k, v in options_of(scheme).items() if k in ("ratio", "bits", "rank")}
        lost = [(compressed(scheme, g, **options) - g).norm().item() for _, g in grads]
        out[scheme] = {"options": options,
                       "per_tensor": [e / max(g.norm().item(), 1e-30) for e, (_, g) in zip(lost, grads)],
                       "whole": math.sqrt(sum(e ** 2 for e in lost)) / norm}
    return [name for name, _ in grads], out


def _short(name: str) -> str:
    return name.replace("blocks.", "").replace(".weight", ".w").replace(".bias", ".b")


def error_map(runs: dict, model: str = "gpt"):
    """The heat map (compressor × tensor) of relative error at default options, one printed line
    per compressor (mean error over tensors, whole-gradient error, bytes per step from its run's
    ledger), and the verdict: which compressor is most exact, which sends fewest bytes, and which
    no other beats on both."""
    import matplotlib.pyplot as plt

    names, errors = relative_errors(model)
    sent = {s: runs[s].bytes_per_rank()[0] / runs[s].config.steps for s in errors}  # B per step
    naive = runs["ddp-naive"].bytes_per_rank()[0] / runs["ddp-naive"].config.steps
    print(f"relative error ‖C(g) − g‖/‖g‖ on step 0's gradient ({len(names)} tensors, no error "
          f"feedback); bytes: rank 0's ledger per step, N = {runs['ddp-naive'].config.world_size} "
          f"(ddp-naive: {naive:,.0f} B/step)")
    print(f"{'compressor':<10} {'options':<14} {'mean over tensors':>17} {'whole gradient':>14} "
          f"{'B/step (ledger)':>15} {'÷ ddp':>6}")
    for scheme, e in errors.items():
        mean = sum(e["per_tensor"]) / len(names)
        print(f"{scheme:<10} {str(e['options'] or '-'):<14} {mean:>17.3f} {e['whole']:>14.3f} "
              f"{sent[scheme]:>15,.0f} " + (f"{naive / sent[scheme]:>5.1f}×" if sent[scheme] else "  n/a"))
    exact = min(errors, key=lambda s: errors[s]["whole"])
    cheap = min(errors, key=lambda s: sent[s])
    front = [s for s in errors if not any(errors[o]["whole"] <= errors[s]["whole"] and sent[o] <= sent[s]
                                          and o != s for o in errors)]
    print(f"most exact: {exact} ({errors[exact]['whole']:.3f}, {sent[exact]:,.0f} B/step); fewest "
          f"bytes: {cheap} ({sent[cheap]:,.0f} B/step, error {errors[cheap]['whole']:.3f}); no other "
          f"compressor has both less error and fewer bytes than: {', '.join(front)}")
    over = [s for s in errors if max(errors[s]["per_tensor"]) > 1]
    if over:
        print(f"error above ‖g‖ on some tensor: {', '.join(over)} — an unbiased compressor (QSGD, §4) is "
              "right on average, but without bucketing its one-step noise can exceed the gradient; "
              "averaging over ranks and steps shrinks it")
    grid = [list(errors[s]["per_tensor"]) for s in errors]
    fig, ax = plt.subplots(figsize=(11, 3.4))
    image = ax.imshow(grid, aspect="auto", cmap="magma_r", vmin=0.0, vmax=max(1.0, max(map(max, grid))))
    ax.set_yticks(range(len(errors)), [f"{s} ({sent[s]:,.0f} B/step)" for s in errors], fontsize=8)
    ax.set_xticks(range(len(names)), [_short(n) for n in names], rotation=90, fontsize=6)
    ax.set_xlabel(f"tensor of the tiny {model.upper()} (parameter order)")
    fig.colorbar(image, ax=ax, label="relative error ‖C(g) − g‖/‖g‖ (1 = ‖g‖)")
    ax.set_title(f"most exact at default settings: {exact} ({errors[exact]['whole']:.2f} of ‖g‖ lost, "
                 f"{sent[exact]:,.0f} B/step); fewest bytes: {cheap} ({errors[cheap]['whole']:.2f} lost)",
                 fontsize=9)
    fig.tight_layout()
    return fig


def _median_ms(result) -> float:
    return 1e3 * sorted(result.step_times)[len(result.step_times) // 2]


def summary(runs: dict, model: str = "gpt", scale_rows: list | None = None,
            feedback: dict | None = None) -> list[str]:
    """The chapter's "When to use it (from this run):" lines, from `explore.run_all`'s runs and
    the error map: where fewer bytes paid, why the step got shorter (bytes or rounds), which
    compressor is most exact, and what each family cost in final loss; with `scale_rows`
    (`at_scale_run.sync_at_scale`) and `feedback` (`feedback.ablation`) their verdicts first."""
    ref, naive = runs["single"].losses[-1], runs["ddp-naive"]
    steps = naive.config.steps
    _, errors = relative_errors(model)
    per_step = {s: r.bytes_per_rank()[0] / steps for s, r in runs.items() if s != "single"}
    rounds = {s: r.bytes_per_rank("rounds")[0] / steps for s, r in runs.items() if s != "single"}

    def fewer(s: str, digits: int = 1) -> str:  # "k× fewer bytes", guarded: nothing sent, no ratio
        return times_fewer(per_step["ddp-naive"], per_step[s], digits) + " bytes"
    loss = {s: r.losses[-1] / ref for s, r in runs.items()}  # final loss ÷ single's
    topk, link = runs["topk"], naive.config.link
    speed = _median_ms(naive) / _median_ms(topk)
    alpha_ms = 0.0 if link is None else 1e3 * rounds["ddp-naive"] * link.latency_s  # rounds × α
    beta_ms = 0.0 if link is None else 1e3 * per_step["ddp-naive"] / link.bandwidth_Bps  # bytes / β
    lines = [f"compress when the link bounds the step ({getattr(link, 'name', 'loopback')}): top-k's step "
             f"took {_median_ms(topk):.4g} ms against ddp-naive's {_median_ms(naive):.4g} ms ("
             + (f"{speed:.1f}× shorter" if speed >= 1 else
                f"{1 / speed:.1f}× LONGER: its encoding and decoding operators cost more than the "
                "link time it saved")
             + f"), with {fewer('topk', 0)} and {times_fewer(rounds['ddp-naive'], rounds['topk'], 0)} "
             "rounds; "
             f"ddp-naive's link time per step is {alpha_ms:.4g} ms of latency ({rounds['ddp-naive']:.0f} "
             f"rounds × α: one all-reduce per tensor) and {beta_ms:.4g} ms of bytes (bytes/β) — "
             + ("its rounds, not its bytes, set it: bucket the all-reduce (chapter 01) before compressing"
                if alpha_ms > beta_ms else "its bytes set it: compression is the lever")]
    best = min(("topk", "randomk", "qsgd", "signsgd", "powersgd"), key=lambda s: _median_ms(runs[s]))
    ratio = _median_ms(naive) / _median_ms(runs[best])
    lines[0] += (f"; the gradient compressor with the shortest step here: {best}, "
                 f"{_median_ms(runs[best]):.4g} ms ("
                 + (f"{ratio:.2f}× shorter than ddp-naive's: it pays on this link" if ratio > 1 else
                    f"{1 / ratio:.2f}× LONGER than ddp-naive's: none pays on this link")
                 + f", {fewer(best)}, final loss {loss[best]:.3f}× single)")
    exact = min(errors, key=lambda s: errors[s]["whole"])
    lines.append(f"{exact} when accuracy per step matters: the most exact here (relative error "
                 f"{errors[exact]['whole']:.2f}, {fewer(exact)}, final loss "
                 f"{loss[exact]:.3f}× single)"
                 + ("; its factors all-reduce, so its bytes do not grow with N"
                    if not isinstance(cost.cost_of(exact), cost.Gathered) else ""))
    cheap = min(("topk", "randomk", "signsgd", "qsgd"), key=lambda s: per_step[s])
    lines.append(f"top-k, random-k, sign with error feedback when bytes matter most on few ranks (their "
                 f"all-gather grows with N): {cheap} sent {fewer(cheap, 0)} at final loss "
                 f"{loss[cheap]:.3f}× single after {steps} steps")
    if scale_rows:
        base = scale_rows[0]
        lines.insert(0, f"at real scale, against {base['scheme']} on a bandwidth-bound link (gpt2-xl's "
                     "width, 8 paced A100s, InfiniBand between nodes): " + "; ".join(
                         f"{r['scheme']} sent {base['bytes'] / r['bytes']:.0f}× fewer bytes, step "
                         f"{base['step_s'] / r['step_s']:.2f}× "
                         + ("shorter — holds" if r["step_s"] < base["step_s"] else "LONGER — does NOT hold")
                         for r in scale_rows[1:]))
    if feedback:
        lines.append("error feedback whenever compression is aggressive: at top-k 0.001 the final loss "
                     f"without − with it is {feedback['gap']:+.4f} (mean over seeds, paired spread "
                     f"{feedback['spread']:.4f}); feedback lowers the loss: {feedback['verdict']}")
    periodic = min(("local-sgd", "diloco"), key=lambda s: loss[s])
    lines.append(f"Local SGD / DiLoCo when every message is too many: {periodic} averaged every "
                 f"{runs[periodic].config.options['sync_every']} steps, {fewer(periodic)}, "
                 f"final loss {loss[periodic]:.3f}× single")
    return when_to_use(lines)
