"""Context parallelism: the tiny GPT with its sequence split over cp ranks (× dp data parallel).

Ring attention (Liu et al., ICLR 2024, arXiv 2310.01889), DeepSpeed-Ulysses (Jacobs et al.
2023, arXiv 2309.14509), Llama 3's all-gather of K/V (Dubey et al. 2024, §3.3.2) and USP, Ulysses
inside × ring across (Fang & Zhao 2024, arXiv 2405.07719; `parlab.context_parallel.usp`); the mesh
and the loss bookkeeping follow the Llama 3 paper's context parallelism and torchtitan. Ranks
form a dp × cp mesh; each cp rank
holds T/cp tokens (zig-zag or contiguous, `ring_attention.layout_chunks`) and runs everything
but attention on them; attention reaches the others through `ring_attention` (`recompute=True`:
`ring_attention_recompute`) or `ulysses_attention`. The model is `apply_cp`
(`parlab.context_parallel.apply`) on the one GPT. Each rank's loss is its tokens' summed
cross-entropy / the global token count, so one sum all-reduce over dp × cp gives the single
process's step. In full: docs/context_parallel.md, `parlab.context_parallel.schemes`.
"""

from __future__ import annotations

from functools import partial

from parlab.context_parallel import cost
from parlab.context_parallel import ring_attention as ring
from parlab.context_parallel.apply import apply_cp
from parlab.context_parallel.usp import apply_usp, usp_problem
from parlab.core.checks import Bool, Choice, Int
from parlab.core.mesh import Mesh, validate_degrees
from parlab.engine.loop import Strategy, build_model, make_optimizer, train
from parlab.engine.runner import register
from parlab.models.gpt import gpt_on_mesh

# ----------------------------------------------------------------------------- validation
CP = Int(None, min=1, none=True)  # None: the largest degree that fits
BF16 = ("fp32", "bf16-mixed")  # the ring also runs in bf16 (shapes-only timings at 2 B a value)


def _valid_cp(cfg, method: str, cp: int) -> str | None:
    """Why `cp` does not work for this config (None when it does)."""
    T, nh = cfg.model_config.block_size, cfg.model_config.n_head
    if cfg.world_size % cp:
        return f"world_size={cfg.world_size} is not divisible by cp={cp}"
    dp = cfg.world_size // cp
    if cfg.batch_size % dp:
        return f"batch_size={cfg.batch_size} is not divisible by dp={dp} (world_size / cp)"
    if method == "ulysses" and cfg.options.get("layout") == "contiguous":
        if T % cp:
            return f"block_size={T} (sequence length) is not divisible by cp={cp}"
    elif method != "usp" and T % (2 * cp):  # USP: its own split (`usp_problem`)
        return (f"block_size={T} (sequence length) is not divisible by 2·cp={2 * cp} "
                "(two chunks per cp rank)")
    if method == "ulysses" and nh % cp:
        return f"n_head={nh} is not divisible by cp={cp} (Ulysses splits the heads)"
    if method == "usp":
        return usp_problem(cp, _ulysses(cfg, cp), nh, cfg.model_config.kv_heads, T)
    return None


def _ulysses(cfg, cp: int) -> int:
    """USP's Ulysses degree u: the option, or when None the largest that divides cp and the
    heads (Fang & Zhao 2024: Ulysses as far as the heads allow, the ring for the rest)."""
    u = cfg.options.get("ulysses")
    if u is not None:
        return u
    g = cfg.model_config
    return max(d for d in range(1, cp + 1)
               if cp % d == 0 and g.n_head % d == 0 and g.kv_heads % d == 0)


def degrees(cfg, method: str) -> dict[str, int]:
    """{"dp", "cp"}: the cp option, or when None the largest cp that divides everything."""
    cp = cfg.options["cp"]
    if cp is None:
        valid = [c for c in range(1, cfg.world_size + 1) if _valid_cp(cfg, method, c) is None]
        cp = max(valid) if valid else 1
    dims = validate_degrees(cfg.world_size, dp=None, cp=cp)
    if method == "usp":  # cp = ulysses u (inner) × ring r (outer)
        u = _ulysses(cfg, cp)
        dims.update(ulysses=u, ring=cp // u if cp % u == 0 else 0)
    return dims


def _validate(cfg, method: str):
    if cfg.options["cp"] is not None:
        validate_degrees(cfg.world_size, dp=None, cp=cfg.options["cp"])
    dims = degrees(cfg, method)
    problem = _valid_cp(cfg, method, dims["cp"])
    if problem:
        raise ValueError(problem)


class ContextParallel(Strategy):
    """This rank's T/cp tokens of its dp rows; attention reaches the other tokens through ring
    or Ulysses; one sum all-reduce of the gradients over all dp × cp ranks."""

    def __init__(self, ctx, method: str):
        cfg = ctx.cfg
        self.dims = degrees(cfg, method)
        self.method = method  # "ring", "ulysses", "allgather" or "usp"
        self.work: list = []
        if method == "usp":  # ranks j·u + a of a cp group: Ulysses groups inner, rings across
            self.mesh = Mesh(ctx.comm, [("dp", self.dims["dp"]), ("ring", self.dims["ring"]),
                                        ("ulysses", self.dims["ulysses"])])
            model = apply_usp(gpt_on_mesh(build_model(cfg)), self.mesh, self.work)
        else:
            self.mesh = Mesh(ctx.comm, [("dp", self.dims["dp"]), ("cp", self.dims["cp"])])
            model = apply_cp(gpt_on_mesh(build_model(cfg)), self.mesh, method,
                             cfg.options.get("layout", "contiguous"),
                             cfg.options.get("recompute", False), self.work)
        self.mine = model.positions  # (T/cp,) this rank's tokens
        self.tokens = cfg.batch_size * cfg.model_config.block_size  # global tokens of one step
        super().__init__(ctx, model, make_optimizer(model.parameters(), cfg),
                         shard=self.mesh.coords["dp"], shards=self.dims["dp"],
                         holds_state=ctx.rank == 0)

    def batch(self, step: int):
        x, y = super().batch(step)  # (B/dp, T)
        return x[:, self.mine], y[:, self.mine]  # (B/dp, T/cp): this rank's tokens

    def forward_backward(self, step: int, batch) -> float:
        x, y = batch
        with self.ctx.span("forward", step=step), self.meter:
            loss = self.model.loss(x, y) * (x.numel() / self.tokens)  # Σ of its tokens' / B·T
        with self.ctx.span("backward", step=step), self.meter:
            loss.backward()
        return loss.item()  # already this rank's share of the global mean

    def sync(self, step: int) -> None:
        with self.ctx.ledger.label(phase="grad-sync"):
            for p in self.model.parameters():
                self.ctx.comm.all_reduce(p.grad, op="sum")  # (param shape,) over dp × cp

    def extras(self) -> dict:
        return {"work": self.work[:self.dims["cp"]] if self.work else [], "degrees": self.dims,
                "method": self.method, "recompute": self.ctx.cfg.options.get("recompute", False)}


@register("cp-ring", summary="context parallel: ring attention (K/V round the ring), dp × cp",
          shapes=True, exact=True, precisions=BF16,
          options={"cp": CP, "layout": Choice("zigzag", ring.LAYOUTS), "recompute": Bool(False)},
          validate=partial(_validate, method="ring"), models=("gpt",),
          forms={"attention_bytes": cost.ring_bytes})
def cp_ring(ctx):
    return train(ctx, ContextParallel(ctx, "ring"))


@register("cp-ulysses", summary="context parallel: Ulysses all-to-all (sequence ↔ heads), dp × cp",
          shapes=True, exact=True, options={"cp": CP, "layout": Choice("contiguous", ring.LAYOUTS)},
          validate=partial(_validate, method="ulysses"), models=("gpt",),
          forms={"attention_bytes": cost.ulysses_bytes})
def cp_ulysses(ctx):
    return train(ctx, ContextParallel(ctx, "ulysses"))


@register("cp-allgather", summary="context parallel: Llama 3's all-gather of K/V, local attention, dp × cp",
          shapes=True, exact=True, precisions=BF16,
          options={"cp": CP, "layout": Choice("zigzag", ring.LAYOUTS)},
          validate=partial(_validate, method="allgather"), models=("gpt",),
          forms={"attention_bytes": cost.allgather_bytes})
def cp_allgather(ctx):
    return train(ctx, ContextParallel(ctx, "allgather"))


@register("cp-usp", summary="context parallel: USP, Ulysses all-to-all inside × ring across, dp × cp",
          shapes=True, exact=True, precisions=BF16,
          options={"cp": CP, "ulysses": Int(None, min=1, none=True)},
          validate=partial(_validate, method="usp"), models=("gpt",),
          forms={"usp_bytes": cost.usp_step_bytes})
def cp_usp(ctx):
    return train(ctx, ContextParallel(ctx, "usp"))
