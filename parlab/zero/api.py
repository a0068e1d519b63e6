"""Chapter 02's ZeRO-1/2/3 as a library, for any `nn.Module` (or a parameter list) and your own
optimizer: the `ZeroEngine` of `parlab.zero.zero_engine` behind a small wrapper, used the way
PyTorch's `ZeroRedundancyOptimizer` (stage 1) and `fully_shard` (stage 3) are (Rajbhandari et
al., ZeRO, SC 2020; Zhao et al., PyTorch FSDP, VLDB 2023):

    from parlab.core.comm import Comm
    from parlab.zero.api import ZeRO

    zero = ZeRO(model, lambda params: torch.optim.AdamW(params, lr=1e-3), Comm(), stage=2)
    for x, y in my_rows_of_the_batch:
        loss_fn(model(x), y).backward()
        zero.step()                  # average the gradients, step this rank's shard, gather
    state = zero.full_state()        # collective: every parameter whole, e.g. to save it

`optimizer` is a factory or a built optimizer (rebuilt over the shards); `init=` "broadcast",
"verify" or "none"; frozen parameters stay whole; units are `model.blocks` / `model.layers`.
One forward and backward per `step()`, collective. Each option in detail: docs/zero.md,
`parlab.zero.api`.
"""

from __future__ import annotations

import inspect

import torch

from parlab.core.checks import Choice
from parlab.data_parallel.api import INITS, broadcast_initial, verify_initial
from parlab.zero.zero_engine import STAGES, ZeroEngine


class _Params(torch.nn.Module):
    """A parameter list as a module: the same Parameter objects, registered, not copied."""

    def __init__(self, params: list[torch.nn.Parameter]):
        super().__init__()
        for i, p in enumerate(params):
            self.register_parameter(f"p{i}", p)


def _as_module(model_or_params, stage: int) -> torch.nn.Module:
    if isinstance(model_or_params, torch.nn.Module):
        return model_or_params
    try:
        params = list(model_or_params)
    except TypeError:
        raise ValueError(f"model_or_params={type(model_or_params).__name__} must be a "
                         "torch.nn.Module or an iterable of parameters") from None
    unique = list({id(p): p for p in params}.values())
    bad = [type(p).__name__ for p in unique if not isinstance(p, torch.nn.Parameter)]
    if not unique or bad:
        raise ValueError(f"model_or_params must hold torch.nn.Parameter objects (got "
                         f"{bad or 'none'})")
    if stage == 3:
        raise ValueError("stage=3 needs the model itself: its forward gathers each unit's "
                         "parameters; a parameter list supports stages 1 and 2")
    return _Params(unique)


def _factory(optimizer):
    """A `params -> Optimizer` from a factory or from an optimizer built over the full model."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        if not callable(optimizer):
            raise ValueError(f"optimizer={optimizer!r} must be a torch.optim.Optimizer or a "
                             "callable params -> Optimizer")
        return optimizer
    if optimizer.state:
        raise ValueError(f"optimizer={type(optimizer).__name__} has already stepped (it holds "
                         "state): build ZeRO before the first step, or pass a factory")
    settings = [{k: v for k, v in group.items() if k != "params"}
                for group in optimizer.param_groups]
    if any(s != settings[0] for s in settings[1:]):
        differ = sorted({k for s in settings[1:] for k in s if s[k] != settings[0].get(k)})
        raise ValueError(f"optimizer={type(optimizer).__name__} has {len(settings)} parameter "
                         f"groups that differ in {differ}: a flat ZeRO unit holds parameters of "
                         "every group; pass one group, or a factory")
    cls, group = type(optimizer), settings[0]
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in {**optimizer.defaults, **group}.items() if k in accepted}

    def make(params):
        rebuilt = cls(params, **kwargs)
        for g in rebuilt.param_groups:
            g.update(group)  # every value of the original group (a scheduler's too)
        return rebuilt

    return make


class ZeRO:
    """Shard `model_or_params`' optimizer state (stage 1), also its gradients (2), also its
    parameters between uses (3) over `comm`'s ranks; see the module docstring."""

    def __init__(self, model_or_params, optimizer, comm=None, stage: int = 1,
                 init: str = "broadcast", algo: str = "gloo", prefetch: bool = False):
        if isinstance(stage, bool) or stage not in STAGES:
            raise ValueError(f"stage={stage!r} must be one of {STAGES}")
        Choice(init, INITS).check("init", init)
        Choice(algo, ("gloo", "ring")).check("algo", algo)
        module = _as_module(model_or_params, stage)
        make = _factory(optimizer)
        if comm is None:
            from parlab.core.comm import Comm

            comm = Comm()  # the default process group
        if init == "broadcast":
            broadcast_initial(module, comm)
        elif init == "verify":
            verify_initial(module, comm)
        self.module, self.comm, self.stage = module, comm, stage
        self.engine = ZeroEngine(module, comm, stage, prefetch=prefetch, algo=algo)
        self.optimizer = make(self.engine.shards)
        self.engine.start_step()

    @property
    def shards(self) -> list[torch.Tensor]:
        """This rank's (padded/N,) flat shard of every unit: what the optimizer updates."""
        return self.engine.shards

    def step(self) -> None:
        """After backward (collective): reduce-scatter the gradients, step the optimizer on this
        rank's shards, all-gather the parameters (stages 1, 2), clear the gradients."""
        self.engine.end_backward()
        self.optimizer.step()
        self.engine.after_step()
        self.zero_grad()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every gradient (`step` does it already) and ready the next backward."""
        self.engine.zero_grad()
        self.engine.start_step()

    def full_state(self) -> dict[str, torch.Tensor]:
        """Collective: {name: tensor} of every parameter, whole (stage 3 gathers its units)."""
        state = {n: p.detach().clone() for n, p in self.module.named_parameters()
                 if not p.requires_grad}
        for unit in self.engine.units:
            flat = unit.flat if unit.flat is not None else self.comm.all_gather(
                unit.shard, phase="full-state", algo=self.engine.algo)  # (padded,)
            state.update(unit.layout.unflatten(flat))
        return state

    def memory(self) -> dict:
        """Bytes this rank holds now (params, grads, optimizer state, ZeRO-3's gathered peak)."""
        return self.engine.memory(self.optimizer)
