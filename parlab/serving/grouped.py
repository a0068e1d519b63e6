"""A ResNeXt-style grouped convolutional network that splits into groups over devices (Xie et al.,
"Aggregated Residual Transformations for Deep Neural Networks", CVPR 2017; Lin & Wang,
"Communication-Efficient Separable Neural Network for Distributed Inference on Edge Devices",
2021, split such a network by groups over edge devices; this one is a tiny version of ours).

G groups of c channels: a stem, `n_blocks` blocks of a dense 1×1 `mix` then a grouped 3×3 conv,
and a linear head. Only `mix` (and the head's sum) crosses groups, so those are the only places
features travel once groups sit on different devices. A mask per block, `masks[b][s, d, j]`
(G, G, c) bool, says whether channel j of group s reaches group d's mix; `mix` uses weight · mask,
so the masked network gives the same result in one process or split. All ones: the dense network.
The layer table with shapes: docs/serving.md, `parlab.serving.grouped`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GroupedConfig:
    groups: int = 4  # G: split over 1, 2 or 4 devices
    width: int = 8  # c: channels per group
    n_blocks: int = 2
    classes: int = 10
    sensors: int = 1  # S input channels: 1 (one camera every group reads) or `groups` (one each)

    @property
    def channels(self) -> int:
        return self.groups * self.width

    def validate(self) -> None:
        for name in ("groups", "width", "n_blocks", "classes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GroupedConfig.{name}={value!r} must be an int >= 1")
        if self.sensors not in (1, self.groups):
            raise ValueError(f"GroupedConfig.sensors={self.sensors!r} must be 1 (one camera read by "
                             f"every group) or groups={self.groups} (one sensor per group)")


def full_masks(cfg: GroupedConfig) -> list[torch.Tensor]:
    """Every channel of every group reaches every group: the dense network."""
    return [torch.ones(cfg.groups, cfg.groups, cfg.width, dtype=torch.bool)
            for _ in range(cfg.n_blocks)]


def mask_matrix(mask: torch.Tensor) -> torch.Tensor:
    """(G, G, c) bool mask[s, d, j] → (G·c, G·c) float M[out, in] for the 1×1 mix weight. A float
    mask in [0, 1] (the relaxed gates of `parlab.serving.edge_search`) passes through, gradient and
    all."""
    groups, _, width = mask.shape
    keep = mask.clone()
    keep[torch.arange(groups), torch.arange(groups)] = True  # a group always reads itself
    per_pair = keep.float().permute(1, 0, 2)  # (d, s, j)
    m = per_pair.unsqueeze(1).expand(groups, width, groups, width)  # (d, i, s, j)
    return m.reshape(groups * width, groups * width)  # (out = d·c + i, in = s·c + j)


class GroupedNet(nn.Module):
    def __init__(self, cfg: GroupedConfig | None = None, seed: int = 0):
        super().__init__()
        cfg = cfg or GroupedConfig()
        cfg.validate()
        self.cfg = cfg
        torch.manual_seed(seed)
        c = cfg.channels
        self.stem = nn.Conv2d(cfg.sensors, c, 3, padding=1, groups=cfg.sensors)  # (G·c, 1, 3, 3)
        self.mix = nn.ModuleList(nn.Conv2d(c, c, 1) for _ in range(cfg.n_blocks))
        self.conv = nn.ModuleList(nn.Conv2d(c, c, 3, padding=1, groups=cfg.groups)
                                  for _ in range(cfg.n_blocks))
        self.head = nn.Linear(c, cfg.classes)
        for b, mask in enumerate(full_masks(cfg)):
            self.register_buffer(f"mask{b}", mask)

    @property
    def masks(self) -> list[torch.Tensor]:
        return [getattr(self, f"mask{b}") for b in range(self.cfg.n_blocks)]

    def set_masks(self, masks: list[torch.Tensor]) -> None:
        if len(masks) != self.cfg.n_blocks:
            raise ValueError(f"{len(masks)} masks for {self.cfg.n_blocks} blocks")
        for b, mask in enumerate(masks):
            getattr(self, f"mask{b}").copy_(mask)

    def mix_weight(self, b: int, gate: torch.Tensor | None = None) -> torch.Tensor:
        """Block b's 1×1 weight with the channels that do not travel zeroed: (G·c, G·c, 1, 1).
        `gate` (G, G, c) in [0, 1], when given, stands in for the block's bool mask."""
        mask = self.masks[b] if gate is None else gate
        return self.mix[b].weight * mask_matrix(mask)[:, :, None, None]

    def features(self, x, gates: list[torch.Tensor] | None = None):
        """The pooled features (B, G·c) before the head (`gates`: one per block, see mix_weight)."""
        h = F.max_pool2d(F.relu(self.stem(x)), 2)  # (B, G·c, 8, 8)
        for b in range(self.cfg.n_blocks):
            w = self.mix_weight(b, None if gates is None else gates[b])
            m = F.relu(F.conv2d(h, w, self.mix[b].bias))  # (B, G·c, H, W)
            h = F.avg_pool2d(h + F.relu(self.conv[b](m)), 2)  # (B, G·c, H/2, W/2)
        return h.mean(dim=(2, 3))  # (B, G·c)

    def forward(self, x, gates: list[torch.Tensor] | None = None):
        return self.head(self.features(x, gates))  # (B, classes)

    def loss(self, x, y):
        return F.cross_entropy(self(x), y)


def train_grouped(net: GroupedNet, x, y, steps: int = 300, batch: int = 64, lr: float = 3e-3,
                  seed: int = 0, penalty=None) -> list[float]:
    """Adam on random batches of (x, y); returns the losses. The masks stay as they are.
    `penalty(net)`: a term added to the loss (a sparsity regulariser, `parlab.serving.masks`).
    Runs on one intra-op thread, as every rank does: on a shared machine more threads only
    contend, and one thread gives the same sums every time."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    losses, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            rows = torch.randint(0, len(y), (batch,), generator=g)
            loss = net.loss(x[rows], y[rows])
            if penalty is not None:
                loss = loss + penalty(net)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    finally:
        torch.set_num_threads(threads)
    return losses


@torch.no_grad()
def accuracy(net: GroupedNet, x, y) -> float:
    return (net(x).argmax(dim=1) == y).float().mean().item()
