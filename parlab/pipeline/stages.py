"""A pipeline stage is a contiguous run of the reference model's layers, cut out of the model itself.

Every rank builds the whole reference model from the seed (`parlab.engine.loop.build_model`) and keeps
only the layers of its own stages, so a stage's weights *are* the reference's weights and the
pipeline computes what the single process computes (GPipe, Huang et al. 2019, §2: a network is a
sequence of L layers cut into K cells). For the GPT the first stage also holds the embeddings and
the last stage the final LayerNorm and the head; the head is tied to the token embedding, so
first and last stage each hold a copy of `wte` whose gradients are summed before the update —
Megatron-LM's "embedding group" (Shoeybi et al. 2019; Narayanan et al., SC 2021).

What a model gives the pipeline beyond its layers — how many layers it cuts, how its stages are
built, how it is split by time or memory, which schedules it runs and what its stages do besides
passing one activation on — is its `StagedModel`, registered by name where its stages live
(`register_staged`: the GPT and the MLP here, the U-Net in `parlab.pipeline.unet_executor`); the
pipeline schemes look it up (`staged_model`) and never branch on the model's name.
"""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from parlab.core.cost import chunk_bounds, shard_sizes
from parlab.pipeline import partition


def layers_of(model: nn.Module) -> nn.ModuleList:
    """The repeated layers that stages split: GPT blocks, or the MLP's linear layers."""
    return model.blocks if hasattr(model, "blocks") else model.layers


def even_partition(n_layers: int, stages: int) -> list[int]:
    """Layers per stage, as even as possible (the first stages take the remainder)."""
    return shard_sizes(n_layers, stages)


def stage_bounds(counts: list[int]) -> list[tuple[int, int]]:
    """[lo, hi) of each stage's layers."""
    return chunk_bounds(counts)


class Stage(nn.Module):
    """Layers [lo, hi) of `model`; the first stage embeds, the last applies the head.

    The stage registers the model's own modules (so `stage.parameters()` are exactly the weights
    it uses), and calls the model's own `embed` / `head`; parameter names for the final state
    come from `model.named_parameters()`, the reference's names.
    """

    def __init__(self, model: nn.Module, index: int, n_stages: int, lo: int, hi: int):
        super().__init__()
        self.index, self.first, self.last = index, index == 0, index == n_stages - 1
        self.lo, self.hi = lo, hi
        self.is_gpt = hasattr(model, "blocks")
        self.n_layers = len(layers_of(model))
        self.layers = nn.ModuleList(layers_of(model)[lo:hi])
        if self.is_gpt and self.first:
            self.wte = model.wte
            if hasattr(model, "wpe"):  # learned positions (RoPE has none)
                self.wpe = model.wpe
        if self.is_gpt and self.last:
            if hasattr(model, "lm_head"):  # an untied head: the last stage's own
                self.ln_f, self.lm_head = model.ln_f, model.lm_head
            else:
                self.wte, self.ln_f = model.wte, model.ln_f
        self._model = [model]  # a list: not a submodule, so parameters() stay the stage's own

    def forward(self, x):
        model = self._model[0]
        if self.is_gpt:
            if self.first:
                x = model.embed(x)  # (mb, T) ids -> (mb, T, C)
            for layer in self.layers:
                x = layer(x)  # (mb, T, C)
            return model.head(x) if self.last else x  # (mb, T, vocab) or (mb, T, C)
        for i, layer in zip(range(self.lo, self.hi), self.layers):
            x = layer(x)  # (mb, d)
            if i < self.n_layers - 1:
                x = F.gelu(x)
        return x  # (mb, d_hidden) or (mb, d_out)

    def loss(self, output, targets):
        """The reference's loss on this micro-batch (the mean over its rows / tokens)."""
        output = output.float()  # (mb, ..., vocab) the loss in fp32 also in mixed precision
        return F.cross_entropy(output.reshape(-1, output.size(-1)), targets.reshape(-1))


def boundary_shape(model_config, rows: int) -> tuple:
    """Shape of the activation between two stages for `rows` samples."""
    if hasattr(model_config, "n_embd"):
        return (rows, model_config.block_size, model_config.n_embd)  # (mb, T, C)
    return (rows, model_config.d_hidden)  # (mb, d_hidden)


def keep_only(model: nn.Module, stage_ids: list[int], counts: list[int]) -> None:
    """Drop from `model` every layer (and embedding / head part) that no local stage uses."""
    bounds = stage_bounds(counts)
    local = {i for s in stage_ids for i in range(*bounds[s])}
    layers = layers_of(model)
    for i in range(len(layers)):
        if i not in local:
            layers[i] = nn.Identity()
    if hasattr(model, "blocks"):
        first, last = 0 in stage_ids, len(counts) - 1 in stage_ids
        untied = hasattr(model, "lm_head")
        if not first and hasattr(model, "wpe"):
            del model.wpe
        if not last:
            del model.ln_f
            if untied:
                del model.lm_head
        if not (first or (last and not untied)):  # an untied head leaves wte to the first stage
            del model.wte


def build_stages(model: nn.Module, stage_ids: list[int], counts: list[int]) -> dict[int, Stage]:
    """{stage id: Stage} for this rank's stages, cut from `model` (which keeps only those)."""
    keep_only(model, stage_ids, counts)
    bounds = stage_bounds(counts)
    return {s: Stage(model, s, len(counts), *bounds[s]) for s in stage_ids}


def tied_parameter(model: nn.Module):
    """The parameter shared by the first and last stage (GPT's wte), or None (also for a GPT
    with an untied head: its ends share nothing)."""
    wte = getattr(model, "wte", None)
    if not getattr(getattr(model, "config", None), "tie_head", True):  # tie_head=False
        return None
    return wte.weight if wte is not None else None


class StagedModel:
    """A model as the pipeline cuts it; this default is the layer-list models' (the GPT's blocks,
    the MLP's linears): `Stage`s that pass one activation (`boundary_shape`) from stage to stage,
    the default stage strategy of the executor, every schedule, 'balanced' by per-layer times
    (`partition`). A model whose stages do more overrides what changes (`unet_executor.UNetStaged`)."""

    title = "layer-list"  # the name its error messages use
    schedules: tuple | None = None  # the schedules it runs; None: every one
    by_memory = False  # a split by memory (partition="lamp", LAMP) exists

    def __init__(self, layers):
        self.layers = layers  # model_config -> the layers stages split

    def n_layers(self, model_config) -> int:
        return self.layers(model_config)

    def runs(self, schedule: str | None) -> bool:
        """Whether this model's stages run `schedule` (None: the scheme takes any)."""
        return schedule is None or self.schedules is None or schedule in self.schedules

    def build_stages(self, model: nn.Module, stage_ids: list[int], counts: list[int]) -> dict:
        return build_stages(model, stage_ids, counts)

    def time_split(self, model: nn.Module, model_config, rows: int, stages: int) -> list[int]:
        """Layers per stage balancing profiled time ('balanced')."""
        return partition.balanced_partition(partition.profile_layers(model, model_config, rows),
                                            stages)

    def memory_split(self, model: nn.Module, model_config, rows: int, stages: int,
                     in_flight: list[int], optimizer: str) -> list[int]:
        """Layers per stage balancing memory ('lamp'); only where `by_memory`."""
        raise ValueError(f"partition='lamp' is not defined for the {self.title} model")

    def strategy(self, ctx, groups: list[list[int]], stages: dict):
        """The executor's per-stage strategy (`executor.StageStrategy`); None: the default. Any
        channels it needs are split from `ctx.comm` over the pipeline `groups` here."""
        return None

    def boundary_shape(self, model_config, rows: int) -> tuple:
        return boundary_shape(model_config, rows)

    def extras(self, model_config, counts: list[int]) -> dict:
        """What a run reports besides every pipeline's extras."""
        return {}


STAGED: dict[str, StagedModel] = {}


def register_staged(model: str, staged: StagedModel) -> StagedModel:
    """Make model `model` (a name of `parlab.models.SPECS`) a pipeline model."""
    STAGED[model] = staged
    return staged


def staged_model(model: str) -> StagedModel:
    if model not in STAGED:
        raise ValueError(f"model={model!r} has no pipeline stages; pipelines cut {sorted(STAGED)}")
    return STAGED[model]


register_staged("gpt", StagedModel(lambda mc: mc.n_layer))  # its blocks
register_staged("mlp", StagedModel(lambda mc: mc.n_layer + 1))  # n_layer hidden + the output linear
