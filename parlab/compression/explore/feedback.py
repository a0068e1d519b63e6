"""Notebook 08: error feedback where it matters — aggressive compression under plain SGD.

Error feedback keeps what a step did not send and adds it to the next gradient (Seide et al.,
"1-Bit Stochastic Gradient Descent", Interspeech 2014; Karimireddy et al., "Error Feedback Fixes
SignSGD and other Gradient Compression Schemes", ICML 2019). Its regime is aggressive
compression: top-k at a ratio of 0.001 sends one element in a thousand, and without feedback the
other 999 are lost every step, so SGD moves a few coordinates only and training stalls; with
feedback the dropped mass accumulates until it is sent. Karimireddy et al.'s analysis is for SGD
(Adam rescales each coordinate, which hides a biased compressor's loss), so the runs use
`optimizer="sgd"`.

The measurement: the same scheme with `error_feedback` True and False at each seed (a seed fixes
the initialisation and the data order, so the two runs of one seed differ only by feedback), and
`single` at each seed as the uncompressed reference. The verdict is paired: error feedback lowers
the final loss where it does so at every seed and the mean of the per-seed gaps exceeds their
spread (max − min over seeds); the other way round is "the opposite holds"; anything else is
"no verdict".
"""

from __future__ import annotations

import parlab

SEEDS = (0, 1, 2)
LR = 0.1  # plain SGD's step (the package's default for optimizer="sgd")


def curves(scheme: str, world_size: int, steps: int, seeds=SEEDS, optimizer: str = "sgd",
           **options) -> list[list[float]]:
    """The loss curve of `scheme` with `options` at each seed."""
    return [parlab.run(scheme, world_size=world_size, steps=steps, seed=s, optimizer=optimizer,
                       lr=LR, **options).losses for s in seeds]


def paired_verdict(with_feedback: list[float], without: list[float]) -> tuple[str, float, float]:
    """(verdict, mean gap, spread of gaps): gap = loss without − loss with feedback, per seed."""
    gaps = [b - a for a, b in zip(with_feedback, without)]
    mean, spread = sum(gaps) / len(gaps), max(gaps) - min(gaps)
    if all(g > 0 for g in gaps) and mean > spread:
        return "holds", mean, spread
    if all(g < 0 for g in gaps) and -mean > spread:
        return "the opposite holds", mean, spread
    return "no verdict", mean, spread


def ablation(world_size: int, steps: int = 30, ratio: float = 0.001, seeds=SEEDS) -> dict:
    """Top-k at `ratio` with and without error feedback under SGD, `single` beside it, at every
    seed; prints the finals, their spreads and the paired verdict; returns the numbers."""
    single = curves("single", 1, steps, seeds)
    ref, first = [c[-1] for c in single], single[0][0]
    on = [c[-1] for c in curves("topk", world_size, steps, seeds, ratio=ratio, error_feedback=True)]
    off = [c[-1] for c in curves("topk", world_size, steps, seeds, ratio=ratio,
                                 error_feedback=False)]
    print(f"top-k at ratio {ratio:g} (one element in {1 / ratio:,.0f} sent), {world_size} ranks, "
          f"{steps} steps of SGD (lr {LR:g}), seeds {list(seeds)}; step 0's loss (seed {seeds[0]}) "
          f"{first:.4f}")
    print(f"{'run':<28} " + " ".join(f"seed {s:<3}" for s in seeds) + f" {'mean':>7} {'spread':>7}")
    for name, values in (("single (no compression)", ref), ("top-k, error feedback", on),
                         ("top-k, no error feedback", off)):
        print(f"{name:<28} " + " ".join(f"{v:>8.4f}" for v in values)
              + f" {sum(values) / len(values):>7.4f} {max(values) - min(values):>7.4f}")
    verdict, mean, spread = paired_verdict(on, off)
    gaps = [b - a for a, b in zip(on, off)]
    print("loss without − with error feedback, per seed: " + ", ".join(f"{g:+.4f}" for g in gaps)
          + f" (mean {mean:+.4f}, spread {spread:.4f}) — error feedback lowers the final loss: "
          + verdict)
    lost = [(o - r) for o, r in zip(off, ref)]
    kept = [(o - r) for o, r in zip(on, ref)]
    print(f"above single's final loss: without feedback {sum(lost) / len(lost):+.4f}, with "
          f"{sum(kept) / len(kept):+.4f} (means over seeds)")
    return {"single": ref, "feedback": on, "no_feedback": off, "verdict": verdict, "gap": mean,
            "spread": spread}
