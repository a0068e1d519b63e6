"""Notebook 09's predict-then-run cell: the staleness of a persistent straggler's gradients under
ASP (Dean et al., "Large Scale Distributed Deep Networks", NeurIPS 2012: Downpour SGD applies every
gradient on arrival). While the straggler computes one gradient (r units of the seeded virtual
clock), each of the W − 1 fast workers pushes r of them, so each straggler gradient arrives
r·(W − 1) versions behind — measured here on a real `ps-async` run with `delays="seeded"`.
"""

from __future__ import annotations

import parlab


def straggler_closed_form(workers: int, straggler: int) -> int:
    """Versions applied while the straggler computes: r gradients from each of the W − 1 others."""
    return straggler * (workers - 1)


def straggler_staleness(prediction=None, world_size: int = 6, straggler: int = 4, steps: int = 36) -> dict:
    """Run `ps-async` (seeded arrival order, the last worker `straggler`× slower, no jitter) and
    print the staleness of each of the straggler's gradients beside the reader's `prediction` and
    the closed form."""
    result = parlab.run("ps-async", world_size=world_size, steps=steps, delays="seeded",
                        straggler=float(straggler), clock="A100")
    last = world_size - 1  # the straggler is the last worker rank
    log = [g for g in result.outputs[0].extras["log"] if g["worker"] == last]
    measured = [g["staleness"] for g in log]
    steady = max(set(measured), key=measured.count)
    closed = straggler_closed_form(world_size - 1, straggler)
    print(f"ps-async, {world_size - 1} workers, the last {straggler}× slower, seeded order, {steps} updates")
    print(f"the straggler's gradients: staleness {measured} (versions behind, in arrival order)")
    print(f"measured (most common): {steady}; your prediction: {prediction}; closed form r·(W − 1) = "
          f"{straggler}·{world_size - 2} = {closed}; agree: {steady == closed}")
    return {"measured": steady, "closed_form": closed, "all": measured}
