"""SDP in one process, by masked sum ÷ owner count, and the gradient alignment it makes visible.

Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data Parallelism" (2025)
explain why block-level subnetworks train better than neuron-level ones by *gradient alignment*.
One process runs every rank's subnetwork (forward masking) on its rows and forms

    ĝ = Σ_r m_r ⊙ g_r ÷ c        (m_r: rank r's 0/1 ownership mask, c = Σ_r m_r: owners per element)

the owners' average `sync.py` computes with one process group per owner set; stepping with ĝ
follows the distributed run (tested equal within 1e-4). Each step it also measures the full
model's loss and cos(ĝ, g), whole and per unit (`unit_cosines`). Why per unit: docs/subnet.md,
`parlab.subnet.emulate`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from parlab.core.rank_process import one_thread
from parlab.engine.loop import build_model, make_optimizer, state_of, step_batch
from parlab.subnet.ownership import Ownership, find_blocks, find_ffns


@dataclass
class Emulation:
    losses: list[float]  # what `sdp` reports: Σ_r (rank r's forward's mean loss) / N
    full_losses: list[float]  # the full model's loss on each step's global batch, before the update
    cosines: list[float]  # cos(ĝ, g) at each step
    norm_ratios: list[float]  # |ĝ| / |g| at each step
    unit_cosines: list[dict] = field(default_factory=list)  # per step {unit label: cos(ĝ_u, g_u)}
    state: dict = field(default_factory=dict)  # final full parameters


def ownership_masks(model: nn.Module, ownership: Ownership) -> list[dict[str, torch.Tensor]]:
    """[rank] {parameter name: 0/1 tensor of its shape}: which elements the rank owns."""
    shapes = {n: p.shape for n, p in model.named_parameters()}
    masks = [{n: torch.zeros(s) for n, s in shapes.items()} for _ in range(ownership.world_size)]
    for unit in ownership.units:
        for rank in unit.owners:
            for piece in unit.pieces:
                masks[rank][piece.name][piece.index] = 1.0  # the piece's rows / columns
    return masks


@contextlib.contextmanager
def subnetwork(model: nn.Module, ownership: Ownership, rank: int):
    """Within the block, `model` computes rank `rank`'s forward-masked subnetwork."""
    undo = []
    if ownership.granularity == "block":
        list_name, indices = find_blocks(model)
        blocks = dict(model.named_modules())[list_name]
        for unit, i in zip(ownership.units, indices):
            if rank not in unit.owners:
                kept = blocks[i]
                blocks[i] = nn.Identity()  # skipped, as on the rank
                undo.append(lambda i=i, kept=kept: blocks.__setitem__(i, kept))
    else:
        modules = dict(model.named_modules())
        for module_name, up, down in find_ffns(model):
            up_name = ".".join(p for p in (module_name, up, "weight") if p)
            keep = torch.zeros(getattr(modules[module_name], up).out_features)
            for unit in ownership.units:
                if unit.pieces and unit.pieces[0].name == up_name and rank in unit.owners:
                    keep[unit.pieces[0].lo:unit.pieces[0].hi] = 1.0
            hook = getattr(modules[module_name], down).register_forward_pre_hook(
                lambda _, args, keep=keep: (args[0] * keep,))  # (..., h): non-owned neurons zeroed
            undo.append(hook.remove)
    try:
        yield
    finally:
        for restore in undo:
            restore()


def unit_masks(model: nn.Module, ownership: Ownership) -> dict[str, dict[str, torch.Tensor]]:
    """{unit label: {parameter name: 0/1 tensor of its shape}}: the elements each unit covers
    (the shared unit included), for the per-unit cosines."""
    shapes = {n: p.shape for n, p in model.named_parameters()}
    out = {}
    for unit in ownership.units:
        if unit.numel:
            mask: dict[str, torch.Tensor] = {}
            for piece in unit.pieces:
                mask.setdefault(piece.name, torch.zeros(shapes[piece.name]))[piece.index] = 1.0
            out[unit.label] = mask
    return out


def _masked(grads: dict, mask: dict) -> torch.Tensor:
    return torch.cat([grads[n][m.bool()] for n, m in mask.items()])  # (Ψ_u,) the unit's elements


def _grads(params: dict, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return {n: torch.zeros_like(p) if g is None else g for (n, p), g in zip(params.items(), grads)}


def _flat(grads: dict) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads.values()])  # (Ψ,)


def emulate(cfg, ownership: Ownership, mask: str, skips: bool = True) -> Emulation:
    """Train `cfg.steps` steps of SDP (`ownership`, `mask`) in this process; see the module doc.
    `skips=False`: the same model with its blocks' residual connections removed (`skips.py`)."""
    with one_thread():
        return _emulate(cfg, ownership, mask, skips)


def _emulate(cfg, ownership: Ownership, mask: str, skips: bool = True) -> Emulation:
    model = build_model(cfg)
    if not skips:
        from parlab.subnet.skips import remove_skips

        remove_skips(model)
    params = dict(model.named_parameters())
    optimizer = make_optimizer(params.values(), cfg)
    masks = ownership_masks(model, ownership)
    units = unit_masks(model, ownership)
    counts = {n: sum(m[n] for m in masks) for n in params}  # owners per element, >= 1
    n = ownership.world_size
    out = Emulation([], [], [], [])
    for step in range(cfg.steps):
        full_loss, shares, full, sdp = 0.0, 0.0, [], []
        for rank in range(n):
            x, y = step_batch(cfg, step, rank, n)
            loss = model.loss(x, y)  # (,) the full model on rank r's rows
            full.append(_grads(params, loss))
            full_loss += loss.item() / n
            if mask == "forward":
                with subnetwork(model, ownership, rank):
                    sub_loss = model.loss(x, y)  # (,) rank r's subnetwork on its rows
                    sdp.append(_grads(params, sub_loss))
                shares += sub_loss.item() / n
            else:
                sdp.append(full[-1])
                shares += loss.item() / n
        g = {name: sum(f[name] for f in full) / n for name in params}
        g_hat = {name: sum(m[name] * s[name] for m, s in zip(masks, sdp)) / counts[name]
                 for name in params}
        a, b = _flat(g_hat), _flat(g)
        out.losses.append(shares)
        out.full_losses.append(full_loss)
        out.cosines.append(torch.nn.functional.cosine_similarity(a, b, dim=0).item())
        out.norm_ratios.append((a.norm() / b.norm()).item())
        out.unit_cosines.append({label: torch.nn.functional.cosine_similarity(
            _masked(g_hat, m), _masked(g, m), dim=0).item() for label, m in units.items()})
        for name, p in params.items():
            p.grad = g_hat[name]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    out.state = state_of(model)
    return out
