"""The cost model's calibration: three numbers a few measured plans fix, the rest predicted.

A sweep's measured steps fix how much the machine stretches compute and communication and what
the loop adds per step (`Calibration`), by least absolute relative error (`fit_calibration`), and
`parlab.planner.costmodel.predict` applies them to every other plan. This fits three constants
of a blocking model to measured plans; it is not MAD-Max's validation (Hsia et al., ISCA 2024, §5),
which compares a replayed trace — no constant fitted — with measured runs (here
`parlab.planner.trace_replay`, and `parlab.planner.whatif.check` under a what-if).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Calibration:
    """step = compute_scale · compute + comm_scale · communication + overhead_s.

    The raw model (scales 1, overhead 0) is the α-β fit and the profile as measured alone. On the
    wall clock every rank shares its core with other jobs and the loop adds bookkeeping; in
    virtual time what is left is how the composed layers' operators differ from the profiled
    block's and how the schedule overlaps. Either way a few plans measured in the same sweep fix
    these three numbers (least relative error,
    non-negative) and the model then predicts every other plan (a fit to measured plans, not
    MAD-Max's validation of a replayed trace: module docstring)."""

    compute_scale: float = 1.0
    comm_scale: float = 1.0
    overhead_s: float = 0.0


def fit_calibration(predictions: list, measured_s: list[float]) -> Calibration:
    """Non-negative least absolute relative error over (raw prediction, measured step); the
    overhead is fitted only from 6 plans on (three free numbers on fewer plans would follow the
    noise of one run)."""
    import numpy as np
    from scipy.optimize import nnls
    if len(predictions) != len(measured_s) or not predictions:
        raise ValueError(f"need as many measured steps ({len(measured_s)}) as predictions "
                         f"({len(predictions)}), at least one")
    columns = 3 if len(predictions) >= 6 else 2  # a per-step overhead only with enough plans
    a = np.array([[p.raw_compute_s, p.raw_comm_s, 1.0][:columns] for p in predictions])
    t = np.asarray(measured_s, dtype=float)
    a = a / t[:, None]  # each row relative to its measured step
    weights = np.ones_like(t)
    for _ in range(30):  # least absolute relative error (IRLS, as parlab.core.cost's α-β fit):
        sw = np.sqrt(weights)  # one plan stalled by the machine's load moves the fit less
        solution, _ = nnls(a * sw[:, None], sw)
        weights = 1.0 / np.maximum(np.abs(a @ solution - 1.0), 1e-3)
    return Calibration(*map(float, solution))
