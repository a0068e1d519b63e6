"""A parallel plan: how many ways each dimension of the mesh cuts one training step.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC 2021) name the dimensions PTD-P: pipeline (pp), tensor (tp) and data (dp)
parallelism; context (cp, chapter 06) cuts the sequence, expert (ep, chapter 07) the experts. A
`Plan` is the degrees plus the knobs that change time and memory, not the math: ZeRO stage,
micro-batches, pipeline schedule, activation checkpointing, how dp syncs gradients (`dp_sync`,
chapter 01's reducers, or `dp_compressor`, chapter 08's). The mesh order is torchtitan's
`ParallelDims` (pp outermost, tp innermost); ep borrows its ranks from dp. `Plan.problems` names
every factor a plan fails before any process starts; `enumerate_plans` lists every valid plan of a
world size (what the planner searches). Every knob and every refused combination:
docs/planner.md, `parlab.planner.plan`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, fields

DEGREES = ("dp", "tp", "pp", "cp", "ep")
MESH_ORDER = ("pp", "dp", "cp", "tp")  # outermost first; tp innermost (neighbouring ranks)
ZERO_STAGES = (0, 1, 2, 3)
SCHEDULES = ("gpipe", "1f1b")
DP_SYNCS = ("flat", "naive", "bucketed", "overlap", "dear", "priority")  # ..data_parallel.apply.SYNCS
DP_BUCKETED = ("bucketed", "overlap", "dear", "priority")  # the dp_syncs that cut dp_bucket_mb buckets
DP_OWNS_UPDATE = ("dear", "priority")  # dp_syncs whose update ends inside the next forward
DP_PARTITIONED = ("priority",)  # dp_syncs that cut buckets into dp_partition_kb, dp_credit
COMPRESSOR_FIELDS = ("dp_ratio", "dp_bits", "dp_rank", "dp_error_feedback", "dp_warm_start")


def token_local_routing(model_config) -> bool:
    """True when a mixture-of-experts layer treats every token on its own: no capacity (nothing
    dropped by batch order), no load-balancing loss and no bias step (both read the whole batch's
    loads). Then any split of the tokens — pipeline micro-batches, context-parallel shards —
    routes each token as the single process does, and such plans are exact."""
    return (getattr(model_config, "capacity_factor", None) is None
            and not getattr(model_config, "aux_loss", 0) and not getattr(model_config, "bias_update", 0))


@dataclass(frozen=True)
class Plan:
    """Degrees dp × tp × pp × cp (= world size; ep ⊂ dp) and the knobs of one training step."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0            # 0: gradients all-reduced over dp; 1, 2, 3: ZeRO stage over dp
    microbatches: int = 1    # per pipeline step (pp > 1)
    schedule: str = "1f1b"   # pipeline schedule (pp > 1)
    checkpoint: bool = False  # recompute each block's activations in backward
    dp_sync: str = "flat"     # how apply_dp averages over dp × cp: DP_SYNCS (zero=0)
    dp_bucket_mb: float = 25.0  # bucket size of the bucketed dp_syncs: DP_BUCKETED (MiB)
    dp_partition_kb: float = 32.0  # dp_sync "priority": P3's partition size (KiB)
    dp_credit: int = 1  # dp_sync "priority": partitions released per bucket ready in backward
    dp_compressor: str = "none"  # chapter 08's compressor over dp × cp, by its scheme (zero=0)
    dp_ratio: float | None = None  # its options (None: the scheme's registered default):
    dp_bits: int | None = None  # top-k / random-k ratio, QSGD bits, PowerSGD rank,
    dp_rank: int | None = None  # error feedback, PowerSGD's warm start
    dp_error_feedback: bool | None = None
    dp_warm_start: bool | None = None

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def mesh_dims(self) -> list[tuple[str, int]]:
        """(name, size) outermost first, every dimension present (size 1 included)."""
        return [(name, getattr(self, name)) for name in MESH_ORDER]

    def compressor_options(self) -> dict:
        """The compressor options this plan sets (`dp_ratio` -> `ratio`, ...; None left out)."""
        return {name[len("dp_"):]: getattr(self, name) for name in COMPRESSOR_FIELDS
                if getattr(self, name) is not None}

    def reducer_options(self) -> dict:
        """The options of chapter 01's reducer closed forms (`data_parallel.cost`'s messages)."""
        return {"bucket_mb": self.dp_bucket_mb, "partition_kb": self.dp_partition_kb,
                "credit": self.dp_credit}

    def options(self) -> dict:
        """This plan as `parlab.run(..., options=...)` of the scheme `nd`."""
        return asdict(self)

    def describe(self) -> str:
        """Short name: the degrees > 1 (e.g. `dp2·tp2`), then the knobs that differ from default."""
        parts = [f"{d}{getattr(self, d)}" for d in DEGREES if getattr(self, d) > 1] or ["single"]
        name = "·".join(parts)
        if self.zero:
            name += f" z{self.zero}"
        if self.pp > 1:
            name += f" m{self.microbatches} {self.schedule}"
        if self.checkpoint:
            name += " ckpt"
        if self.dp_sync != "flat":
            name += f" {self.dp_sync}"
            if self.dp_sync in DP_BUCKETED:
                name += f" {self.dp_bucket_mb:g}MiB"
            if self.dp_sync in DP_PARTITIONED:
                name += f" {self.dp_partition_kb:g}KiB c{self.dp_credit}"
        if self.dp_compressor != "none":
            name += " " + " ".join([str(self.dp_compressor)] + [
                f"{k}={v}" for k, v in self.compressor_options().items()])
        return name

    def problems(self, world_size: int, model_config, batch_size: int,
                 n_experts: int | None = None) -> list[str]:
        """Every reason this plan cannot run, as readable phrases naming the values (empty: fits)."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in DEGREES + ("microbatches",):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    out.append(f"{f.name}={value!r} must be an int >= 1")
        if out:
            return out
        if self.zero not in ZERO_STAGES:
            out.append(f"zero={self.zero!r} must be one of {ZERO_STAGES}")
        if self.schedule not in SCHEDULES:
            out.append(f"schedule={self.schedule!r} must be one of {SCHEDULES}")
        if self.dp_sync not in DP_SYNCS:
            out.append(f"dp_sync={self.dp_sync!r} must be one of {DP_SYNCS}")
        elif self.dp_sync != "flat":
            if self.zero:
                out.append(f"dp_sync={self.dp_sync!r} with zero={self.zero}: ZeRO reduce-scatters "
                           "its own flat units (use dp_sync='flat')")
            if n_experts is not None:
                out.append(f"dp_sync={self.dp_sync!r} with a mixture-of-experts model: the "
                           "planner's per-parameter closed form covers the dense GPT only "
                           "(use dp_sync='flat')")
            if self.dp_sync in DP_OWNS_UPDATE and self.pp > 1:
                out.append(f"dp_sync={self.dp_sync!r} with pp={self.pp}: the pipeline executor runs the "
                           "stage's forwards and the tied embedding is summed from gradients "
                           "averaged right after backward, but its communication and updates "
                           "end inside the next forward (use dp_sync='overlap' or pp=1)")
        out += self.compressor_problems(n_experts)
        if isinstance(self.dp_bucket_mb, bool) or not isinstance(self.dp_bucket_mb, (int, float)) \
                or not self.dp_bucket_mb >= 0 or self.dp_bucket_mb == float("inf"):
            out.append(f"dp_bucket_mb={self.dp_bucket_mb!r} must be a finite number >= 0 (MiB)")
        if isinstance(self.dp_partition_kb, bool) or not isinstance(self.dp_partition_kb, (int, float)) \
                or not self.dp_partition_kb >= 4 / 1024 or self.dp_partition_kb == float("inf"):
            out.append(f"dp_partition_kb={self.dp_partition_kb!r} must be a finite number of KiB "
                       ">= one float32 (4/1024)")
        if isinstance(self.dp_credit, bool) or not isinstance(self.dp_credit, int) or self.dp_credit < 1:
            out.append(f"dp_credit={self.dp_credit!r} must be an int >= 1")
        if self.world_size != world_size:
            out.append(f"world_size={world_size} != dp={self.dp} × tp={self.tp} × pp={self.pp} × "
                       f"cp={self.cp} = {self.world_size}")
        from parlab.models.llama_parts import tp_factors

        m = model_config
        for name, value in (("n_head", m.n_head), ("n_embd", m.n_embd),
                            ("MLP width 4·n_embd", 4 * m.n_embd), *tp_factors(m)):
            if value % self.tp:
                out.append(f"{name}={value} is not divisible by tp={self.tp}")
        if m.n_layer < self.pp:
            out.append(f"n_layer={m.n_layer} < pp={self.pp}: a stage would hold no block")
        if self.cp > 1 and m.block_size % (2 * self.cp):
            out.append(f"block_size={m.block_size} is not divisible by 2·cp={2 * self.cp} "
                       "(zigzag halves per rank)")
        if batch_size % self.dp:
            out.append(f"batch_size={batch_size} is not divisible by dp={self.dp}")
        elif (batch_size // self.dp) % self.microbatches:
            out.append(f"rows per dp replica batch_size/dp={batch_size // self.dp} are not divisible "
                       f"by microbatches={self.microbatches}")
        if self.zero >= 2 and self.pp > 1:
            out.append(f"zero={self.zero} with pp={self.pp}: ZeRO-{self.zero} reduce-scatters a "
                       "unit's gradients as soon as they arrive, before the pipeline's other "
                       "micro-batches and the tied embedding's sum (use zero=1 or pp=1)")
        elif self.zero >= 2 and self.microbatches > 1:
            out.append(f"zero={self.zero} with microbatches={self.microbatches}: ZeRO-{self.zero} "
                       "reduce-scatters a unit's gradients after the first micro-batch's backward "
                       "(use zero=1 or microbatches=1)")
        if n_experts is not None:  # a mixture-of-experts model: what its global routing allows
            moe = [f"{name}={getattr(self, name)} > 1" for name in ("pp", "cp", "microbatches")
                   if getattr(self, name) > 1]
            if moe and not token_local_routing(model_config):
                out.append(f"{', '.join(moe)} with a mixture-of-experts model whose routing is "
                           "global (capacity_factor, aux_loss or bias_update set): capacity, "
                           "dropping and balancing follow the whole batch's tokens in one forward "
                           "(use pp=cp=microbatches=1, or capacity_factor=None, aux_loss=0, "
                           "bias_update=0)")
            if self.ep > 1 and self.zero:
                out.append(f"zero={self.zero} with ep={self.ep}: ZeRO would average the expert "
                           "shards over dp (use zero=0)")
        if self.ep > 1:
            if n_experts is None:
                out.append(f"ep={self.ep} needs a mixture-of-experts model (model='gpt-moe')")
            elif n_experts % self.ep:
                out.append(f"n_experts={n_experts} is not divisible by ep={self.ep}")
            if self.dp % self.ep:
                out.append(f"ep={self.ep} must divide dp={self.dp} (expert groups borrow dp ranks)")
        return out

    def compressor_problems(self, n_experts: int | None) -> list[str]:
        """What is wrong with `dp_compressor` and its options (chapter 08's own checks)."""
        options = self.compressor_options()
        if self.dp_compressor == "none":
            return [f"{', '.join(f'dp_{k}={v!r}' for k, v in options.items())} without a "
                    "dp_compressor"] if options else []
        from parlab.compression.compressed_reducers import compressor_options

        try:
            compressor_options(self.dp_compressor, options, prefix="dp_")
        except ValueError as error:
            return [str(error).replace("compressor=", "dp_compressor=", 1)]
        out = []
        if self.zero:
            out.append(f"dp_compressor={self.dp_compressor!r} with zero={self.zero}: ZeRO "
                       "reduce-scatters its own flat units (use zero=0)")
        if self.dp_sync != "flat":
            out.append(f"dp_compressor={self.dp_compressor!r} with dp_sync={self.dp_sync!r}: the "
                       "compressor sends its own messages (use dp_sync='flat')")
        if n_experts is not None:
            out.append(f"dp_compressor={self.dp_compressor!r} with a mixture-of-experts model: the "
                       "planner's per-parameter closed form covers the dense GPT only")
        return out

    def validate(self, world_size: int, model_config, batch_size: int,
                 n_experts: int | None = None) -> None:
        problems = self.problems(world_size, model_config, batch_size, n_experts)
        if problems:
            raise ValueError(f"plan {self.describe()} does not fit: " + "; ".join(problems))


def factorizations(world_size: int, dims: int) -> list[tuple[int, ...]]:
    """Every ordered tuple of `dims` positive ints whose product is world_size."""
    divisors = [d for d in range(1, world_size + 1) if world_size % d == 0]
    return [combo for combo in itertools.product(divisors, repeat=dims)
            if math.prod(combo) == world_size]


def enumerate_plans(world_size: int, model_config, batch_size: int, *,
                    zero_stages=(0,), microbatches=(1,), schedules=("1f1b",),
                    checkpoint=(False,), n_experts: int | None = None,
                    ep_degrees=(1,)) -> list[Plan]:
    """Every valid plan of world_size over dp × tp × pp × cp and the knobs given."""
    plans = []
    for dp, tp, pp, cp in factorizations(world_size, 4):
        for zero, m, schedule, ckpt, ep in itertools.product(
                zero_stages, microbatches, schedules, checkpoint, ep_degrees):
            if pp == 1 and (m != microbatches[0] or schedule != schedules[0]):
                continue  # micro-batches and schedule only matter to a pipeline
            plan = Plan(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero,
                        microbatches=m if pp > 1 else 1, schedule=schedule, checkpoint=ckpt)
            if not plan.problems(world_size, model_config, batch_size, n_experts):
                plans.append(plan)
    return plans
