"""Compressing the model instead of its gradient: Kwon, Zhang, Song, Balzano & Qu, "Efficient
Compression of Overparameterized Deep Models through Low-Dimensional Learning Dynamics" (AISTATS
2024, arXiv 2311.05061).

A deep linear network trained by gradient descent from a small orthogonal initialisation updates
each layer in a subspace of dimension about 2r (after Yaras et al. 2023), so it can be compressed
to width r̂ = 2r before training:

    W_1 = ε·V̂ᵀ (r̂×d),   W_l = ε·I_r̂ (l = 2..L−1),   W_L = ε·Û (d×r̂)     (the compressed DLN)

with 2dr̂ + (L−2)r̂² parameters instead of L·d² (`parlab.compression.cost.dln_params`), Û, V̂
from a spectral initialisation and the outer factors trained α times faster (`param_groups`).
The task is deep matrix completion. Where this departs from the authors' code
(soominkwon/comp-deep-nets) and the derivation: docs/compression.md, `parlab.compression.lowdim`.

Reading order: `completion_task`, `DeepLinear`, `original_init` / `spectral_init`,
`param_groups`, `fit`, `update_spectrum` and `outside_share`, `LowRankLinear`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from parlab.engine.loop import state_of


# ----------------------------------------------------------------------------- the task
@dataclass(frozen=True)
class CompletionTask:
    """A rank-r target `matrix` (d×d) and its observed entries: `index` (m, 2) rows (i, j),
    `values` (m,) = matrix[i, j]; `fraction` p = m / d²."""

    matrix: torch.Tensor
    index: torch.Tensor
    values: torch.Tensor
    fraction: float

    @property
    def d(self) -> int:
        return self.matrix.shape[0]

    def surrogate(self) -> torch.Tensor:
        """(1/p)·P_Ω(M): the observed entries, zeros elsewhere, rescaled (unbiased for M)."""
        out = torch.zeros_like(self.matrix)  # (d, d)
        out[self.index[:, 0], self.index[:, 1]] = self.values
        return out / self.fraction

    def recovery_error(self, end_to_end: torch.Tensor) -> float:
        """‖W − M‖_F / ‖M‖_F over every entry, observed or not (the paper's recovery error)."""
        return ((end_to_end.detach() - self.matrix).norm() / self.matrix.norm()).item()


def observed_count(d: int, fraction: float) -> int:
    """m = round(p·d²): how many entries are observed."""
    return round(fraction * d * d)


def completion_task(d: int, rank: int, fraction: float, seed: int = 0) -> CompletionTask:
    """M = U·diag(s)·Vᵀ with orthonormal U, V (d×r, drawn from `seed`) and s = √d·linspace(1, ½, r)
    (distinct magnitudes, so the components are learnt one after another); Ω: m = round(p·d²)
    entries drawn without replacement."""
    g = torch.Generator().manual_seed(seed)
    u = torch.linalg.qr(torch.randn(d, rank, generator=g)).Q  # (d, r)
    v = torch.linalg.qr(torch.randn(d, rank, generator=g)).Q  # (d, r)
    s = math.sqrt(d) * torch.linspace(1.0, 0.5, rank)
    matrix = u @ torch.diag(s) @ v.T  # (d, d), rank r
    flat = torch.randperm(d * d, generator=g)[:observed_count(d, fraction)]  # (m,)
    index = torch.stack([flat // d, flat % d], dim=1)  # (m, 2) rows (i, j)
    return CompletionTask(matrix, index, matrix[index[:, 0], index[:, 1]].clone(), fraction)


# ----------------------------------------------------------------------------- the network
class DeepLinear(nn.Module):
    """W_L ⋯ W_1 with W_1 (w×d), W_2..W_{L−1} (w×w), W_L (d×w): width w = d is the original DLN,
    w = r̂ the compressed one. `forward(x)` reads the product's entries at index pairs x (B, 2)."""

    def __init__(self, factors: list[torch.Tensor]):
        super().__init__()
        self.factors = nn.ParameterList(nn.Parameter(f.clone()) for f in factors)

    def end_to_end(self) -> torch.Tensor:
        product = self.factors[0]
        for w in self.factors[1:]:
            product = w @ product  # (d, d) at the end
        return product

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        left = self.factors[-1]  # (d, w)
        for w in reversed(self.factors[1:-1]):
            left = left @ w  # (d, w): W_L ⋯ W_l
        rows = left[x[:, 0]]  # (B, w)
        cols = self.factors[0][:, x[:, 1]].T  # (B, w): columns j of W_1
        return (rows * cols).sum(dim=1)  # (B,) entries (i, j) of W_L ⋯ W_1

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((self(x) - y) ** 2).mean()


def orthogonal(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    """A rows×cols matrix with orthonormal rows or columns (whichever is fewer)."""
    q = torch.linalg.qr(torch.randn(max(rows, cols), min(rows, cols), generator=generator)).Q
    return q if rows >= cols else q.T.contiguous()


def original_init(d: int, depth: int, scale: float, seed: int = 0) -> list[torch.Tensor]:
    """The original DLN: W_l(0) = ε·O_l, O_l orthogonal d×d (the paper's orthogonal init)."""
    g = torch.Generator().manual_seed(seed)
    return [scale * orthogonal(d, d, g) for _ in range(depth)]


def spectral_init(task: CompletionTask, width: int, depth: int, scale: float) -> list[torch.Tensor]:
    """The compressed DLN (the paper's construction): W_1 = ε·V̂ᵀ, W_l = ε·I, W_L = ε·Û, where Û,
    V̂ are the top-`width` singular vectors of the surrogate (1/p)·P_Ω(M)."""
    u, _, vh = torch.linalg.svd(task.surrogate())  # (d, d), (d,), (d, d)
    middle = [scale * torch.eye(width) for _ in range(depth - 2)]  # (r̂, r̂) each
    return [scale * vh[:width].clone()] + middle + [scale * u[:, :width].clone()]


def build_network(task: CompletionTask, network: str, width: int, depth: int, scale: float,
                  seed: int = 0) -> DeepLinear:
    """"original": the width-d DLN from the orthogonal init; "compressed": width r̂, spectral init."""
    if network == "original":
        return DeepLinear(original_init(task.d, depth, scale, seed))
    return DeepLinear(spectral_init(task, width, depth, scale))


def outer_rate(network: str, alpha: float) -> float:
    """α for the compressed network (the paper's rule); 1 for the original, trained plainly."""
    return 1.0 if network == "original" else alpha


def param_groups(model: DeepLinear, lr: float, alpha: float) -> list[dict]:
    """The discrepant learning rate: the outer factors W_1, W_L at α·lr, the inner ones at lr."""
    outer = [model.factors[0], model.factors[-1]]
    inner = list(model.factors[1:-1])
    return [{"params": outer, "lr": alpha * lr}] + ([{"params": inner, "lr": lr}] if inner else [])


def make_dln_optimizer(model: DeepLinear, optimizer: str, lr: float, alpha: float):
    """The lab's optimizers (`parlab.engine.loop.optimizer_spec`'s settings) over `param_groups`:
    "sgd" is the paper's gradient descent; "adamw" Llama 2's AdamW (ours, for the lab's default)."""
    groups = param_groups(model, lr, alpha)
    if optimizer == "sgd":
        return torch.optim.SGD(groups, lr=lr)
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)


# ----------------------------------------------------------------------------- the reference
@dataclass
class Fitted:
    """An in-process run: per-step losses (before each update), the recovery error after each
    update, the final parameters by name (`state_of`), and ΔW snapshots when asked."""

    losses: list[float]
    errors: list[float]
    state: dict
    snapshots: list = None


def fit(model: DeepLinear, task: CompletionTask, steps: int, lr: float, alpha: float = 1.0,
        optimizer: str = "sgd", snapshot_every: int = 0) -> Fitted:
    """Single-process training on every observed entry: the reference the data-parallel scheme
    `lowdim` must reproduce (`parlab.run("single")` trains the lab's models, not this one)."""
    opt = make_dln_optimizer(model, optimizer, lr, alpha)
    start = [w.detach().clone() for w in model.factors]
    losses, errors, snapshots = [], [], []
    for step in range(steps):
        loss = model.loss(task.index, task.values)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        with torch.no_grad():
            errors.append(task.recovery_error(model.end_to_end()))
            if snapshot_every and (step + 1) % snapshot_every == 0:
                snapshots.append((step + 1, [w.detach() - w0 for w, w0 in zip(model.factors, start)]))
    return Fitted(losses, errors, state_of(model), snapshots)


# ----------------------------------------------------------------------------- the observation
def update_spectrum(delta: torch.Tensor) -> torch.Tensor:
    """Singular values of one ΔW_l, largest first."""
    return torch.linalg.svdvals(delta.double()).float()


def effective_rank(values: torch.Tensor, rtol: float = 1e-2) -> int:
    """How many singular values exceed `rtol` × the largest."""
    return int((values > rtol * values[0]).sum()) if values[0] > 0 else 0


def outside_share(delta: torch.Tensor, reference: torch.Tensor, k: int) -> float:
    """‖(I − U·Uᵀ)·Δ‖_F / ‖Δ‖_F with U the top-k left singular vectors of `reference`: how much of
    the update `delta` lies outside that fixed k-dimensional subspace (0: entirely inside)."""
    u = torch.linalg.svd(reference.double()).U[:, :k]  # (d, k)
    delta = delta.double()
    rest = delta - u @ (u.T @ delta)  # (d, d) the part outside span(U)
    return (rest.norm() / delta.norm()).item() if delta.norm() > 0 else 0.0


# ----------------------------------------------------------------------------- nonlinear transfer
class LowRankLinear(nn.Module):
    """A d_in → d_out layer as the compressed chain C·B·A + bias, A (r̂×d_in), B (r̂×r̂), C (d_out×r̂):
    2·d·r̂ + r̂² + d_out parameters instead of d_in·d_out + d_out (the paper's nonlinear transfer).
    A and C start orthonormal and B = I (ours), so the chain starts as a rank-r̂ isometry."""

    def __init__(self, d_in: int, d_out: int, width: int, generator: torch.Generator):
        super().__init__()
        self.factors = nn.ParameterList([nn.Parameter(orthogonal(width, d_in, generator)),
                                         nn.Parameter(torch.eye(width)),
                                         nn.Parameter(orthogonal(d_out, width, generator))])
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for w in self.factors:
            x = x @ w.T  # (B, r̂), (B, r̂), (B, d_out)
        return x + self.bias


def compress_mlp(mlp: nn.Module, width: int, seed: int = 0) -> nn.Module:
    """Replace every hidden d×d layer of `parlab.models.mlp.MLP` (all but the first and last) by a
    `LowRankLinear` of width r̂, in place; the MLP's own forward runs them (GELU after each)."""
    g = torch.Generator().manual_seed(seed)
    for i in range(1, len(mlp.layers) - 1):
        layer = mlp.layers[i]
        mlp.layers[i] = LowRankLinear(layer.in_features, layer.out_features, width, g)
    return mlp
