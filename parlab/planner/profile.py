"""A per-layer compute profile measured once: forward, backward and optimizer seconds of one GPT
block, of the embedding + head, and of AdamW, on this machine, in this process.

MAD-Max (Hsia et al., ISCA 2024, §4) prices a distributed step from per-operator compute times
measured once plus a communication model; Alpa (Zheng et al., OSDI 2022, §5) profiles each stage
the same way. We measure each piece at two sizes and fit a line in FLOPs,

    t(flops) = overhead + flops / rate,

so one profile answers for every slice a plan makes: a tensor-parallel block does 1/tp of the
FLOPs, a context-parallel block 1/cp of the tokens and of the (causal, zigzag-balanced) attention,
a micro-batch 1/m of the rows — but each call still pays the fixed `overhead` (Python and kernel
launches dominate a block this small). The assumption is that time is affine in FLOPs at a fixed
call count; `parlab.planner.bench` checks it against measured single-dimension runs.

FLOPs per block and token: 2·12·C² for the matmuls (forward; Kaplan et al. 2020's 2·N rule) plus
2·2·T·C for q·kᵀ and ·v over T keys; backward twice forward (Kaplan et al. 2020, 6·N·D).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

_CACHE: dict = {}


def block_flops(rows: float, seq: float, n_embd: int, keys: float | None = None) -> float:
    """Forward FLOPs of one block on rows × seq tokens attending to `keys` keys each (default seq;
    causal attention does half, which a line fitted on measured times absorbs)."""
    keys = seq if keys is None else keys
    return 2 * rows * seq * 12 * n_embd ** 2 + 4 * rows * seq * keys * n_embd


def outside_flops(rows: float, seq: float, n_embd: int, vocab: int) -> float:
    """Forward FLOPs outside the blocks: the head's matmul (the embeddings are lookups)."""
    return 2 * rows * seq * n_embd * vocab


@dataclass(frozen=True)
class Line:
    """Seconds of one call: overhead + flops / rate (fitted on two measured sizes)."""

    overhead_s: float
    rate: float  # FLOP/s above the overhead

    def __call__(self, flops: float, calls: float = 1.0) -> float:
        return calls * self.overhead_s + flops / self.rate


@dataclass(frozen=True)
class Profile:
    """Measured lines of one machine: block and outside forward/backward, optimizer per tensor and
    per element; `cores`: how many ranks can compute at once before they share a core."""

    block_fwd: Line
    block_bwd: Line
    outside_fwd: Line
    outside_bwd: Line
    opt_per_tensor_s: float
    opt_per_element_s: float
    cores: int
    model_config: object
    attn_chunk_s: float = 0.0  # forward + backward of one more score block merged (ring attention)
    opt_fixed_s: float = 0.0  # the optimizer's cost per step whatever its tensors (paced profile)

    def optimizer(self, tensors: float, elements: float) -> float:
        return self.opt_fixed_s + tensors * self.opt_per_tensor_s + elements * self.opt_per_element_s

    def achieved_flops(self) -> float:
        return self.block_fwd.rate


def _fastest_time(fn, repeats: int) -> float:
    """Fastest of `repeats` timed calls after a warm-up: on a shared machine other jobs only ever
    add time, so the fastest call is the uncontended cost (as `parlab.pipeline.partition`)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _fit(x: tuple[float, float], t: tuple[float, float]) -> Line:
    slope = max((t[1] - t[0]) / (x[1] - x[0]), 1e-15)  # seconds per flop, never negative
    overhead = max(t[0] - slope * x[0], 0.0)
    return Line(overhead, 1.0 / slope)


def _block_times(block, rows: int, seq: int, n_embd: int, repeats: int) -> tuple[float, float]:
    x = torch.randn(rows, seq, n_embd, requires_grad=True)  # (B, T, C)
    grad = torch.randn(rows, seq, n_embd)  # (B, T, C)
    fwd = _fastest_time(lambda: block(x), repeats)

    def both():
        block(x).backward(grad)
    total = _fastest_time(both, repeats)
    return fwd, max(total - fwd, 1e-9)


def outside_loss(model, ids, x):
    """The GPT's work outside its blocks: the embeddings of ids (B, T), the head on the last
    block's output x (B, T, C) and the cross-entropy, summed into one scalar so that one backward
    runs all three (the profile's stand-in; the embeddings' value does not matter)."""
    import torch.nn.functional as F

    from parlab.models.gpt_trunk import head_logits
    emb = model.wte(ids) + model.wpe(torch.arange(ids.size(1)))  # (B, T, C)
    logits = head_logits(model, x)  # (B, T, V)
    return emb.sum() + F.cross_entropy(logits.view(-1, logits.size(-1)), ids.view(-1))


def _outside_times(model, rows: int, seq: int, repeats: int) -> tuple[float, float]:
    vocab, C = model.wte.weight.shape
    ids = torch.randint(0, vocab, (rows, seq))  # (B, T)
    x = torch.randn(rows, seq, C, requires_grad=True)  # (B, T, C): the last block's output

    def forward():
        return outside_loss(model, ids, x)
    fwd = _fastest_time(forward, repeats)
    total = _fastest_time(lambda: forward().backward(), repeats)
    return fwd, max(total - fwd, 1e-9)


def _chunk_overhead(rows: int, cfg, repeats: int) -> float:
    """Seconds (forward + backward) one more merged score block costs: blockwise attention
    (chapter 06's online-softmax rule) over 8 key blocks vs over 1, per extra block."""
    from parlab.context_parallel.ring_attention import blockwise_attention
    shape = (rows, cfg.n_head, cfg.block_size, cfg.n_embd // cfg.n_head)  # (B, nh, T, hs)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    blocks = 8 if cfg.block_size % 8 == 0 else 1
    if blocks == 1:
        return 0.0

    def run(block):
        return lambda: blockwise_attention(q, k, v, block).sum().backward()
    many = _fastest_time(run(cfg.block_size // blocks), repeats)
    one = _fastest_time(run(cfg.block_size), repeats)
    return max(many - one, 0.0) / (blocks - 1)


def measure(model_config, rows: int = 12, repeats: int = 9) -> Profile:
    """Measure the profile of `model_config` (a GPTConfig) once per process (cached), one thread
    like each rank (`parlab.core.launch`)."""
    import os

    from parlab.models.gpt import GPT, Block

    key = (model_config, rows)
    if key in _CACHE:
        return _CACHE[key]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        cfg = model_config
        T, C = cfg.block_size, cfg.n_embd
        block = Block.for_config(cfg)
        small = max(1, rows // 4)
        f_small, b_small = _block_times(block, small, T, C, repeats)
        f_big, b_big = _block_times(block, rows, T, C, repeats)
        x = (block_flops(small, T, C), block_flops(rows, T, C))
        model = GPT(cfg, seed=0)
        of_small, ob_small = _outside_times(model, small, T, repeats)
        of_big, ob_big = _outside_times(model, rows, T, repeats)
        xo = (outside_flops(small, T, C, cfg.vocab_size), outside_flops(rows, T, C, cfg.vocab_size))
        params = list(model.parameters())
        for p in params:
            p.grad = torch.randn_like(p)
        opt_all = torch.optim.AdamW(params, lr=1e-3)
        t_all = _fastest_time(opt_all.step, repeats)
        opt_one = torch.optim.AdamW([params[0]], lr=1e-3)
        t_one = _fastest_time(opt_one.step, repeats)
        n_all, e_all, e_one = len(params), sum(p.numel() for p in params), params[0].numel()
        per_element = max((t_all - t_one) - (n_all - 1) * t_one * 0.5, 0.0) / max(e_all - e_one, 1)
        per_tensor = max((t_all - per_element * e_all) / n_all, 0.0)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        prof = Profile(_fit(x, (f_small, f_big)), _fit(x, (b_small, b_big)),
                       _fit(xo, (of_small, of_big)), _fit(xo, (ob_small, ob_big)),
                       per_tensor, per_element, int(cores or 1), cfg,
                       _chunk_overhead(rows, cfg, repeats))
    finally:
        torch.set_num_threads(threads)
    _CACHE[key] = prof
    return prof


# ----------------------------------------------------------------------------- communication
@dataclass(frozen=True)
class CommFit:
    """α-β of gloo on this machine with `world_size` ranks running: all-reduce per group size
    (chapter 00's `parlab.core.cost.fit_alpha_beta`, every group of that size busy at once, as in
    a step) and a point-to-point message (α + n/β, one round)."""

    world_size: int
    all_reduce: dict  # {group size: parlab.core.cost.AlphaBeta}
    p2p_alpha: float
    p2p_beta: float
    ring_alpha: float = 0.0  # one ring exchange (isend to r+1, irecv from r−1, wait both), as
    ring_beta: float = float("inf")  # ring attention passes K/V (async: a thread per message)

    def fit(self, n: int):
        return self.all_reduce[n]


SIZES = (64, 4096, 65536)  # fp32 elements: the tiny GPT's messages span 1 KB–300 KB


def _time_groups(rank, world_size, sizes, repeats):
    from parlab.core.comm import Comm
    from parlab.core.timing import all_reduce_seconds

    comm = Comm(link=None)  # the bare loopback: an emulated link is added by the model
    out = {}
    for g in [d for d in range(2, world_size + 1) if world_size % d == 0]:
        sub = comm.split([list(range(i, i + g)) for i in range(0, world_size, g)], f"g{g}")
        out[g] = [min(all_reduce_seconds(sub, numel, repeats)) for numel in sizes]
    p2p = []
    if world_size > 1:
        peer = rank ^ 1 if (rank ^ 1) < world_size else rank
        for numel in sizes:
            tensor, times = torch.ones(numel), []
            for _ in range(repeats + 1):
                comm.barrier()
                t0 = time.perf_counter()
                if peer != rank:
                    if rank % 2 == 0:
                        comm.send(tensor, peer)  # (numel,) to the pair's other rank
                        comm.recv(tensor, peer)  # (numel,) back
                    else:
                        comm.recv(tensor, peer)  # (numel,) from the pair's other rank
                        comm.send(tensor, peer)  # (numel,) back
                times.append((time.perf_counter() - t0) / 2)
            p2p.append(min(times[1:]))
    ring = []
    if world_size > 1:
        for numel in sizes:
            tensor, incoming, times = torch.ones(numel), torch.empty(numel), []
            for _ in range(repeats + 1):
                comm.barrier()
                t0 = time.perf_counter()
                send = comm.isend(tensor, (rank + 1) % world_size)  # (numel,) to r+1
                recv = comm.irecv(incoming, (rank - 1) % world_size)  # (numel,) from r−1
                send.wait()
                recv.wait()
                times.append(time.perf_counter() - t0)
            ring.append(min(times[1:]))
    return out, p2p, ring


def calibrate_comm(world_size: int, repeats: int = 7) -> CommFit:
    """Fit α-β per group size at `world_size` once per process (cached)."""
    from parlab.core.cost import fit_alpha_beta
    from parlab.core.launch import launch

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be an int >= 1")
    if ("comm", world_size) in _CACHE:
        return _CACHE[("comm", world_size)]
    if world_size == 1:
        fit = CommFit(1, {}, 0.0, float("inf"))
    else:
        per_rank = launch(_time_groups, world_size, list(SIZES), repeats)
        nbytes = [4 * s for s in SIZES]
        fits = {}
        for g in per_rank[0][0]:
            seconds = [max(r[0][g][i] for r in per_rank) for i in range(len(SIZES))]
            fits[g] = fit_alpha_beta(nbytes, seconds, g, "ring")
        lines = []
        for k in (1, 2):  # point-to-point, ring exchange: α + n/β through two sizes' ends
            t = [max(r[k][i] for r in per_rank) for i in range(len(SIZES))]
            slope = max((t[-1] - t[0]) / (nbytes[-1] - nbytes[0]), 1e-12)
            lines += [max(t[0] - slope * nbytes[0], 0.0), 1.0 / slope]
        fit = CommFit(world_size, fits, *lines)
    _CACHE[("comm", world_size)] = fit
    return fit
