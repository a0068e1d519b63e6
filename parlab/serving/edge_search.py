"""Which cross-device transfers to keep, searched against the link: relaxed gates with the link's
α-β time in the loss.

Lin & Wang, "Communication-Efficient Separable Neural Network for Distributed Inference on Edge
Devices" (2021) search the *transmission policy* of a grouped network split over edge devices by
neural architecture search, with latency in the objective. Ours keeps the question and the
objective and changes the optimiser (a simplification, named here): every transfer (channel j of
group s to device r, before block b's mix) gets a gate trained by gradient with the weights, as
in differentiable, latency-aware NAS (ProxylessNAS, Cai et al. 2019; FBNet, Wu et al. 2019):

    cross-entropy  +  λ · E[t_comm],    E[t_comm] = Σ_b (N-1)·α·P(block b sends anything)
                                                    + max_a E[bytes sent by device a] / β

(`cost.edge_comm_seconds` with every gate replaced by its probability; λ in nats per ms). The
gates (binary concrete, straight-through) are thresholded into masks and fine-tuned
(`masks.finetune`). In full: docs/serving.md, `parlab.serving.edge_search`.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from parlab.core.link import Link
from parlab.serving import cost
from parlab.serving.edge import check_world_size
from parlab.serving.grouped import GroupedNet
from parlab.serving.masks import finetune, rank_groups

INIT_LOGIT = 3.0  # σ(3) ≈ 0.95: the search starts from (almost) every transfer kept


def device_of(groups: int, world_size: int) -> torch.Tensor:
    """(G,) the device holding each group."""
    return torch.tensor([r for r in range(world_size) for _ in rank_groups(groups, world_size, r)])


class Gates(torch.nn.Module):
    """θ[b] (G, c, N): the logit of transfer (group s, channel j) → device r before block b; the
    entries with r = the device of s are not gates (always 1)."""

    def __init__(self, net: GroupedNet, world_size: int, init: float = INIT_LOGIT):
        super().__init__()
        cfg = net.cfg
        self.cfg, self.world_size = cfg, world_size
        self.device = device_of(cfg.groups, world_size)  # (G,)
        self.logits = torch.nn.ParameterList(
            torch.full((cfg.groups, cfg.width, world_size), float(init)) for _ in range(cfg.n_blocks))
        local = self.device[:, None] == torch.arange(world_size)[None, :]  # (G, N) s on device r
        self.register_buffer("local", local[:, None, :].expand(cfg.groups, cfg.width, world_size))

    def probabilities(self) -> list[torch.Tensor]:
        """P(kept) of every transfer, (G, c, N) per block; 1 where no device is crossed."""
        return [torch.where(self.local, 1.0, torch.sigmoid(t)) for t in self.logits]

    def to_masks(self, z: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per-transfer values (G, c, N) → the network's per-pair masks (G, G, c):
        mask[s, d, j] = z[s, j, device of d]."""
        return [v[:, :, self.device].permute(0, 2, 1) for v in z]  # (s, j, d) → (s, d, j)

    def sample(self, generator: torch.Generator, tau: float = 0.5) -> list[torch.Tensor]:
        """Hard gates in the forward, the relaxed sigmoid's gradient in the backward: (G, G, c) each."""
        out = []
        for t in self.logits:
            u = torch.rand(t.shape, generator=generator).clamp(1e-6, 1 - 1e-6)
            soft = torch.sigmoid((t + torch.log(u) - torch.log1p(-u)) / tau)  # (G, c, N)
            hard = (soft > 0.5).float()
            out.append(torch.where(self.local, 1.0, hard + soft - soft.detach()))
        return self.to_masks(out)

    def masks(self) -> list[torch.Tensor]:
        """The searched policy: the transfers with θ > 0 (every local one), bool (G, G, c) per block."""
        return [m.bool() for m in self.to_masks(
            [torch.where(self.local, 1.0, (t > 0).float()) for t in self.logits])]

    def expected_seconds(self, link, batch: int = 1) -> torch.Tensor:
        """E[t_comm] of a request of `batch` images on `link` (α, β): `cost.edge_comm_seconds`
        with each gate replaced by its probability (exact when every gate is 0 or 1)."""
        n, cfg = self.world_size, self.cfg
        if n == 1 or link is None:
            return torch.zeros(())
        alpha, beta = link.latency_s, link.bandwidth_Bps
        head = torch.tensor([0.0] + [batch * cfg.classes * cost.FP32] * (n - 1))  # (N,) per device
        sent, rounds = head, torch.ones(())
        for p, size in zip(self.probabilities(), cost.transfer_bytes(cfg, batch)):
            cross = torch.where(self.local, 0.0, p)  # (G, c, N)
            per_group = cross.sum(dim=(1, 2))  # (G,) expected channels each group sends
            sent = sent + size * torch.zeros(n).index_add(0, self.device, per_group)  # (N,)
            rounds = rounds + (n - 1) * (1 - torch.prod(1 - cross[~self.local]))
        return rounds * alpha + sent.max() / beta


def search(net: GroupedNet, x, y, world_size: int, link, price: float, steps: int = 100,
           lr: float = 3e-3, gate_lr: float = 0.2, tau: float = 0.5, batch: int = 64,
           seed: int = 0):
    """Train a copy of `net` and the gates of its cross-device transfers together (Adam) on
    cross-entropy + `price` (nats per millisecond) × E[t_comm on `link`]; returns (the searched
    masks, the gates). The weights trained here are discarded: the masks go to
    `masks.finetune`, as the baseline's do. One intra-op thread, as `train_grouped`."""
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not price >= 0:
        raise ValueError(f"price={price!r} must be a number >= 0 (nats per millisecond of link time)")
    check_world_size(net, world_size)
    if link is not None and not isinstance(link, Link):
        raise ValueError(f"link={link!r} must be a parlab.core.link.Link or None "
                         "(edge.resolve_link turns a name into one)")
    net = copy.deepcopy(net)
    gates = Gates(net, world_size)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam([{"params": net.parameters(), "lr": lr},
                            {"params": gates.parameters(), "lr": gate_lr}])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            rows = torch.randint(0, len(y), (batch,), generator=g)
            logits = net(x[rows], gates.sample(g, tau))  # (batch, classes) with sampled transfers
            loss = F.cross_entropy(logits, y[rows]) + price * 1e3 * gates.expected_seconds(link)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return gates.masks(), gates


def searched(net: GroupedNet, x, y, world_size: int, link, price: float, steps: int = 100,
             tune: int = 60, batch: int = 64, seed: int = 0) -> GroupedNet:
    """`net` with the masks `search` finds on `link`, fine-tuned `tune` steps."""
    found, _ = search(net, x, y, world_size, link, price, steps=steps, batch=batch, seed=seed)
    return finetune(net, x, y, found, steps=tune, lr=3e-3, batch=batch)
