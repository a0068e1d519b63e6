"""Serving the video denoiser on cp ranks: sequence parallelism (exact) vs latent parallelism (approx).

Paper: Wu et al., "Communication-Efficient Serving for Video Diffusion Models with Latent
Parallelism" (2025, arXiv 2512.07350): split the 3D latent along T, H or W, rotate the split
dimension every denoising step, give each part an overlapping halo; up to 97% less communication
at comparable quality. Sequence parallelism is ring attention (Liu et al. 2023) or Ulysses
(Jacobs et al. 2023) applied to the patch tokens.

* "sp": tokens split for the whole run; every attention layer communicates; exact.
* "lp": at step s the latent is cut along axis s mod 3; each rank runs the whole model on its slab
  plus `halo` patches, with no communication inside; between steps one all-to-all of latent
  patches. Approximate; exact once the halo covers the latent.

Reconstruction: "crop" (keep the slab) or "blend" (the paper's position-aware reconstruction; the
linear-ramp weights are our assumption, its exact function was not in what we could read):
docs/context_parallel.md, `parlab.context_parallel.latent_parallel`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from parlab.context_parallel import ring_attention as ring
from parlab.context_parallel.ulysses import ulysses_attention
from parlab.context_parallel.video_denoiser import (
    TinyVideoDenoiser,
    VideoConfig,
    box_ids,
    initial_noise,
    noise_levels,
)
from parlab.core.comm import Comm
from parlab.core.cost import shard_bounds
from parlab.core.launch import launch

MODES = ("sp", "lp")
RECONSTRUCTIONS = ("crop", "blend")
METHODS = ("ring", "ulysses")
AXES = ("T", "H", "W")  # dims 1, 2, 3 of a (B, T, H, W, C) latent


# ----------------------------------------------------------------------------- the latent split
def axis_sizes(cfg: VideoConfig) -> tuple[int, int, int]:
    return (cfg.frames, cfg.height, cfg.width)


def split_axis(step: int) -> int:
    """The axis (0 = T, 1 = H, 2 = W) the latent is cut along at denoising step `step`."""
    return step % 3


def core(cfg: VideoConfig, axis: int, rank: int, cp: int) -> tuple[int, int]:
    """[lo, hi) of rank's slab along `axis` (sizes differ by at most one)."""
    return shard_bounds(axis_sizes(cfg)[axis], cp)[rank]


def region(cfg: VideoConfig, axis: int, rank: int, cp: int, halo: int) -> tuple[int, int]:
    """Rank's slab widened by `halo` patches each side, clipped to the latent."""
    lo, hi = core(cfg, axis, rank, cp)
    return max(0, lo - halo), min(axis_sizes(cfg)[axis], hi + halo)


def box(cfg: VideoConfig, bounds: dict[int, tuple[int, int]]) -> list[tuple[int, int]]:
    """[(lo, hi)] along T, H, W: the axes in `bounds` (axis -> (lo, hi)) cut, the others whole."""
    return [bounds.get(axis, (0, n)) for axis, n in enumerate(axis_sizes(cfg))]


def take(x, b):  # (B, T, H, W, C) -> the box
    return x[:, b[0][0]:b[0][1], b[1][0]:b[1][1], b[2][0]:b[2][1]]


def box_shape(cfg: VideoConfig, b) -> tuple[int, ...]:
    return (cfg.batch,) + tuple(hi - lo for lo, hi in b) + (cfg.channels,)  # (B, t, h, w, C)


def volume(b) -> int:
    return (b[0][1] - b[0][0]) * (b[1][1] - b[1][0]) * (b[2][1] - b[2][0])


def sent_box(cfg: VideoConfig, axis: int, rank: int, cp: int, halo: int, reconstruction: str):
    """[lo, hi) along `axis` of what `rank` sends after a step cut along `axis`: its slab (crop) or
    its whole region, slab and halos (blend)."""
    if reconstruction == "crop":
        return core(cfg, axis, rank, cp)
    return region(cfg, axis, rank, cp, halo)


def target(cfg: VideoConfig, step: int, rank: int, cp: int, halo: int):
    """{axis: (lo, hi)} of what `rank` holds after the exchange that follows `step`: its next
    slab-plus-halo along the next axis, or, after the last step, its slab along this axis (the
    output's layout)."""
    if step >= cfg.denoise_steps - 1:
        a = split_axis(step)
        return {a: core(cfg, a, rank, cp)}
    b = split_axis(step + 1)
    return {b: region(cfg, b, rank, cp, halo)}


def lp_pieces(cfg: VideoConfig, step: int, src: int, cp: int, halo: int,
              reconstruction: str = "crop") -> list[list[tuple]]:
    """Boxes rank `src` sends after `step`, one per rank j: its sent box along this step's axis
    (`sent_box`) ∩ j's target (`target`). Along one axis the intersection is of intervals."""
    a = split_axis(step)
    mine = sent_box(cfg, a, src, cp, halo, reconstruction)
    pieces = []
    for j in range(cp):
        bounds = dict(target(cfg, step, j, cp, halo))
        if a in bounds:  # the last step: both along a
            lo, hi = max(mine[0], bounds[a][0]), min(mine[1], bounds[a][1])
            bounds[a] = (lo, max(lo, hi))
        else:
            bounds[a] = mine
        pieces.append(box(cfg, bounds))
    return pieces


def blend_weights(cfg: VideoConfig, axis: int, rank: int, cp: int, halo: int) -> torch.Tensor:
    """Rank's reconstruction weights along `axis`, one per patch of its region: (|region|,).

    Raw weight of patch p in a region [lo, hi): min(halo+1, p−lo+1, hi−p), the two distances
    counted only at borders that are cuts (not the latent's own edge), so halo+1 over the slab and
    1..halo across a halo, falling toward the cut. Divided by the sum over all ranks whose region
    holds p: a partition of unity (position-aware reconstruction; the linear ramp is our
    assumption, see the module docstring)."""
    n = axis_sizes(cfg)[axis]

    def raw(r):
        lo, hi = region(cfg, axis, r, cp, halo)
        p = torch.arange(lo, hi, dtype=torch.float64)
        w = torch.full_like(p, float(halo + 1))
        if lo > 0:
            w = torch.minimum(w, p - lo + 1)
        if hi < n:
            w = torch.minimum(w, hi - p)
        return lo, hi, w

    total = torch.zeros(n, dtype=torch.float64)
    for r in range(cp):
        lo, hi, w = raw(r)
        total[lo:hi] += w
    lo, hi, w = raw(rank)
    return (w / total[lo:hi]).float()


# ----------------------------------------------------------------------------- in each rank
def _sp_rank(rank, world_size, cfg: VideoConfig, method: str, seed: int):
    comm = Comm(None)
    model = TinyVideoDenoiser(cfg, seed)
    positions = ring.all_positions("contiguous", world_size, cfg.tokens)
    mine = positions[rank]  # (N/cp,)
    if method == "ring":
        def attention(q, k, v):
            return ring.ring_attention(q, k, v, comm, positions, causal=False,
                                       bias_fn=model.bias)
    else:
        def attention(q, k, v):
            return ulysses_attention(q, k, v, comm, positions, causal=False, bias_fn=model.bias)
    x = initial_noise(cfg, seed).reshape(cfg.batch, -1, cfg.channels)[:, mine]  # (B, N/cp, C)
    sigmas, step_s = noise_levels(cfg), []
    with torch.no_grad():
        for s in range(cfg.denoise_steps):
            t0 = time.perf_counter()
            with comm.ledger.label(step=s):
                v = model(x, mine, sigmas[s], attention)  # (B, N/cp, C)
            x = x + (sigmas[s + 1] - sigmas[s]) * v
            step_s.append(time.perf_counter() - t0)
    return {"ids": mine, "x": x, "ledger": comm.ledger.records, "step_s": step_s}


def _lp_rank(rank, world_size, cfg: VideoConfig, halo: int, seed: int, reconstruction: str):
    comm, cp = Comm(None), world_size
    model = TinyVideoDenoiser(cfg, seed)
    sigmas, step_s = noise_levels(cfg), []
    local = take(initial_noise(cfg, seed), box(cfg, {0: region(cfg, 0, rank, cp, halo)}))
    last = cfg.denoise_steps - 1
    with torch.no_grad():
        for s in range(cfg.denoise_steps):
            t0 = time.perf_counter()
            a = split_axis(s)
            reg, (lo, hi) = region(cfg, a, rank, cp, halo), core(cfg, a, rank, cp)
            bounds = box(cfg, {a: reg})
            ids = box_ids(cfg, *bounds)  # (|region|,): the true positions of the region
            v = model(local.reshape(cfg.batch, -1, cfg.channels), ids, sigmas[s],
                      model.local_attention(ids)).reshape(local.shape)  # (B, t, h, w, C)
            updated = local + (sigmas[s + 1] - sigmas[s]) * v  # (B, t, h, w, C): the region
            if reconstruction == "crop":
                keep = [slice(None)] * 5
                keep[a + 1] = slice(lo - reg[0], hi - reg[0])  # the slab inside the region
                mine = updated[tuple(keep)]  # (B, ...) the slab
            else:
                shape = [1] * 5
                shape[a + 1] = -1
                mine = updated * blend_weights(cfg, a, rank, cp, halo).view(shape)  # weighted
            if s < last or reconstruction == "blend":
                with comm.ledger.label(step=s, phase="lp-exchange"):
                    local = _exchange(cfg, comm, mine, s, halo, reconstruction)
            else:
                local = mine
            step_s.append(time.perf_counter() - t0)
    return {"slab": local, "bounds": box(cfg, {a: (lo, hi)}), "ledger": comm.ledger.records,
            "step_s": step_s}


def _exchange(cfg, comm, mine, step, halo, reconstruction):
    """One all-to-all: my sent box's part of every rank's target (`lp_pieces`); returns my
    target. Crop: the pieces tile my target along this step's axis (concatenated). Blend: they
    overlap where regions did, already weighted: summed in place."""
    cp, a = comm.size, split_axis(step)
    offset = sent_box(cfg, a, comm.rank, cp, halo, reconstruction)[0]
    pieces = []
    for p in lp_pieces(cfg, step, comm.rank, cp, halo, reconstruction):
        rel = [(lo - (offset if i == a else 0), hi - (offset if i == a else 0))
               for i, (lo, hi) in enumerate(p)]
        pieces.append(take(mine, rel))  # (B, |sent ∩ target_j|, C) as a box
    boxes = [lp_pieces(cfg, step, i, cp, halo, reconstruction)[comm.rank] for i in range(cp)]
    received = comm.all_to_all(pieces, output_shapes=[box_shape(cfg, b) for b in boxes])
    if reconstruction == "crop":
        return torch.cat(received, dim=a + 1)  # (B, ...) my target along b, whole along a
    mine_box = box(cfg, target(cfg, step, comm.rank, cp, halo))
    out = torch.zeros(box_shape(cfg, mine_box))  # (B, t, h, w, C): my target
    start = mine_box[a][0]
    for b, piece in zip(boxes, received):
        index = [slice(None)] * 5
        index[a + 1] = slice(b[a][0] - start, b[a][1] - start)
        out[tuple(index)] += piece  # weights sum to one at every patch
    return out


# ----------------------------------------------------------------------------- in the parent
@dataclass
class ServeResult:
    output: torch.Tensor  # (B, T, H, W, C), stitched
    ledger: list[dict]
    step_s: list[list[float]]  # per rank, per denoising step
    wall_s: float
    mode: str
    world_size: int

    def bytes_per_step(self) -> list[float]:
        """Mean bytes each rank sent per denoising step."""
        steps = max(len(s) for s in self.step_s)
        sent = [0] * self.world_size
        for r in self.ledger:
            sent[r["rank"]] += r["bytes_sent"]
        return [b / steps for b in sent]


def validate(cfg: VideoConfig, mode: str, world_size: int, halo: int = 0, method: str = "ulysses",
             reconstruction: str = "crop"):
    cfg.validate()
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} must be one of {MODES}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be an int >= 1")
    if mode == "sp":
        if method not in METHODS:
            raise ValueError(f"method={method!r} must be one of {METHODS}")
        if cfg.tokens % (2 * world_size):
            raise ValueError(f"T·H·W={cfg.tokens} tokens are not divisible by 2·world_size="
                             f"{2 * world_size}")
        if method == "ulysses" and cfg.n_head % world_size:
            raise ValueError(f"n_head={cfg.n_head} is not divisible by world_size={world_size}")
    else:
        small = {a: n for a, n in zip(AXES, axis_sizes(cfg)) if n < world_size}
        if small:
            raise ValueError(f"latent axes {small} are shorter than world_size={world_size}: "
                             "every rank needs a slab along each rotating axis")
        if isinstance(halo, bool) or not isinstance(halo, int) or halo < 0:
            raise ValueError(f"halo={halo!r} must be an int >= 0")
        if reconstruction not in RECONSTRUCTIONS:
            raise ValueError(f"reconstruction={reconstruction!r} must be one of {RECONSTRUCTIONS}")


def serve(mode: str, cfg: VideoConfig | None = None, world_size: int = 2, halo: int = 0,
          method: str = "ulysses", seed: int = 0, link=None, timeout: float = 120.0,
          reconstruction: str = "crop") -> ServeResult:
    """Denoise one latent on `world_size` ranks with sequence ("sp") or latent ("lp") parallelism
    (LP's overlaps reconstructed by `reconstruction`, "crop" or "blend")."""
    cfg = cfg or VideoConfig()
    validate(cfg, mode, world_size, halo, method, reconstruction)
    t0 = time.perf_counter()
    if mode == "sp":
        outs = launch(_sp_rank, world_size, cfg, method, seed, timeout=timeout, link=link)
        flat = torch.empty(cfg.batch, cfg.tokens, cfg.channels)
        for out in outs:
            flat[:, out["ids"]] = out["x"]
        output = flat.reshape(cfg.shape)
    else:
        outs = launch(_lp_rank, world_size, cfg, halo, seed, reconstruction, timeout=timeout,
                      link=link)
        output = torch.empty(cfg.shape)
        for out in outs:
            b = out["bounds"]
            output[:, b[0][0]:b[0][1], b[1][0]:b[1][1], b[2][0]:b[2][1]] = out["slab"]
    wall = time.perf_counter() - t0
    return ServeResult(output, [r for o in outs for r in o["ledger"]], [o["step_s"] for o in outs],
                       wall, mode, world_size)


def relative_error(output: torch.Tensor, reference: torch.Tensor) -> float:
    """‖output − reference‖ / ‖reference‖."""
    return ((output - reference).norm() / reference.norm()).item()
