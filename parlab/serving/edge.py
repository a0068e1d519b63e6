"""Distributed inference on edge devices: the grouped network split by groups over ranks, the model
parallelism of Lin & Wang ("Communication-Efficient Separable Neural Network for Distributed
Inference on Edge Devices", 2021; the groups are ResNeXt's, Xie et al., CVPR 2017).

Rank r of N holds G/N consecutive groups (stem rows, every block's mix rows and grouped conv,
head columns). Features cross devices only before each block's mix (`ExchangeChannels`: one uneven
all-to-all of exactly the channels the mask sends, `masks.send_channels`; the same arithmetic as
one process) and at the head (partial logits summed on rank 0). `run_edge(net, images,
world_size, link=, clock=)` runs it through `parlab.core.launch` and returns rank 0's logits, the
ledger and each request's latency: on `clock="wall"` this CPU's, on a paced clock (an edge device of
`parlab.core.link.EDGE_DEVICES`, e.g. the Jetson Nano) its virtual time — compute priced by the
roofline, each message α + bytes/β of the real link. In full: docs/serving.md, `parlab.serving.edge`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from parlab.core import link as link_mod
from parlab.core.comm import Comm
from parlab.core.launch import launch
from parlab.serving.grouped import GroupedNet
from parlab.serving.masks import rank_groups, send_channels

# Real links between edge devices (undilated α, β; sources in `parlab.core.link`): the Jetson
# Nano's own Gigabit Ethernet port, Wi-Fi 802.11n and Bluetooth 5 LE.
EDGE_LINKS = {"loopback": None,
              "1GbE": link_mod.real("1GbE"),
              "Wi-Fi": link_mod.WIRELESS["802.11n"],
              "Bluetooth": link_mod.WIRELESS["BLE-2M"]}
EDGE_DEVICE = "Jetson-Nano"  # the paced clock of Part B (`parlab.core.link.EDGE_DEVICES`)


def edge_clock(clock="wall"):
    """`clock=` of `run_edge`: "wall", a key of `parlab.core.link.EDGE_DEVICES`, or anything
    `parlab.core.clock.resolve` takes."""
    from parlab.core import clock as clocks

    if isinstance(clock, str) and clock in link_mod.EDGE_DEVICES:
        return clocks.Clock(link_mod.EDGE_DEVICES[clock])
    return clocks.resolve(clock)


def resolve_link(link):
    """An EDGE_LINKS name, a parlab.core.link preset or Link, or None."""
    if isinstance(link, str) and link in EDGE_LINKS:
        return EDGE_LINKS[link]
    return link_mod.resolve(link)


class ExchangeChannels(torch.autograd.Function):
    """Forward: one uneven all-to-all; rank a sends rank b the channels plan[a][b] of its features
    (B, len, H, W) and receives plan[b][a] from each b; returns (B, G·c, H, W) holding its own
    channels and the received ones at their global positions, zeros for channels that did not
    travel. Backward: nothing moves — inference only (the network trains in one process)."""

    @staticmethod
    def forward(ctx, h, comm: Comm, plan, own: list[int], channels: int, phase: str):
        batch, _, height, width = h.shape
        rank = comm.rank
        local = {ch: i for i, ch in enumerate(own)}
        inputs = [h[:, [local[ch] for ch in plan[rank][b]]] for b in range(comm.size)]  # (B, len, H, W)
        shapes = [(batch, len(plan[a][rank]), height, width) for a in range(comm.size)]
        received = comm.all_to_all(inputs, output_shapes=shapes, phase=phase)  # N × (B, len, H, W)
        full = h.new_zeros(batch, channels, height, width)  # (B, G·c, H, W)
        full[:, own] = h
        for a, part in enumerate(received):
            if a != rank and plan[a][rank]:
                full[:, plan[a][rank]] = part
        return full

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("ExchangeChannels is for inference: train the network in one process")


class EdgeShard:
    """Rank `rank`'s part of `net`: its groups' weights, and its forward with the exchanges."""

    def __init__(self, net: GroupedNet, comm: Comm):
        cfg, n = net.cfg, comm.size
        self.cfg, self.comm = cfg, comm
        self.groups = rank_groups(cfg.groups, n, comm.rank)
        self.own = [g * cfg.width + j for g in self.groups for j in range(cfg.width)]  # channels
        rows = self.own
        with torch.no_grad():
            self.stem = (net.stem.weight[rows], net.stem.bias[rows])  # (k·c, 1, 3, 3), (k·c,)
            self.mix = [(net.mix_weight(b)[rows], net.mix[b].bias[rows]) for b in range(cfg.n_blocks)]
            self.conv = [(net.conv[b].weight[rows], net.conv[b].bias[rows]) for b in range(cfg.n_blocks)]
            self.head = (net.head.weight[:, rows], net.head.bias)  # (classes, k·c), (classes,)
        self.plans = [send_channels(mask, n) for mask in net.masks]

    @torch.no_grad()
    def forward(self, x):
        """Rank 0: the logits (B, classes); other ranks: None."""
        if self.cfg.sensors > 1:  # each group reads its own sensor: this rank's channels of x
            x = x[:, list(self.groups)]  # (B, k, 16, 16)
        h = F.max_pool2d(F.relu(F.conv2d(x, *self.stem, padding=1, groups=x.shape[1])),
                         2)  # (B, k·c, 8, 8)
        for b in range(self.cfg.n_blocks):
            if any(map(any, self.plans[b])):  # every rank holds the same plans: all skip or none
                full = ExchangeChannels.apply(h, self.comm, self.plans[b], self.own,
                                              self.cfg.channels, f"block {b}")  # (B, G·c, H, W)
            else:  # no transfer crosses a device before this mix: no message, no round
                full = h.new_zeros(h.shape[0], self.cfg.channels, *h.shape[2:])  # (B, G·c, H, W)
                full[:, self.own] = h
            m = F.relu(F.conv2d(full, *self.mix[b]))  # (B, k·c, H, W) this rank's groups
            h = h + F.relu(F.conv2d(m, *self.conv[b], padding=1, groups=len(self.groups)))
            h = F.avg_pool2d(h, 2)  # (B, k·c, H/2, W/2)
        partial = h.mean(dim=(2, 3)) @ self.head[0].T  # (B, classes) this rank's share
        if self.comm.rank != 0:
            self.comm.send(partial, 0, phase="head")  # (B, classes) to the sink device
            return None
        logits = partial.clone()
        for src in range(1, self.comm.size):
            logits += self.comm.recv(torch.empty_like(partial), src, phase="head")  # (B, classes)
        return logits + self.head[1]


@dataclass
class EdgeResult:
    logits: torch.Tensor  # (M, classes) rank 0's, for every image
    ledger: list[dict]  # every rank's records (one request's worth per repeat)
    latencies: list[float]  # seconds of each timed request, rank 0 (start after a barrier)
    world_size: int
    batch: int
    link: object
    clock: object = None  # parlab.core.clock.Clock: this CPU, raw, or an edge device's paced time
    pace: dict | None = None  # paced: rank 0's pacer stats (compute priced, kernels, ...)

    @property
    def latency(self) -> float:
        """The median request's seconds."""
        return statistics.median(self.latencies)

    def bytes_per_rank(self, repeat: int | None = 0) -> list[int]:
        """Bytes each rank sent in request `repeat` (None: all), barriers aside."""
        totals = [0] * self.world_size
        for r in self.ledger:
            if r.get("request") == repeat or repeat is None:
                totals[r["rank"]] += r["bytes_sent"]
        return totals


def check_world_size(net: GroupedNet, world_size) -> None:
    groups = net.cfg.groups
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1 \
            or groups % world_size:
        raise ValueError(f"world_size={world_size!r} must be an int >= 1 dividing the "
                         f"{groups} groups of the network")


def run_edge(net: GroupedNet, images: torch.Tensor, world_size: int = 2, link=None,
             batch: int | None = None, repeats: int = 1, timeout: float = 60.0,
             clock="wall") -> EdgeResult:
    """Classify `images` (M, S, 16, 16) with `net` split over `world_size` ranks, in requests of
    `batch` images (default: all at once); the whole set is sent `repeats` times (latency samples).
    `clock`: "wall" (this CPU, raw) or a paced device ("Jetson-Nano": `edge_clock`), whose
    latencies are virtual seconds, the same on every run."""
    check_world_size(net, world_size)
    sensors = net.cfg.sensors
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] != sensors:
        raise ValueError(f"images of shape {getattr(images, 'shape', None)} must be "
                         f"(M, {sensors}, H, W): one channel per sensor of the network")
    batch = len(images) if batch is None else batch
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= len(images):
        raise ValueError(f"batch={batch!r} must be an int in [1, {len(images)}]")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be an int >= 1")
    from parlab.core.clock import pace_link

    paced = edge_clock(clock)
    link = pace_link(resolve_link(link), paced)  # paced: a preset stands for its real link
    returned = launch(_edge_rank, world_size, net, images, batch, repeats, paced, timeout=timeout,
                      link=link)
    logits, latencies = returned[0]["logits"], returned[0]["latencies"]
    ledger = [rec for out in returned for rec in out["ledger"]]
    return EdgeResult(logits, ledger, latencies, world_size, batch, link, paced,
                      returned[0]["pace"])


def _edge_rank(rank: int, world_size: int, net: GroupedNet, images, batch: int, repeats: int,
               paced=None):
    from parlab.core.pacer import Pacer
    from parlab.core.trace import Timeline

    paced = paced if paced is not None and paced.paced else None
    timeline = Timeline(rank, Pacer(paced) if paced is not None else None)
    comm = Comm(None, timeline=timeline)  # the launch's link: real, so the paced clock prices it
    shard = EdgeShard(net, comm)
    requests = [images[i:i + batch] for i in range(0, len(images), batch)]  # (batch, S, 16, 16) each
    outputs, latencies, request = [], [], 0
    for repeat in range(repeats):
        for x in requests:
            comm.barrier(phase="start")
            t0 = timeline.now()  # paced: virtual seconds; else time.perf_counter()
            first = len(comm.ledger.records)
            with timeline.span("request"):  # paced: its kernels priced on the device's roofline
                logits = shard.forward(x)
            for record in comm.ledger.records[first:]:
                record["request"] = request
            latencies.append(timeline.now() - t0)
            if repeat == 0 and logits is not None:
                outputs.append(logits)
            request += 1
    records = [r for r in comm.ledger.records if r["op"] != "barrier"]
    return {"logits": torch.cat(outputs) if outputs else None, "latencies": latencies,
            "ledger": records, "pace": timeline.pacer.stats() if paced is not None else None}
