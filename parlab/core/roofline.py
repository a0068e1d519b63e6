"""Per-operator prices three ways: FLOPs alone, the paced clock's roofline, and PyTorch's own estimator.

The roofline model (Williams, Waterman & Patterson, "Roofline: An Insightful Visual Performance
Model for Multicore Architectures", CACM 2009) prices an operator at the larger of its FLOPs ÷
compute rate and its bytes ÷ memory bandwidth; at a real model's size layer norms, softmax and
element-wise updates are memory-bound, which FLOPs alone do not see. `compare(fn)` runs `fn` on
fake tensors (`parlab.core.shapes`) and prices each aten operator as **FLOPs** (launch + FLOPs/F),
**roofline** (the paced clock's `Clock.price`) and **torch** (`RuntimeEstimator`'s roofline
mode: no launch, (FLOPs / 2) ÷ (0.75 · peak)). Bytes are PyTorch's `get_num_bytes`, FLOPs
`torch.utils.flop_counter`'s. The three in detail: docs/core.md, `parlab.core.roofline`.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from unittest import mock

import torch
import torch.utils._pytree as pytree
from torch.utils.flop_counter import flop_registry

from parlab.core.clock import Clock, Work
from parlab.core.link import ACCELERATORS
from parlab.core.pacer import operator_work


def _tensors(tree) -> list:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


@contextmanager
def _torch_estimator_on(acc):
    """PyTorch's estimator functions, told the accelerator's datasheet figures (they would ask a
    CUDA device this machine does not have)."""
    import torch.utils._runtime_estimation as rte

    with mock.patch.object(rte, "get_device_tflops", lambda dtype: acc.peak_flops / 1e12), \
            mock.patch.object(rte, "get_gpu_dram_gbps", lambda: acc.hbm_Bps / 1e9):
        yield rte


def _price_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Prices(TorchDispatchMode):
        """Prices every aten operator run under it three ways, summed per operator name."""

        def __init__(self, acc, rte):
            super().__init__()
            self.acc, self.rte, self.clock = acc, rte, Clock(acc)
            self.rows = defaultdict(lambda: {"ops": 0, "flops": 0.0, "bytes": 0.0, "flops_s": 0.0,
                                             "roofline_s": 0.0, "torch_s": 0.0})

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func.namespace != "aten":
                return out
            packet = func._overloadpacket
            flops, kernel_bytes = operator_work(func, args, kwargs, out)
            inputs, outputs = _tensors((args, kwargs)), _tensors(out)
            acc, rte = self.acc, self.rte
            row = self.rows[str(packet)]
            row["ops"] += 1
            row["flops"] += flops
            row["bytes"] += sum(rte.get_num_bytes(t) for t in inputs + outputs)
            row["flops_s"] += acc.launch_s + flops / acc.flops
            if kernel_bytes is not None:  # what the paced clock charges this operator
                row["roofline_s"] += self.clock.price(Work(1, flops, ((flops, kernel_bytes),)))
            if packet not in rte._IGNORE_OPS:  # RuntimeEstimator._roofline_estimate, in ns
                dtypes = {t.dtype for t in outputs if t.dtype in rte._FLOAT_TYPES}
                compute = (rte.get_compute_time(packet, args, kwargs, out, dtypes)
                           if flop_registry.get(packet) is not None and len(dtypes) == 1 else 0.0)
                row["torch_s"] += max(rte.get_transfer_time(inputs, outputs), compute) / 1e9
            return out

    return Prices


def compare(fn, accelerator: str = "A100", setup=None) -> dict:
    """Run `fn()` on fake tensors — `fn(setup())` with a `setup`, itself run unpriced (building
    the model) — every operator of `fn` priced three ways: {"rows": {operator: ops, flops, bytes,
    clock_s, roofline_s, torch_s}, "total": the sums, "accelerator": name}."""
    from parlab.core.shapes import shapes

    if accelerator not in ACCELERATORS or ACCELERATORS[accelerator].hbm_Bps is None:
        raise ValueError(f"accelerator={accelerator!r} must be one of "
                         f"{sorted(k for k, a in ACCELERATORS.items() if a.hbm_Bps)}")
    acc = ACCELERATORS[accelerator]
    with _torch_estimator_on(acc) as rte, shapes():
        state = setup() if setup is not None else None
        prices = _price_class()(acc, rte)
        with prices:
            fn(state) if setup is not None else fn()
    rows = {name: dict(row) for name, row in prices.rows.items()}
    total = {k: sum(r[k] for r in rows.values()) for k in
             ("ops", "flops", "bytes", "flops_s", "roofline_s", "torch_s")}
    return {"rows": rows, "total": total, "accelerator": accelerator}


def format_comparison(result: dict, top: int = 8) -> str:
    """The operators that cost most under the roofline, and the totals, with the ratios."""
    total = result["total"]
    lines = [f"{'operator':<34}{'ops':>6}{'GFLOP':>10}{'GB moved':>10}{'FLOPs ms':>10}"
             f"{'roofline ms':>12}{'torch ms':>10}"]
    ranked = sorted(result["rows"].items(), key=lambda kv: -kv[1]["roofline_s"])[:top]
    for name, r in ranked + [("total", total)]:
        lines.append(f"{name:<34}{r['ops']:>6}{r['flops'] / 1e9:>10.1f}{r['bytes'] / 1e9:>10.2f}"
                     f"{r['flops_s'] * 1e3:>10.3f}{r['roofline_s'] * 1e3:>12.3f}"
                     f"{r['torch_s'] * 1e3:>10.3f}")
    lines.append(f"on the {result['accelerator']}: the roofline (the paced clock) charges "
                 f"{total['roofline_s'] / total['flops_s']:.2f}× what FLOPs alone charge; PyTorch's "
                 f"estimator {total['torch_s'] / total['roofline_s']:.2f}× the roofline")
    return "\n".join(lines)
