"""Which channels cross devices, by our saliency ranking (a baseline of ours, not the paper's
method), then fine-tuning with the mask in place. Lin & Wang ("Communication-Efficient Separable
Neural Network for Distributed Inference on Edge Devices", 2021) instead search the transmission
policy with neural architecture search; the latency-priced search of ours is `edge_search`.

    score[b][s, d, j] = E|h_b[:, s·c + j]| · ‖W_b[d·c:(d+1)·c, s·c + j]‖₂

(how much group d's mix in block b can feel channel j of group s); `search` keeps the highest `density`
fraction per block, blind to the link; `finetune` adapts the weights to the mask. In full:
docs/serving.md, `parlab.serving.masks`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from parlab.serving.grouped import GroupedConfig, GroupedNet, train_grouped


@torch.no_grad()
def block_inputs(net: GroupedNet, x) -> list[torch.Tensor]:
    """The input of every block's mix (B, G·c, H, W) on images `x`, with the net's current masks."""
    inputs = []
    h = F.max_pool2d(F.relu(net.stem(x)), 2)  # (B, G·c, 8, 8)
    for b in range(net.cfg.n_blocks):
        inputs.append(h)
        m = F.relu(F.conv2d(h, net.mix_weight(b), net.mix[b].bias))  # (B, G·c, H, W)
        h = F.avg_pool2d(h + F.relu(net.conv[b](m)), 2)  # (B, G·c, H/2, W/2)
    return inputs


@torch.no_grad()
def saliency(net: GroupedNet, x) -> list[torch.Tensor]:
    """score[b] (G, G, c): the saliency of each transfer (s → d, channel j); the diagonal is +inf."""
    groups, width = net.cfg.groups, net.cfg.width
    scores = []
    for b, h in enumerate(block_inputs(net, x)):
        magnitude = h.abs().mean(dim=(0, 2, 3)).view(groups, width)  # (s, j)
        w = net.mix[b].weight[:, :, 0, 0].view(groups, width, groups, width)  # (d, i, s, j)
        reach = w.pow(2).sum(dim=1).sqrt().permute(1, 0, 2)  # (s, d, j)
        score = magnitude[:, None, :] * reach  # (s, d, j)
        score[torch.arange(groups), torch.arange(groups)] = math.inf
        scores.append(score)
    return scores


def transfer_norms(net: GroupedNet) -> list[torch.Tensor]:
    """‖W_b[d·c:(d+1)·c, s·c + j]‖₂ for every transfer (s, d, j) of every block: (G, G, c) each."""
    groups, width = net.cfg.groups, net.cfg.width
    norms = []
    for mix in net.mix:
        w = mix.weight[:, :, 0, 0].view(groups, width, groups, width)  # (d, i, s, j)
        norms.append(w.pow(2).sum(dim=1).add(1e-12).sqrt().permute(1, 0, 2))  # (s, d, j)
    return norms


def group_lasso(strength: float):
    """A penalty for `grouped.train_grouped`: strength × Σ over cross-group transfers of their weight norm
    (a group lasso: whole transfers go to zero, so the network learns which ones it can drop)."""
    def penalty(net: GroupedNet):
        groups = net.cfg.groups
        cross = ~torch.eye(groups, dtype=torch.bool)  # (s, d)
        return strength * sum(n[cross].sum() for n in transfer_norms(net))
    return penalty


def check_density(density) -> float:
    if isinstance(density, bool) or not isinstance(density, (int, float)) or not 0 <= density <= 1:
        raise ValueError(f"density={density!r} must be a number in [0, 1]: the fraction of "
                         "cross-group channel transfers kept")
    return float(density)


def search(net: GroupedNet, x, density: float) -> list[torch.Tensor]:
    """Masks keeping the most salient `density` fraction of each block's cross-group transfers."""
    density = check_density(density)
    groups = net.cfg.groups
    cross = ~torch.eye(groups, dtype=torch.bool)[:, :, None].expand(groups, groups, net.cfg.width)
    masks = []
    for score in saliency(net, x):
        total = int(cross.sum())
        keep = 0 if density == 0 else max(1, round(density * total))
        mask = torch.zeros_like(cross)
        if keep:
            order = torch.argsort(score[cross], descending=True)[:keep]  # indices among cross
            flat = torch.zeros(total, dtype=torch.bool)
            flat[order] = True
            mask[cross] = flat
        masks.append(mask | ~cross)  # a group always reads itself
    return masks


def kept_fraction(masks: list[torch.Tensor]) -> float:
    """The fraction of cross-group transfers the masks keep (all blocks)."""
    groups = masks[0].shape[0]
    cross = ~torch.eye(groups, dtype=torch.bool)[:, :, None]
    kept = sum(int((m & cross).sum()) for m in masks)
    return kept / sum(int(cross.expand_as(m).sum()) for m in masks)


@torch.no_grad()
def apply(net: GroupedNet, x, masks: list[torch.Tensor]) -> GroupedNet:
    """A copy of `net` with `masks` set, each channel that no longer arrives replaced by its mean
    over images `x`, folded into the receiving mix's bias: b_d += Σ_dropped W[d, s·c+j]·E[h_sj]."""
    import copy

    tuned = copy.deepcopy(net)
    for b, (h, mask) in enumerate(zip(block_inputs(net, x), masks)):
        mean = h.mean(dim=(0, 2, 3))  # (G·c,) each channel's mean input to the mix
        before = net.mix_weight(b)[:, :, 0, 0]  # (G·c, G·c) with the old mask
        tuned.set_masks([*tuned.masks[:b], mask, *tuned.masks[b + 1:]])
        dropped = before - tuned.mix_weight(b)[:, :, 0, 0]  # (G·c, G·c) what no longer arrives
        tuned.mix[b].bias += dropped @ mean  # (G·c,)
    return tuned


def finetune(net: GroupedNet, x, y, masks: list[torch.Tensor], steps: int = 60,
             seed: int = 1, **options) -> GroupedNet:
    """A copy of `net` with `masks` applied (`apply`) and trained `steps` more steps."""
    tuned = apply(net, x[:256], masks)
    if steps:
        train_grouped(tuned, x, y, steps=steps, seed=seed, **options)
    return tuned


def rank_groups(groups: int, world_size: int, rank: int) -> range:
    """The groups rank `rank` holds: G/N consecutive groups."""
    per = groups // world_size
    return range(rank * per, (rank + 1) * per)


def send_channels(mask: torch.Tensor, world_size: int) -> list[list[list[int]]]:
    """plan[a][b]: the channels (global index s·c + j, ascending) rank a sends rank b before one
    block's mix — every channel of a's groups that some group of b reads; [] when a == b."""
    groups, _, width = mask.shape
    plan = []
    for a in range(world_size):
        row = []
        for b in range(world_size):
            if a == b:
                row.append([])
                continue
            wanted = [s * width + j for s in rank_groups(groups, world_size, a) for j in range(width)
                      if any(mask[s, d, j] for d in rank_groups(groups, world_size, b))]
            row.append(wanted)
        plan.append(row)
    return plan


def learn(x, y, cfg: GroupedConfig | None = None, steps: int = 300, lasso: float = 0.01,
          seed: int = 0, lr: float = 5e-3) -> GroupedNet:
    """A grouped network trained with the group-lasso penalty on its transfers (`lasso` = 0: plain
    training): it learns which cross-group channels it can do without, before `search` picks."""
    net = GroupedNet(cfg or GroupedConfig(), seed)
    train_grouped(net, x, y, steps=steps, lr=lr, seed=seed, penalty=group_lasso(lasso) if lasso else None)
    return net
