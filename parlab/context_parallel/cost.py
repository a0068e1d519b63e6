"""Closed forms for chapter 06: bytes each rank sends for context-parallel attention, the causal
work per ring step, and the latent-parallel serving traffic.

* Ring attention (Liu, Zaharia & Abbeel, ICLR 2024, §3): per layer each rank passes its K and V
  block, 2·B·nh·(T/cp)·hs elements, cp−1 times forward and dK, dV cp−1 times backward
  (`ring_bytes`); the paper's recomputing backward sends K, V again and dK, dV cp times
  (`ring_recompute_bytes`). Causal work per rank and ring step, contiguous or zig-zag (Brandon et
  al. 2023; Llama 3 §3.3.2): `causal_work`, `critical_path`.
* Ulysses (Jacobs et al. 2023, §3.1): 4 all-to-alls per layer forward and 4 backward, each
  sending (cp−1)/cp of a (B, nh, T/cp, hs) tensor (`ulysses_bytes`). All-gather (Llama 3 §3.3.2):
  `allgather_bytes`; Ulysses × ring (USP, Fang & Zhao 2024): `usp_bytes` (forward, priced),
  `usp_messages` / `usp_step_bytes` (a training step, what `cp-usp` sends).
* Serving the video denoiser (Wu et al. 2025): sequence parallelism's bytes per denoising step
  (`sp_bytes`), latent parallelism's patch exchange with its overlaps cropped or blended
  (`lp_bytes`) and its compute per rank (`lp_compute_fraction`).
"""

from __future__ import annotations

from parlab.context_parallel.latent_parallel import axis_sizes, core, region, split_axis
from parlab.context_parallel.ring_attention import _causal_relation, layout_chunks
from parlab.context_parallel.video_denoiser import VideoConfig
from parlab.core.messages import Message, bytes_by


# ----------------------------------------------------------------------------- training: attention
def ring_messages(batch: int, n_head: int, seq_len: int, head_dim: int, cp: int, n_layer: int,
                  itemsize: int = 4, recompute: str = "none", pipelined: bool = False) -> list:
    """The ring's point-to-point messages one rank sends per step (Liu et al. 2023, §3): each
    layer passes its K and V block, 2·B·nh·(T/cp)·hs elements, cp−1 times forward and dK, dV
    cp−1 times backward. recompute "checkpoint": a checkpointed block's recomputed forward sends
    K, V round the ring again; "ring": the paper's recomputing backward sends K, V cp−1 times
    and dK, dV cp times."""
    if recompute not in ("none", "checkpoint", "ring"):
        raise ValueError(f"recompute={recompute!r} must be none, checkpoint or ring")
    if cp == 1:
        return []
    block = 2 * batch * n_head * (seq_len // cp) * head_dim
    forward = (cp - 1) * n_layer * (2 if recompute == "checkpoint" else 1)
    backward = (2 * cp - 1 if recompute == "ring" else cp - 1) * n_layer
    return [Message("cp", "p2p", cp, block, forward, pipelined, itemsize, "cp-forward"),
            Message("cp", "p2p", cp, block, backward, pipelined, itemsize, "cp-backward")]


def ulysses_messages(batch: int, n_head: int, seq_len: int, head_dim: int, cp: int,
                     n_layer: int, itemsize: int = 4, pipelined: bool = False) -> list:
    """Ulysses' all-to-alls one rank issues per step (Jacobs et al. 2023, §3.1): 4 per layer
    forward (q, k, v, out) and 4 backward, each sending (cp−1)/cp of a (B, nh, T/cp, hs) shard."""
    if cp == 1:
        return []
    leaves = batch * n_head * (seq_len // cp) * head_dim * (cp - 1) // cp
    return [Message("cp", "all_to_all", cp, leaves, 4 * n_layer, pipelined, itemsize, phase)
            for phase in ("cp-forward", "cp-backward")]


def _phases(msgs) -> dict:
    return {"cp-forward": 0, "cp-backward": 0, **bytes_by(msgs)}


def ring_bytes(batch: int, n_head: int, seq_len: int, head_dim: int, cp: int, n_layer: int,
               itemsize: int = 4) -> dict:
    """Bytes one rank sends per training step for attention: `ring_messages` summed."""
    return {**_phases(ring_messages(batch, n_head, seq_len, head_dim, cp, n_layer, itemsize)),
            "messages_per_layer": 2 * (cp - 1)}


def ring_recompute_bytes(batch: int, n_head: int, seq_len: int, head_dim: int, cp: int,
                         n_layer: int, itemsize: int = 4) -> dict:
    """Bytes one rank sends per training step with the paper's recomputing backward:
    `ring_messages(recompute="ring")` summed."""
    return _phases(ring_messages(batch, n_head, seq_len, head_dim, cp, n_layer, itemsize, "ring"))


def ulysses_bytes(batch: int, n_head: int, seq_len: int, head_dim: int, cp: int, n_layer: int,
                  itemsize: int = 4) -> dict:
    """Bytes one rank sends per training step: `ulysses_messages` summed."""
    return {**_phases(ulysses_messages(batch, n_head, seq_len, head_dim, cp, n_layer, itemsize)),
            "all_to_alls_per_layer": 8}


def allgather_bytes(batch: int, n_head: int, seq_len: int, head_dim: int, cp: int, n_layer: int,
                    itemsize: int = 4) -> dict:
    """Bytes one rank sends per training step with Llama 3's all-gather context parallelism
    (Dubey et al. 2024, §3.3.2): per layer one all-gather of the stacked K/V, (cp−1) shards of
    2·B·nh·(T/cp)·hs elements, forward, and one reduce-scatter of dK/dV, the same, backward —
    the ring's bytes, in one collective per layer and direction."""
    per_layer = 2 * (cp - 1) * batch * n_head * (seq_len // cp) * head_dim * itemsize
    return {"cp-forward": per_layer * n_layer, "cp-backward": per_layer * n_layer,
            "collectives_per_layer": 2 if cp > 1 else 0}


def usp_bytes(batch: int, n_head: int, seq_len: int, head_dim: int, ulysses: int, ring: int,
              n_layer: int = 1, itemsize: int = 2) -> dict:
    """Forward bytes one rank sends per step with USP, Ulysses × ring (Fang & Zhao 2024, arXiv
    2405.07719): the sequence split over u·r ranks; an all-to-all inside each Ulysses group of u
    trades tokens for heads (4 per layer: q, k, v, out, each (u−1)/u of a (B, nh, T/(u·r), hs)
    shard), then a ring of r passes K and V of nh/u heads and T/r tokens r−1 times. u = 1 is the
    ring, r = 1 is Ulysses. Returns the two parts ("ulysses", "ring") and their sum ("total")."""
    shard = batch * n_head * (seq_len // (ulysses * ring)) * head_dim  # (B, nh, T/(u·r), hs)
    a2a = 4 * shard * (ulysses - 1) // ulysses
    kv = (ring - 1) * 2 * batch * (n_head // ulysses) * (seq_len // ring) * head_dim
    return {"ulysses": a2a * n_layer * itemsize, "ring": kv * n_layer * itemsize,
            "total": (a2a + kv) * n_layer * itemsize}


def usp_messages(batch: int, n_head: int, seq_len: int, head_dim: int, ulysses: int, ring: int,
                 n_layer: int, itemsize: int = 4) -> list:
    """USP's messages one rank sends per training step (Fang & Zhao 2024; `parlab.context_parallel
    .usp`): per layer forward, 4 all-to-alls inside the Ulysses group of u, each sending (u−1)/u
    of a (B, nh, T/(u·r), hs) shard, and r−1 ring sends of K/V for nh/u heads and T/r tokens,
    2·B·(nh/u)·(T/r)·hs elements; backward the same (all-to-alls back, dK/dV round the ring)."""
    u, r = ulysses, ring
    leaves = batch * n_head * (seq_len // (u * r)) * head_dim * (u - 1) // u
    block = 2 * batch * (n_head // u) * (seq_len // r) * head_dim  # (2, B, nh/u, T/r, hs)
    msgs = []
    for phase in ("cp-forward", "cp-backward"):
        if u > 1:
            msgs.append(Message("cp", "all_to_all", u, leaves, 4 * n_layer, False, itemsize, phase))
        if r > 1:
            msgs.append(Message("cp", "p2p", r, block, (r - 1) * n_layer, False, itemsize, phase))
    return msgs


def usp_step_bytes(batch: int, n_head: int, seq_len: int, head_dim: int, ulysses: int, ring: int,
                   n_layer: int, itemsize: int = 4) -> dict:
    """Bytes one rank sends per training step with USP: `usp_messages` summed by phase, and the
    all-to-all ("ulysses") and ring ("ring") parts of the forward."""
    msgs = usp_messages(batch, n_head, seq_len, head_dim, ulysses, ring, n_layer, itemsize)
    fwd = [x for x in msgs if x.phase == "cp-forward"]
    return {**_phases(msgs),
            "ulysses": sum(x.total() for x in fwd if x.op == "all_to_all"),
            "ring": sum(x.total() for x in fwd if x.op == "p2p")}


def causal_work(layout: str, cp: int) -> list[list[int]]:
    """Chunk-pair score blocks rank r computes at ring step s (causal): work[r][s]."""
    table = []
    for r in range(cp):
        mine = layout_chunks(layout, r, cp)
        row = []
        for s in range(cp):
            theirs = layout_chunks(layout, (r - s) % cp, cp)
            row.append(sum(_causal_relation(a, b) != "skip" for a in mine for b in theirs))
        table.append(row)
    return table


def critical_path(layout: str, cp: int) -> dict:
    """Ring time in score blocks: each step lasts as long as its busiest rank."""
    work = causal_work(layout, cp)
    per_step = [max(work[r][s] for r in range(cp)) for s in range(cp)]
    total = sum(map(sum, work))
    return {"per_rank": [sum(row) for row in work], "critical_path": sum(per_step),
            "efficiency": total / (cp * sum(per_step))}


# ----------------------------------------------------------------------------- serving: the video latent
def sp_bytes(cfg: VideoConfig, cp: int, method: str, itemsize: int = 4) -> int:
    """Bytes a rank sends per denoising step (forward only): per layer, the ring passes K and V
    of its N/cp tokens cp−1 times; Ulysses sends (cp−1)/cp of q, k, v and the output."""
    shard = cfg.batch * (cfg.tokens // cp) * cfg.n_embd  # (B, N/cp, D) elements
    per_layer = (cp - 1) * 2 * shard if method == "ring" else 4 * (shard * (cp - 1) // cp)
    return per_layer * cfg.n_layer * itemsize


def lp_bytes(cfg: VideoConfig, cp: int, halo: int, rank: int, step: int, itemsize: int = 4,
             reconstruction: str = "crop") -> int:
    """Bytes `rank` sends after denoising step `step`, cut along axis a = step mod 3, the next
    step along b, c the third axis; |x| a width in patches, B·C values per patch:

    * before the last step, rank r sends every other rank j the box (its part along a) × (j's
      next slab-plus-halo along b) × (all of c): B·C·|part_r^a|·N_c·Σ_{j≠r}|region_j^b|, where
      the part is the slab (crop) or the whole slab-plus-halo region (blend: each overlap patch is
      sent by both ranks that computed it, pre-weighted);
    * after the last step: crop sends nothing (the slab is the output); blend sends its halos
      back to their slab owners, B·C·(|region_r^a| − |slab_r^a|)·N_b·N_c."""
    a, sizes = split_axis(step), axis_sizes(cfg)

    def width(interval):
        return interval[1] - interval[0]

    slab, reg = width(core(cfg, a, rank, cp)), width(region(cfg, a, rank, cp, halo))
    if step >= cfg.denoise_steps - 1:
        patches = 0 if reconstruction == "crop" else (reg - slab) * (cfg.tokens // sizes[a])
    else:
        b = split_axis(step + 1)
        c = 3 - a - b
        others = sum(width(region(cfg, b, j, cp, halo)) for j in range(cp) if j != rank)
        patches = (slab if reconstruction == "crop" else reg) * sizes[c] * others
    return patches * cfg.batch * cfg.channels * itemsize


def lp_compute_fraction(cfg: VideoConfig, cp: int, halo: int) -> float:
    """Tokens the busiest rank runs the model on, per step, as a fraction of the whole latent
    (averaged over steps): 1/cp with no halo, 1 once the halo covers the latent (every rank then
    computes everything — exact, but no faster than one process). SP's fraction is 1/cp."""
    fractions = []
    for s in range(cfg.denoise_steps):
        a = split_axis(s)
        widest = max(hi - lo for lo, hi in (region(cfg, a, r, cp, halo) for r in range(cp)))
        fractions.append(widest / axis_sizes(cfg)[a])
    return sum(fractions) / len(fractions)
