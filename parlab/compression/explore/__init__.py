"""What notebooks/08_compression.ipynb runs: compressors on a real gradient, closed forms, the
lossless checks, ledger vs closed form, loss vs bytes, widget (exercises: `exercises`); error
feedback on/off is `feedback`, the paced run at gpt2-xl's shapes `at_scale_run`.

The compressors follow Lin et al. (DGC, 2018), Alistarh et al. (QSGD, 2017), Bernstein et al.
(signSGD, 2018) with Karimireddy et al.'s error feedback (2019), Vogels et al. (PowerSGD, 2019);
communicating less often follows Stich (Local SGD, 2019) and Douillard et al. (DiLoCo, 2023).
Everything drives `parlab.run`; the closed forms are `parlab.compression.cost`.
"""

from __future__ import annotations

import math

import torch

import parlab
from parlab import models
from parlab.compression import cost
from parlab.compression.compressors import QSGD, Sign, TopK
from parlab.compression.powersgd import orthonormalize
from parlab.compression.sync import ErrorFeedback
from parlab.engine.registry import get_scheme

SCHEMES = ["topk", "randomk", "qsgd", "signsgd", "powersgd", "local-sgd", "diloco"]
LOSSLESS = [("topk", {"ratio": 1.0}, "adamw"), ("powersgd", {"rank": 1024}, "adamw"),
            ("local-sgd", {"sync_every": 1}, "sgd")]


def times_fewer(reference: float, sent: float, digits: int = 1) -> str:
    """"k× fewer" bytes than `reference`; a run that sent nothing has no ratio, and says so (a
    periodic scheme whose period is longer than the run, one rank)."""
    if sent <= 0:
        return "no ratio: it sent nothing" if reference > 0 else "no ratio: neither sent anything"
    return f"{reference / sent:.{digits}f}× fewer"


def param_shapes(model: str = "gpt") -> list[tuple]:
    net = models.build_model(model, models.model_config(model), 0)
    return [tuple(p.shape) for p in net.parameters()]


def options_of(scheme: str) -> dict:
    return dict(parlab.schemes()[scheme].options) if scheme in parlab.schemes() else {}


# ----------------------------------------------------------------------------- 1. intuition
def real_gradient(model: str = "gpt") -> tuple[str, torch.Tensor]:
    """The largest weight matrix's gradient after one backward on step 0's batch."""
    from parlab.models.data import global_batch

    net = models.build_model(model, models.model_config(model), 0)
    x, y = global_batch(model, 0, 12, 0, getattr(models.model_config(model), "block_size", 0))
    net.loss(x, y).backward()
    name, p = max(((n, p) for n, p in net.named_parameters() if p.ndim == 2), key=lambda t: t[1].numel())
    return name, p.grad.detach().clone()


def low_rank(matrix: torch.Tensor, rank: int) -> torch.Tensor:
    """One PowerSGD step on one rank (no warm start): P = M·Q, orthonormalize, Q = Mᵀ·P, P·Qᵀ."""
    q = torch.randn(matrix.shape[1], rank, generator=torch.Generator().manual_seed(0))  # (m, r)
    p = orthonormalize(matrix @ q)  # (n, r)
    return p @ (matrix.T @ p).T  # (n, m)


def draw_compressors(model: str = "gpt"):
    """Each compressor applied to a real gradient matrix: a heat map, bytes and relative error."""
    import matplotlib.pyplot as plt

    name, grad = real_gradient(model)
    n = grad.numel()
    shown = {"original (fp32)": (grad, 4 * n)}
    for label, encoder in (("top-k 10%", TopK(0.1)), ("QSGD 4 bits", QSGD(4)), ("sign + scale", Sign())):
        shown[label] = (encoder.decode(encoder.encode(grad), n).view_as(grad), encoder.payload_bytes(n))
    rows, cols = grad.shape
    shown["PowerSGD rank 4"] = (low_rank(grad, 4), 4 * (rows + cols) * 4)
    print(f"{name}: {rows}×{cols} gradient")
    print(f"{'compressor':<18} {'bytes':>8} {'ratio':>6} {'‖C(g)-g‖/‖g‖':>13}")
    errors = {}
    for label, (approx, nbytes) in shown.items():
        errors[label] = ((approx - grad).norm() / grad.norm()).item()
        print(f"{label:<18} {nbytes:>8,} {4 * n / nbytes:>6.1f} {errors[label]:>13.2f}")
    lossy = [label for label in shown if label != "original (fp32)"]
    best = min(lossy, key=errors.get)
    cheap = min(lossy, key=lambda label: shown[label][1])
    fig, axes = plt.subplots(1, len(shown), figsize=(3 * len(shown), 3))
    limit = grad.abs().max().item()
    for ax, (label, (approx, _)) in zip(axes, shown.items()):
        ax.imshow(approx[:48, :48], cmap="RdBu", vmin=-limit, vmax=limit)
        ax.set_title(f"{label}\n{shown[label][1]:,} B, error {errors[label]:.2f}", fontsize=9)
        ax.axis("off")
    fig.suptitle(f"{name} (top-left 48×48): least relative error {best} ({errors[best]:.2f}), fewest "
                 f"bytes {cheap} ({shown[cheap][1]:,} B)", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- 2. math
def bytes_table(world_size: int, model: str = "gpt", steps: int = 4) -> None:
    """Bytes rank 0 sends per step (closed forms) and the ratio to ddp-naive, default options."""
    shapes = param_shapes(model)
    psi = sum(math.prod(s) for s in shapes)
    print(f"Ψ = {psi:,} parameters in {len(shapes)} tensors, N = {world_size}, {steps} steps")
    print(f"{'scheme':<10} {'bytes/step':>11} {'vs ddp-naive':>13}  options")
    for scheme in ["ddp-naive"] + SCHEMES:
        options = options_of(scheme) if scheme != "ddp-naive" else {}
        per_step = cost.total_bytes(scheme, shapes, world_size, steps, **options) / steps
        ratio = cost.compression_ratio(scheme, shapes, world_size, steps, **options)
        print(f"{scheme:<10} {per_step:>11,.0f} {ratio:>12.1f}×  {options}")


# ----------------------------------------------------------------------------- 4. correctness
def check_lossless(world_size: int, steps: int = 3) -> None:
    """The lossless settings against `single` (1e-4): losses and final parameters."""
    for scheme, options, optimizer in LOSSLESS:
        ref = parlab.run("single", steps=steps, optimizer=optimizer)
        result = parlab.run(scheme, world_size=world_size, steps=steps, optimizer=optimizer, **options)
        print(f"{scheme:<10} {str(options):<20} {optimizer:<6} match: {result.compare(ref).match}")


def check_properties(trials: int = 1000) -> None:
    """QSGD's mean over seeds → v (within 4σ of its variance bound); error feedback's bookkeeping."""
    v = torch.randn(64, generator=torch.Generator().manual_seed(0))
    for bits in (2, 4):
        encoder = QSGD(bits)
        mean = sum(encoder.decode(encoder.encode(v, seed=t), 64) for t in range(trials)) / trials
        s = encoder.levels
        bound = 4 * math.sqrt(min(64 / s ** 2, 8 / s) * v.norm().item() ** 2 / trials)
        print(f"QSGD bits={bits}: ‖mean of {trials} encodings - v‖ ≤ 4σ bound: "
              f"{(mean - v).norm().item() <= bound}")
    for label, encoder in (("top-k 25%", TopK(0.25)), ("sign", Sign())):
        feedback, sent_total, grad_total, exact = ErrorFeedback([v], True), 0, 0, True
        copies, worst, rounding = True, 0.0, 0.0  # sent values copies of g + e; |difference|; ulps
        for step in range(5):
            grad = torch.randn(64, generator=torch.Generator().manual_seed(step + 1))
            previous = feedback.residuals[0].clone()
            corrected = feedback.corrected(0, grad)
            sent = encoder.decode(encoder.encode(corrected), 64)
            feedback.keep(0, corrected, sent)
            exact &= torch.equal(sent + feedback.residuals[0], grad + previous)
            copies &= bool(((sent == 0) | (sent == corrected)).all())
            worst = max(worst, (sent + feedback.residuals[0] - (grad + previous)).abs().max().item())
            rounding = max(rounding, torch.finfo(torch.float32).eps
                           * (feedback.residuals[0].abs().max() + corrected.abs().max()).item())
            sent_total, grad_total = sent_total + sent, grad_total + grad
        carried = torch.allclose(sent_total + feedback.residuals[0], grad_total, atol=1e-5)
        why = ("the sent values are copies of g + e, so the residual holds the rest exactly"
               if copies else f"the sent values are not copies of g + e, so the residual "
               f"(g + e) − sent is rounded: largest difference {worst:.1e}, within float32 "
               f"rounding ({rounding:.1e}): {worst <= rounding}")
        print(f"error feedback, {label}: sent + residual == g + previous residual bit for bit: "
              f"{exact} ({'as expected' if exact == copies else 'NOT as expected'}: {why}); "
              f"Σ sent + residual == Σ g (1e-5): {carried}")


# ----------------------------------------------------------------------------- 5. measurement
def run_all(world_size: int, steps: int, link: str | None = None, clock: str = "A100") -> dict:
    """`single`, `ddp-naive`, every scheme at default options and PyTorch's `torch-powersgd`, on
    the same link and `clock` (paced A100 time on the real link by default, `parlab.core.clock`;
    "wall": this CPU, raw, on the teaching preset). PyTorch's own collectives are not delayed by
    the link nor paced: nominal records, its step time is not comparable."""
    link = None if link == "loopback" else link
    runs = {"single": parlab.run("single", steps=steps, clock=clock)}
    for scheme in ["ddp-naive"] + SCHEMES + ["torch-powersgd"]:
        runs[scheme] = parlab.run(scheme, world_size=world_size, steps=steps, link=link,
                                  clock=clock)
    return runs


def ledger_table(runs: dict) -> None:
    """Rank 0's ledger bytes over the run against the closed form, per scheme."""
    print(f"{'scheme':<14} {'ledger bytes':>13} {'closed form':>12}  equal")
    nominal = []
    for scheme, result in runs.items():
        if scheme == "single":
            continue
        n, steps = result.config.world_size, result.config.steps
        shapes = [tuple(t.shape) for t in result.state.values()]
        outside = "bucket_bytes" in get_scheme(scheme).forms  # PyTorch's hook: nominal records
        formula = torch_powersgd_total(result) if outside else \
            cost.total_bytes(scheme, shapes, n, steps, **result.config.options)
        measured = result.bytes_per_rank()[0]
        nominal += [scheme] if outside else []
        print(f"{scheme:<14} {measured:>13,} {formula:>12,}  "
              + ("n/a (nominal)" if outside else str(measured == formula)))
    if nominal:
        print(f"{', '.join(nominal)}: not a check — its collectives bypass our Comm, so its ledger "
              "rows are written from the same closed form (nominal records) and equal it by "
              "construction")


def torch_powersgd_total(result, rank: int = 0) -> int:
    """`cost.torch_powersgd_bytes` (its registered bucket_bytes) summed over the run, on the
    buckets DDP made (rank's extras)."""
    o, n = result.config.options, result.config.world_size
    bucket_bytes = get_scheme(result.config.scheme).forms["bucket_bytes"]
    return sum(bucket_bytes([shapes for _, shapes in buckets], n, rank, step >= o["start_iter"],
                            o["rank"], o["min_compression_rate"])
               for step, buckets in enumerate(result.outputs[rank].extras["buckets"]))


def torch_side_by_side(world_size: int, steps: int, runs: dict | None = None) -> None:
    """PyTorch's PowerSGD hook beside ours: exact before `start_iter`, then bytes and loss."""
    ref = runs["single"] if runs else parlab.run("single", steps=steps)
    plain = parlab.run("torch-powersgd", world_size=world_size, steps=steps,
                       start_iter=steps + 1)
    print(f"torch-powersgd with start_iter > steps (a plain all-reduce): {plain.compare(ref)}")
    ours = runs["powersgd"] if runs else parlab.run("powersgd", world_size=world_size, steps=steps)
    theirs = runs["torch-powersgd"] if runs else parlab.run("torch-powersgd",
                                                            world_size=world_size, steps=steps)
    o = theirs.config.options
    print(f"{'r = ' + str(o['rank']):<8}{'step':>4} {'ours B':>9} {'torch B':>9} {'ours loss':>10} "
          f"{'torch loss':>10}")
    for step in range(steps):
        print(f"{'':<8}{step:>4} {ours.bytes_per_rank(step=step)[0]:>9,} "
              f"{theirs.bytes_per_rank(step=step)[0]:>9,} {ours.losses[step]:>10.4f} "
              f"{theirs.losses[step]:>10.4f}")
    print(f"torch compresses from step start_iter={o['start_iter']} (plain all-reduce before), "
          f"only matrices with (n + m)·r·{o['min_compression_rate']:g} < n·m; ours from step 0, "
          "every matrix")


def loss_vs_bytes(runs: dict):
    """Final loss against bytes sent (rank 0) and against time (the runs' clock: paced, or this
    CPU raw): each scheme one point/curve."""
    import matplotlib.pyplot as plt

    ref = runs["single"].losses[-1]
    base = runs["ddp-naive"].bytes_per_rank()[0]
    print(f"step times: {runs['ddp-naive'].clock.unit} (torch-powersgd's own collectives are not "
          "priced on the link)")
    print(f"{'scheme':<14} {'bytes sent':>11} {'÷ ddp':>7} {'final loss':>11} {'/ single':>9} {'step ms':>8}"
          "  fewer bytes → shorter step than ddp-naive?")
    naive_ms = 1e3 * sorted(runs["ddp-naive"].step_times)[len(runs["ddp-naive"].step_times) // 2]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for scheme, result in runs.items():
        if scheme == "single":
            continue
        sent = result.bytes_per_rank()[0]
        step_ms = 1e3 * sorted(result.step_times)[len(result.step_times) // 2]
        verdict = ("" if scheme == "ddp-naive" else
                   "not comparable: PyTorch's collectives are not priced on the link"
                   if scheme.startswith("torch-") else "yes" if step_ms < naive_ms else
                   "NO: " + _why_longer(result, runs["ddp-naive"]))
        ratio = f"{base / sent:>6.1f}×" if sent else f"{'n/a':>7}"
        print(f"{scheme:<14} {sent:>11,} {ratio} {result.losses[-1]:>11.4f} "
              f"{result.losses[-1] / ref:>9.3f} {step_ms:>8.4g}  {verdict}")
        left.scatter(max(sent, 1), result.losses[-1], label=scheme)
        right.plot(list(_cumulative(result.step_times)), result.losses, marker=".", label=scheme)
    left.axhline(ref, color="k", ls=":", label="single")
    lossy = {s: r for s, r in runs.items() if s not in ("single", "ddp-naive") and not s.startswith("torch-")}
    cheap = min(lossy, key=lambda s: lossy[s].bytes_per_rank()[0])
    fast = min(lossy, key=lambda s: sum(lossy[s].step_times))
    left.set_title(f"fewest bytes: {cheap} ({times_fewer(base, lossy[cheap].bytes_per_rank()[0], 0)}), "
                   f"final loss {lossy[cheap].losses[-1] / ref:.3f}× single", fontsize=9)
    right.set_title(f"shortest run: {fast} ({sum(lossy[fast].step_times) * 1e3:.3g} ms vs "
                    f"ddp-naive's {sum(runs['ddp-naive'].step_times) * 1e3:.3g} ms)", fontsize=9)
    left.set(xscale="log", xlabel="bytes sent by rank 0 (log)", ylabel="final loss")
    right.set(xlabel=f"time (s, {runs['ddp-naive'].clock.label})", ylabel="loss")
    left.legend(fontsize="x-small")
    fig.tight_layout()
    return fig


def _link_ms(result) -> float:
    """Rank 0's α-β time on the run's link per step, from its ledger: rounds × α + bytes / β
    (0 on the loopback)."""
    link, steps = result.config.link, result.config.steps
    if link is None:
        return 0.0
    rounds, sent = result.bytes_per_rank("rounds")[0], result.bytes_per_rank()[0]
    return 1e3 * (rounds * link.latency_s + sent / link.bandwidth_Bps) / steps


def _why_longer(result, naive) -> str:
    """Why a scheme that sends fewer bytes took a longer step than ddp-naive: its messages (more
    link time) or its own compute (encoding, decoding, the optimizer's extra operators: on an
    accelerator every operator costs a launch, so many small ones outweigh a short link time)."""
    mine, theirs = _link_ms(result), _link_ms(naive)
    if mine >= theirs:
        return (f"its messages' latency or extra rounds outweigh the bytes saved ({mine:.3g} vs "
                f"{theirs:.3g} ms of link time per step)")
    return (f"its link time is shorter ({mine:.3g} vs {theirs:.3g} ms per step), its own encoding "
            "and decoding operators cost more than that saved")


def _cumulative(values):
    total = 0.0
    for v in values:
        total += v
        yield total


KNOBS = {"ratio": (0.1, 0.01), "bits": (8, 2), "rank": (8, 1), "sync_every": (2, 4)}  # (low, high)


def _knob(scheme: str) -> str | None:
    return next((k for k in KNOBS if k in parlab.schemes()[scheme].options), None)  # its registered knob


def panel_follow(values: dict) -> dict:
    """`widgets.experiment_panel`'s `follow`: a scheme without a compression knob (signsgd) offers
    no level to choose."""
    if _knob(values["scheme"]) is None:
        return {"knob": (["n/a"], "n/a")}
    return {"knob": (["low", "high"], values["knob"] if values["knob"] != "n/a" else "low")}


def panel(scheme: str, knob: str, world_size: int, link: str, steps: int = 3, clock: str = "A100") -> None:
    """Widget callback: one scheme at a compression level ("low" / "high") beside ddp-naive on the
    same real link and paced clock, and single's loss."""
    level = _knob(scheme)
    options = {level: KNOBS[level][knob == "high"]} if level else {}
    result = parlab.run(scheme, world_size=world_size, steps=steps, link=link, clock=clock, **options)
    base = parlab.run("ddp-naive", world_size=world_size, steps=steps, link=link, clock=clock)
    ref = parlab.run("single", steps=steps)
    shapes = [tuple(t.shape) for t in result.state.values()]
    print(f"{scheme} {options} on {world_size} rank(s), real {link}, paced {result.clock.unit}")
    naive = steps * cost.ddp_bytes([math.prod(s) for s in shapes], world_size)
    sent = cost.total_bytes(scheme, shapes, world_size, steps, **result.config.options)
    print(f"bytes sent by rank 0: {result.bytes_per_rank()[0]:,} (closed form {sent:,}); "
          f"{times_fewer(naive, sent)} than ddp-naive's {naive:,}"
          + (f" (it averages every {options['sync_every']} steps, the run has {steps})"
             if sent == 0 and "sync_every" in options else ""))
    mine, theirs = (1e3 * sorted(r.step_times)[len(r.step_times) // 2] for r in (result, base))
    print(f"final loss {result.losses[-1]:.4f} vs single {ref.losses[-1]:.4f}; median step "
          f"{mine:.4g} vs ddp-naive's {theirs:.4g} {result.clock.unit}: "
          + ("shorter" if mine < theirs else "NOT shorter") + " on this link")
