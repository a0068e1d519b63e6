"""Mixed-precision training: a 16-bit compute copy of the weights, fp32 master weights and
optimizer state, and dynamic loss scaling for fp16 (Micikevicius et al., "Mixed Precision
Training", ICLR 2018; the 2 + 2 + 12 bytes per parameter of Rajbhandari et al., "ZeRO", SC 2020,
§3.1; bf16: Kalamkar et al., "A Study of BFLOAT16 for Deep Learning Training", 2019).

`parlab.run(..., precision="bf16-mixed")`: the parameters *are* the 16-bit compute copy (cast in
place), so activations and every gradient collective take 2 bytes an element; `MasterWeights`
steps fp32 masters and rounds them back (K = 12 bytes per parameter with Adam); a 16-bit average
divides before it sums (`parlab.core.comm.predivide`); for fp16, `LossScaler` scales the loss by
S in [2^-14, 2^24], skips a step whose gradients hold inf/NaN on any rank (one 1-element
all-reduce) and halves S, doubling it after `GROWTH_INTERVAL` clean steps (PyTorch's GradScaler
policy). `fp32` changes nothing. The bounds on S and what a diverged run raises:
docs/core.md, `parlab.core.precision`.
"""

from __future__ import annotations

import torch

PRECISIONS = {"fp32": torch.float32, "bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}
INIT_SCALE = 2.0 ** 16  # torch.amp.GradScaler's defaults
GROWTH_FACTOR, BACKOFF_FACTOR, GROWTH_INTERVAL = 2.0, 0.5, 2000
MIN_SCALE, MAX_SCALE = 2.0 ** -14, 2.0 ** 24  # the loss scales fp16 can use (module doc)
SKIP_WARN = 10  # this many skipped steps in a row: parlab.run warns (a healthy run skips a few)
MANTISSA_BITS = {"fp32": 24, "bf16-mixed": 8, "fp16-mixed": 11}  # significand bits, implicit 1 included


def check(precision) -> str:
    """`precision` if known; ValueError naming it otherwise (before any process starts)."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} must be one of {tuple(PRECISIONS)}")
    return precision


def check_loss_scale(value) -> float:
    """`value` as a float if fp16 can use it as a loss scale; ValueError naming it otherwise."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not MIN_SCALE <= value <= MAX_SCALE):
        raise ValueError(f"loss_scale={value!r} must be a number in [2**-14, 2**24]: below it every "
                         "fp16 gradient underflows, above it every one overflows (each step is "
                         "skipped); None: 2**16")
    return float(value)


def longest_skip_run(skipped: list[int]) -> tuple[int, int]:
    """(length, first step) of the longest run of consecutive skipped steps (0, -1 if none)."""
    best, first, run, start, last = 0, -1, 0, -1, None
    for step in skipped:
        run, start = (run + 1, start) if last is not None and step == last + 1 else (1, step)
        last = step
        if run > best:
            best, first = run, start
    return best, first


def compute_dtype(precision: str) -> torch.dtype:
    return PRECISIONS[precision]


def element_bytes(precision: str) -> int:
    """Bytes of one parameter / gradient / activation element in the compute copy: 4 or 2."""
    return torch.empty((), dtype=PRECISIONS[precision]).element_size()


def unit_roundoff(precision: str) -> float:
    """u = 2^-p: the largest relative error of one rounding to the format (p significand bits)."""
    return 2.0 ** -MANTISSA_BITS[precision]


def cast_batch(batch, dtype: torch.dtype):
    """Floating inputs in the compute dtype (token ids and labels stay integers)."""
    return tuple(t.to(dtype) if torch.is_floating_point(t) else t for t in batch)


class ScaleGrad(torch.autograd.Function):
    """Loss scaling. Forward: identity on the (fp32) loss, so the reported loss is unscaled.
    Backward: the incoming gradient times the scaler's current S, so every gradient of the
    backward pass is S times too large (and fp16's small gradients stay representable)."""

    @staticmethod
    def forward(ctx, loss, scaler):
        ctx.scaler = scaler
        return loss.view_as(loss)  # () unchanged

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scaler.scale, None


class LossScaler:
    """Dynamic loss scale S (fp16): halve on overflow (the step is skipped), double after
    `growth_interval` clean steps."""

    def __init__(self, scale: float = INIT_SCALE, growth_interval: int = GROWTH_INTERVAL,
                 stop_below: bool = True):
        self.scale, self.growth_interval = float(scale), growth_interval
        self.stop_below = stop_below  # False (on_nonfinite="record"): S stays at MIN_SCALE
        self.clean = 0
        self.consecutive_skips = 0
        self.skipped: list[int] = []  # loop steps whose update was skipped (overflow)
        self.history: list[float] = []  # S used by each step

    def update(self, step: int, overflow: bool) -> None:
        self.history.append(self.scale)
        if overflow:
            self.skipped.append(step)
            self.consecutive_skips += 1
            self.clean = 0
            if self.scale * BACKOFF_FACTOR < MIN_SCALE:
                if self.stop_below:
                    raise FloatingPointError(
                        f"fp16-mixed: step {step} overflowed at loss scale {self.scale:g} = 2**-14, "
                        f"the smallest fp16 can use, after {self.consecutive_skips} skipped steps in "
                        "a row: the gradients are not finite at any scale (the run diverged; "
                        "on_nonfinite='record' keeps skipping instead)")
            else:
                self.scale *= BACKOFF_FACTOR
        else:
            self.consecutive_skips = 0
            self.clean += 1
            if self.clean == self.growth_interval:
                self.scale = min(self.scale * GROWTH_FACTOR, MAX_SCALE)
                self.clean = 0

    def wrap_loss(self, loss_fn):
        """`loss_fn` whose loss scales its gradient by S (see ScaleGrad)."""
        def scaled_loss(*args, **kwargs):
            return ScaleGrad.apply(loss_fn(*args, **kwargs), self)
        return scaled_loss


class MasterWeights:
    """fp32 master copies of an optimizer's (16-bit) parameters.

    The optimizer's param_groups are pointed at the masters (so Adam's moments are created and
    kept in fp32, keyed by them), `optimizer.step` becomes the mixed-precision step and
    `optimizer.zero_grad` also clears the 16-bit gradients. The 16-bit parameters themselves keep
    their storage and dtype (never `.data =`: autograd would drop their gradient accumulators and
    the hooks that wrappers such as DDP put on them). The masters are attached to the optimizer
    (`optimizer.master_weights`) so `parlab.core.memory.optimizer_state_tensors` counts them as
    optimizer state (K = 12 with Adam)."""

    def __init__(self, optimizer: torch.optim.Optimizer, comm, scaler: LossScaler | None,
                 step_of=lambda: 0):
        self.optimizer, self.comm, self.scaler, self.step_of = optimizer, comm, scaler, step_of
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.masters = {p: p.detach().float().clone() for p in self.params}  # (param shape,) fp32
        for group in optimizer.param_groups:
            group["params"] = [self.masters[p] for p in group["params"]]
        self.inner_step, self.inner_zero_grad = optimizer.step, optimizer.zero_grad
        optimizer.master_weights = self.masters
        optimizer.step, optimizer.zero_grad = self.step, self.zero_grad

    def overflow(self) -> bool:
        """Whether any rank's gradient holds inf/NaN (every rank gets the same answer)."""
        bad = any(not torch.isfinite(p.grad).all() for p in self.params if p.grad is not None)
        flag = torch.tensor([1.0 if bad else 0.0])  # (1,) fp32
        self.comm.all_reduce(flag, op="max", phase="overflow-check")  # (1,) over all ranks
        return bool(flag.item())

    def step(self, *args, **kwargs):
        if self.scaler is not None:
            overflow = self.overflow()
            self.scaler.update(self.step_of(), overflow)
            if overflow:
                return None  # skipped: master, moments and Adam's step count unchanged
        inv = 1.0 / self.scaler.history[-1] if self.scaler is not None else 1.0  # S of this step
        for p, master in self.masters.items():
            if p.grad is not None:  # fp32, unscaled (S is a power of two: exact)
                master.grad = p.grad.float() * inv if inv != 1.0 else p.grad.float()
        out = self.inner_step(*args, **kwargs)
        for p, master in self.masters.items():
            master.grad = None  # transient: the fp32 gradient lives only inside the step
            with torch.no_grad():
                p.copy_(master)  # round the updated master into the 16-bit compute copy
        return out

    def zero_grad(self, set_to_none: bool = True):
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()
        self.inner_zero_grad(set_to_none)
