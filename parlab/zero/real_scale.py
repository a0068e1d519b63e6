"""ZeRO at a real model's size: what fits on an 80 GB A100 at each stage and N, hybrid sharding
(HSDP), CPU offload, and one step's memory over time — closed forms at a preset's shapes
(`parlab.models.presets`: `gpt2-xl`, `llama3-8b`), no tensor made.

Model states per rank: Rajbhandari et al., "ZeRO", SC 2020, §3.1 and Fig. 1 (mixed precision,
Adam, K = 12): DDP 16Ψ, ZeRO-1 4Ψ + 12Ψ/N, ZeRO-2 2Ψ + 14Ψ/N, ZeRO-3 16Ψ/N
(`parlab.zero.cost.mixed_precision_formula`). Activations: Korthikanti et al., "Reducing
Activation Recomputation in Large Transformer Models", MLSys 2023, eq. 2 and §4: per layer
s·b·h·(34 + 5·a·s/h) bytes (16-bit, no recomputation), s·b·h·34 with selective recomputation,
s·b·h·2 with full recomputation (the block input only); data parallelism does not divide them.
HSDP: Zhao et al., "PyTorch FSDP", VLDB 2023, §3.2.2 (hybrid sharding): ZeRO-3 inside a node of G
GPUs, replicas across R nodes, the shards all-reduced across nodes. CPU offload: Ren et al.,
"ZeRO-Offload", USENIX ATC 2021, §4: the 16-bit gradients go to the CPU, the CPU runs Adam on the
fp32 master weights and moments (12Ψ in host memory) and the updated 16-bit parameters come back:
2Ψ bytes each way over PCIe per step, divided by N under ZeRO-2.
Simplifications, named: Korthikanti's 34 counts a GPT block (GELU MLP of 4h, dropout masks) and
is used for Llama's SwiGLU and grouped-query attention too; the embedding's and the logits'
activations are left out; rings are priced α-β with the slowest link's β (a flat ring across
nodes is held to InfiniBand's); a memory profile's units are the model's blocks, the root
(embeddings, head) gathered first and released last.
"""

from __future__ import annotations

from parlab.core.link import ACCELERATORS, REAL, nvlink_for
from parlab.models.presets import PRESETS
from parlab.zero.cost import mixed_precision_formula

HALF = 2  # bytes of a 16-bit parameter or gradient
PCIE_BPS = 32e9  # PCIe 4.0 ×16, one direction (PCI-SIG; the A100 datasheet's 64 GB/s is both ways)
RECOMPUTE = {"none": None, "selective": 34, "full": 2}  # Korthikanti et al. bytes per s·b·h


def _config(preset: str):
    from parlab.models.gpt import GPTConfig

    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError(f"preset={preset!r} must be one of {sorted(PRESETS)}")
    return GPTConfig(**PRESETS[preset])


def psi(preset: str) -> int:
    """Ψ: the preset's parameters, counted from its config (`parlab.models.gpt.param_count`)."""
    from parlab.models.gpt import param_count

    return param_count(_config(preset))


def units(preset: str) -> tuple[int, list[int]]:
    """(root, [block, ...]) parameters: the flat units ZeRO-3 gathers one at a time."""
    cfg = _config(preset)
    total = psi(preset)
    block = (total - psi_root(cfg)) // cfg.n_layer
    return total - block * cfg.n_layer, [block] * cfg.n_layer


def psi_root(cfg) -> int:
    """Embeddings, learned positions, final norm and an untied head: outside the blocks."""
    embeddings = cfg.vocab_size * cfg.n_embd * (1 if cfg.tie_head else 2)
    positions = cfg.block_size * cfg.n_embd if cfg.positions == "learned" else 0
    return embeddings + positions + (cfg.n_embd if cfg.norm == "rmsnorm" else 2 * cfg.n_embd)


def activation_bytes(preset: str, batch: int = 1, seq: int | None = None,
                     recompute: str = "selective") -> float:
    """Bytes of activations one rank keeps for backward (Korthikanti et al. eq. 2, §4): L layers
    of s·b·h·c, c = 34 + 5·a·s/h (none), 34 (selective), 2 (full); `seq` defaults to the block."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute={recompute!r} must be one of {sorted(RECOMPUTE)}")
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch={batch!r} must be an int >= 1")
    cfg = _config(preset)
    s, h = seq or cfg.block_size, cfg.n_embd
    c = RECOMPUTE[recompute]
    c = 34 + 5 * cfg.n_head * s / h if c is None else c
    return cfg.n_layer * s * batch * h * c


def stage_rows(preset: str, worlds=(1, 8, 64), memory: float | None = None, batch: int = 1,
               seq: int | None = None, recompute: str = "selective") -> list[dict]:
    """Per stage (0 = DDP … 3) and N: bytes per rank of parameters, gradients, optimizer states
    (ZeRO §3.1, mixed precision), activations (Korthikanti), their total and whether it fits."""
    memory = ACCELERATORS["A100"].memory_bytes if memory is None else memory
    p, act = psi(preset), activation_bytes(preset, batch, seq, recompute)
    rows = []
    for stage in (0, 1, 2, 3):
        for n in worlds:
            states = mixed_precision_formula(stage, p, n)
            total = sum(states.values()) + act
            rows.append({"preset": preset, "stage": stage, "N": n, **states, "activations": act,
                         "total": total, "fits": total <= memory})
    return rows


def _ring(rounds: int, nbytes: float, link: str) -> float:
    alpha, beta = REAL[link]
    return rounds * alpha + nbytes / beta


def hsdp_price(preset: str, nodes: int, gpus_per_node: int = 8, acc: str = "A100",
               inter: str | None = None) -> dict:
    """One step's communication of FSDP over all N = G·R GPUs against HSDP (ZeRO-3 inside each
    node of G, replicas across R nodes), 16-bit parameters and gradients, α-β rings:
    FSDP: 3 collectives (gather fwd, gather bwd, reduce-scatter) of (N-1)/N·2Ψ at InfiniBand's β;
    HSDP: the same 3 inside the node over NVLink at (G-1)/G·2Ψ, then an all-reduce of the rank's
    2Ψ/G shard across R nodes, 2(R-1)/R·2Ψ/G over InfiniBand. Memory: 16Ψ/N against 16Ψ/G."""
    if not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes={nodes!r} must be an int >= 1")
    a = ACCELERATORS[acc]
    intra, inter = nvlink_for("NVLink", a), inter or a.inter
    p, g, n = psi(preset), gpus_per_node, gpus_per_node * nodes
    ib = inter if nodes > 1 else intra  # one node: FSDP's ring stays on NVLink
    fsdp_bytes = 3 * (n - 1) / n * HALF * p
    fsdp_s = 3 * _ring(n - 1, (n - 1) / n * HALF * p, ib)
    intra_bytes = 3 * (g - 1) / g * HALF * p
    inter_bytes = 2 * (nodes - 1) / nodes * HALF * p / g
    hsdp_s = 3 * _ring(g - 1, (g - 1) / g * HALF * p, intra)
    hsdp_s += _ring(2 * (nodes - 1), inter_bytes, inter) if nodes > 1 else 0.0
    return {"preset": preset, "nodes": nodes, "N": n, "fsdp_bytes": fsdp_bytes, "fsdp_s": fsdp_s,
            "hsdp_intra_bytes": intra_bytes, "hsdp_inter_bytes": inter_bytes, "hsdp_s": hsdp_s,
            "fsdp_states": 16 * p / n, "hsdp_states": 16 * p / g, "intra": intra, "inter": inter}


def offload_price(preset: str, world: int = 1, tokens: int | None = None, acc: str = "A100",
                  pcie_Bps: float = PCIE_BPS) -> dict:
    """ZeRO-Offload (Ren et al. §4) on ZeRO-2 over `world` GPUs: GPU keeps the 16-bit parameters
    (2Ψ); the host keeps 12Ψ/N of fp32 master weights and moments and 2Ψ/N of gradients; PCIe
    moves 2Ψ/N down (gradients) and 2Ψ/N up (parameters) per step, beside the step's compute
    6·Ψ·tokens / F (tokens per GPU; default one sequence of the preset's block)."""
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world={world!r} must be an int >= 1")
    p, cfg = psi(preset), _config(preset)
    tokens = tokens or cfg.block_size
    moved = 2 * HALF * p / world
    return {"preset": preset, "N": world, "gpu_states": HALF * p, "host_states": 14 * p / world,
            "pcie_bytes": moved, "pcie_s": moved / pcie_Bps,
            "compute_s": 6 * p * tokens / ACCELERATORS[acc].flops,
            "zero2_states": sum(mixed_precision_formula(2, p, world).values())}


def memory_profile(preset: str, stage: int, world: int, batch: int = 1, seq: int | None = None,
                   recompute: str = "selective") -> list[tuple[str, float]]:
    """Bytes one rank holds after each phase of one step: at rest, after each unit's forward, after
    each unit's backward (reverse), after the optimizer step. Stage 3 holds a unit's gathered
    16-bit parameters while it computes; stages 2-3 keep 1/N of each gradient once reduce-scattered,
    stages 0-1 the whole; activations (Korthikanti) grow by one layer per block's forward."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage={stage!r} must be 0 (DDP), 1, 2 or 3")
    root, blocks = units(preset)
    p, n = root + sum(blocks), world
    per_layer = activation_bytes(preset, batch, seq, recompute) / len(blocks)
    params = HALF * p / (n if stage == 3 else 1)
    optim = 12 * p / (n if stage >= 1 else 1)
    grad_kept = (lambda u: HALF * u / n) if stage >= 2 else (lambda u: HALF * u)
    gathered = (lambda u: HALF * u * (n - 1) / n) if stage == 3 else (lambda u: 0.0)
    base, acts, grads = params + optim, 0.0, 0.0
    out = [("rest", base)]
    for i, u in enumerate(blocks):  # the root's embedding is gathered with the first block
        extra = gathered(u) + (gathered(root) if i == 0 else 0.0)
        acts += per_layer
        out.append((f"fwd {i}", base + acts + grads + extra))
    for i, u in reversed(list(enumerate(blocks))):
        extra = gathered(u) + (gathered(root) if i == len(blocks) - 1 else 0.0)
        grads += grad_kept(u) + (grad_kept(root) if i == len(blocks) - 1 else 0.0)
        out.append((f"bwd {i}", base + acts + grads + extra + HALF * u * (stage >= 2)))
        acts -= per_layer
    out.append(("step", base + grads))
    return out
