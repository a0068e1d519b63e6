"""Chapter 01's gradient synchronisation as a library, for any `nn.Module` and your own optimizer,
the way `torch.nn.parallel.DistributedDataParallel` is used (Li et al., "PyTorch Distributed:
Experiences on Accelerating Data Parallel Training", VLDB 2020):

    from parlab.core.comm import Comm
    from parlab.data_parallel.api import DataParallel

    ddp = DataParallel(model, comm=Comm(), sync="overlap", bucket_mb=25)
    for x, y in my_rows_of_the_batch:
        loss_fn(model(x), y).backward()
        ddp.synchronize()            # every trainable gradient is now the average over ranks
        optimizer.step()
        optimizer.zero_grad()
    with ddp.no_sync():              # gradient accumulation: backward without communication
        ...

What the library does about initial weights, frozen, unused and tied parameters is in
docs/data_parallel.md ("The library").

`sync`: "naive" (one all-reduce per tensor after backward), "bucketed" (flat buckets after
backward) or "overlap" (WFBP: buckets launched from gradient hooks while backward runs). DeAR and
the priority scheduler update layer by layer inside the next forward with one optimizer per
group, so they own the optimizer: use them through `parlab.run("dear", ...)`.
"""

from __future__ import annotations

import contextlib
import hashlib

import torch

from parlab.core.checks import Bool, Choice, Float
from parlab.data_parallel.reducers import make_reducer

SYNCS = ("naive", "bucketed", "overlap")
ALGOS = ("gloo", "ring", "tree", "naive")
INITS = ("broadcast", "verify", "none")


# ----------------------------------------------------------------------------- the initial weights
def module_tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Every parameter (frozen too; a tied one once) and buffer of `model`, named, in order."""
    return list(model.named_parameters()) + list(model.named_buffers())


def broadcast_initial(model: torch.nn.Module, comm, phase: str = "init-broadcast") -> None:
    """Copy rank 0's parameters and buffers into every rank of `comm`, in place: one broadcast of
    their flat concatenation per dtype (DDP's broadcast at construction)."""
    if comm.size == 1:
        return
    by_dtype: dict = {}
    for _, t in module_tensors(model):
        by_dtype.setdefault(t.dtype, []).append(t)
    with torch.no_grad():
        for tensors in by_dtype.values():
            flat = torch.cat([t.detach().reshape(-1) for t in tensors])  # (Σ numel,)
            comm.broadcast(flat, src=0, phase=phase)
            offset = 0
            for t in tensors:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()


def _digest(t: torch.Tensor) -> int:
    data = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    head = hashlib.sha256(str((t.dtype, tuple(t.shape))).encode() + data).digest()
    return int.from_bytes(head[:8], "little", signed=True)


def verify_initial(model: torch.nn.Module, comm, phase: str = "init-verify") -> None:
    """Collective: raise ValueError on every rank if any parameter or buffer differs from rank 0's,
    naming the first such tensor and the ranks that differ (8 bytes of sha256 per tensor move)."""
    named = module_tensors(model)
    if comm.size == 1 or not named:
        return
    mine = torch.tensor([_digest(t) for _, t in named], dtype=torch.int64)  # (T,)
    reference = mine.clone()
    comm.broadcast(reference, src=0, phase=phase)  # (T,) rank 0's digests
    differing = (mine != reference).nonzero().flatten().tolist()
    first = torch.zeros(comm.size, dtype=torch.int64)  # (N,) each rank's first differing index
    first[comm.rank] = differing[0] if differing else len(named)
    comm.all_reduce(first, op="sum", phase=phase)
    if bool((first < len(named)).any()):
        index = int(first.min())
        ranks = [r for r in range(comm.size) if first[r] == index]
        others = [r for r in range(comm.size) if len(named) > first[r] > index]
        name, t = named[index]
        also = f"; ranks {others} differ from a later tensor on" if others else ""
        raise ValueError(f"initial weights differ between ranks: {name} {tuple(t.shape)} on ranks "
                         f"{ranks} is not rank 0's{also} (seed every rank alike, or use "
                         "init='broadcast' to copy rank 0's)")


class DataParallel:
    """Average the gradients of `model`'s trainable parameters over `comm`'s ranks (see the
    module docstring). Every rank must build the same model with the same initial weights."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 comm=None, sync: str = "overlap", bucket_mb: float = 25.0, algo: str = "gloo",
                 find_unused_parameters: bool = False, init: str = "broadcast"):
        Choice(sync, SYNCS).check("sync", sync)
        Choice(algo, ALGOS).check("algo", algo)
        Choice(init, INITS).check("init", init)
        Float(bucket_mb, min=0, unit="MiB").check("bucket_mb", bucket_mb)
        Bool(False).check("find_unused_parameters", find_unused_parameters)
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"model={type(model).__name__} must be a torch.nn.Module")
        if optimizer is not None and not hasattr(optimizer, "step"):
            raise ValueError(f"optimizer={type(optimizer).__name__} must be a torch optimizer "
                             "or None")
        if comm is None:
            from parlab.core.comm import Comm

            comm = Comm()  # the default process group
        if init == "broadcast":
            broadcast_initial(model, comm)
        elif init == "verify":
            verify_initial(model, comm)
        self.optimizer = optimizer  # yours: the sync never steps it
        # chapter 01's reducer, the one its schemes run (`parlab.data_parallel.reducers`)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.reducer = make_reducer(sync, comm, self.params, bucket_mb, algo=algo)
        self.comm, self.find_unused = comm, find_unused_parameters
        names = {id(p): n for n, p in model.named_parameters()}
        self.names = [names[id(p)] for p in self.params]
        self.reducer.before_micro(last=True)  # the next backward communicates

    @contextlib.contextmanager
    def no_sync(self):
        """Backward inside accumulates into `.grad` without communicating (as DDP's no_sync)."""
        self.reducer.before_micro(last=False)
        try:
            yield
        finally:
            self.reducer.before_micro(last=True)

    def synchronize(self) -> None:
        """After backward: wait until every trainable gradient is averaged over the ranks."""
        params = self.params
        missing = [n for n, p in zip(self.names, params) if p.grad is None]
        if missing and not self.find_unused:
            raise RuntimeError(f"parameters {missing} got no gradient this step; pass "
                               "find_unused_parameters=True if the model does not use every "
                               "parameter in every step")
        used = torch.tensor([float(p.grad is not None) for p in params])  # (P,) before the sync
        self.reducer.after_backward()
        self.reducer.before_micro(last=True)  # ready for the next step's backward
        if self.find_unused:
            self.comm.all_reduce(used, phase="unused-map")  # (P,) ranks that used each parameter
            for p, count in zip(params, used.tolist()):
                if count == 0:
                    p.grad = None  # unused everywhere: the optimizer skips it, as in one process
