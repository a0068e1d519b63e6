"""Per-operator prices three ways: this package's clock, a roofline, and PyTorch's own estimator.

The paced clock (`parlab.core.clock`) charges every operator its launch plus FLOPs ÷ the
accelerator's sustained rate. At the tiny GPT's size the launch decides everything; at a real
model's size the operators that compute little and move much (layer norms, softmax, GeLU, the
optimizer's element-wise updates) are limited by memory bandwidth instead, which FLOPs alone do
not see. The roofline model (Williams, Waterman & Patterson, "Roofline: An Insightful Visual
Performance Model for Multicore Architectures", CACM 2009) prices an operator at the larger of
its FLOPs ÷ compute rate and its bytes read and written ÷ memory bandwidth.

`compare(fn)` runs `fn` (a preset's forward and backward:
`parlab.planner.megatron_runs.preset_step`) on fake tensors (`parlab.core.shapes`) under a
dispatch mode that prices each aten operator:

- **clock**: what the paced clock charges today, launch + FLOPs / F (views included: the meter
  counts every aten operator);
- **roofline**: launch + max(FLOPs / F, bytes / HBM bandwidth), views free (a view launches no
  kernel), F the same sustained rate;
- **torch**: `torch.distributed._tools.runtime_estimator.RuntimeEstimator`'s roofline mode, its
  own code (`torch.utils._runtime_estimation.get_compute_time` / `get_transfer_time`) with the
  accelerator's datasheet peak and bandwidth in place of the CUDA device it would query: no
  launch, view and creation operators free, and compute as its code does it, (FLOPs / 2) ÷
  (0.75 · peak).

Bytes are PyTorch's count too (`get_num_bytes`: every input and output tensor once, a broadcast
dimension of stride 0 not counted). FLOPs are `torch.utils.flop_counter`'s, as the clock's.
The clock does not use the roofline yet; this is the measurement that says how much it would change.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from unittest import mock

import torch
import torch.utils._pytree as pytree

from parlab.core.link import ACCELERATORS

_ALLOCATIONS = {torch.ops.aten.empty, torch.ops.aten.empty_like, torch.ops.aten.empty_strided}


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
    from torch.utils.flop_counter import flop_registry

    class Prices(TorchDispatchMode):
        """Prices every aten operator run under it three ways, summed per operator name."""

        def __init__(self, acc, rte):
            super().__init__()
            self.acc, self.rte = acc, rte
            self.rows = defaultdict(lambda: {"ops": 0, "flops": 0.0, "bytes": 0.0, "clock_s": 0.0,
                                             "roofline_s": 0.0, "torch_s": 0.0})

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func.namespace != "aten":
                return out
            packet = func._overloadpacket
            count = flop_registry.get(packet)
            flops = count(*args, **kwargs, out_val=out) if count is not None else 0
            inputs, outputs = _tensors((args, kwargs)), _tensors(out)
            nbytes = sum(self.rte.get_num_bytes(t) for t in inputs + outputs)
            acc, rte = self.acc, self.rte
            # a view only makes metadata; an empty tensor is only an allocation: no kernel either
            view = func.is_view or packet in rte._VIEW_OPS or packet in _ALLOCATIONS
            row = self.rows[str(packet)]
            row["ops"] += 1
            row["flops"] += flops
            row["bytes"] += nbytes
            row["clock_s"] += acc.launch_s + flops / acc.flops
            if not view:
                row["roofline_s"] += acc.launch_s + max(flops / acc.flops, nbytes / acc.hbm_Bps)
            if packet not in rte._IGNORE_OPS:  # RuntimeEstimator._roofline_estimate, in ns
                dtypes = {t.dtype for t in outputs if t.dtype in rte._FLOAT_TYPES}
                compute = (rte.get_compute_time(packet, args, kwargs, out, dtypes)
                           if count is not None and len(dtypes) == 1 else 0.0)
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
             ("ops", "flops", "bytes", "clock_s", "roofline_s", "torch_s")}
    return {"rows": rows, "total": total, "accelerator": accelerator}


def format_comparison(result: dict, top: int = 8) -> str:
    """The operators that cost most under the roofline, and the totals, with the ratios."""
    total = result["total"]
    lines = [f"{'operator':<34}{'ops':>6}{'GFLOP':>10}{'GB moved':>10}{'clock ms':>10}"
             f"{'roofline ms':>12}{'torch ms':>10}"]
    ranked = sorted(result["rows"].items(), key=lambda kv: -kv[1]["roofline_s"])[:top]
    for name, r in ranked + [("total", total)]:
        lines.append(f"{name:<34}{r['ops']:>6}{r['flops'] / 1e9:>10.1f}{r['bytes'] / 1e9:>10.2f}"
                     f"{r['clock_s'] * 1e3:>10.3f}{r['roofline_s'] * 1e3:>12.3f}"
                     f"{r['torch_s'] * 1e3:>10.3f}")
    lines.append(f"on the {result['accelerator']}: the roofline charges "
                 f"{total['roofline_s'] / total['clock_s']:.2f}× what the clock charges; PyTorch's "
                 f"estimator {total['torch_s'] / total['roofline_s']:.2f}× the roofline")
    return "\n".join(lines)
