"""The U-Net's skip connections as a stage strategy of the one pipeline executor: a skip travels
from an early stage straight to a late one (Zhu et al., LAMP, MICCAI 2020).

`parlab.pipeline.executor.PipelineExecutor` runs the same action lists as for any model;
`UNetSkips` sends each skip produced by F(s, i) at once to its consumer stage t > s ("pp-skip",
received just before F(t, i)) and its gradient back ("pp-skip-bwd", a further backward root at
B(s, i)). Every skip is one `Comm` send/recv (`unet_cost.skip_bytes_per_step`). Deadlock-free
because sends never block and the main path already orders F(s, i) before F(t, i). `UNetStaged`
is what the U-Net gives the pipeline schemes (registered as "unet3d"). The argument in full:
docs/pipeline.md, `parlab.pipeline.unet_executor`.
"""

from __future__ import annotations

import torch

from parlab.pipeline import lamp, unet_stages
from parlab.pipeline.executor import StageStrategy
from parlab.pipeline.stages import StagedModel, register_staged
from parlab.pipeline.unet_stages import layer_output_shape, skip_shape


class UNetSkips(StageStrategy):
    """U-Net stages ({id: UNetStage}): F takes the skips addressed to the stage and sends the ones
    it produces; B takes their gradients as further roots and sends the received skips' back."""

    def __init__(self, stages: dict, skip_f, skip_b, model_config):
        self.stages, self.skip_f, self.skip_b, self.cfg = stages, skip_f, skip_b, model_config
        self.box: dict[tuple, torch.Tensor] = {}  # ("S"|"SB", level, mb): a skip kept on this rank

    def recv_shape(self, op: str, stage: int, rows: int) -> tuple:
        """The main path entering `stage` (RECV_F) or leaving it (RECV_B): a layer's output."""
        stage = self.stages[stage]
        return layer_output_shape(self.cfg, stage.lo - 1 if op == "RECV_F" else stage.hi - 1,
                                  rows)  # (mb, c, s, s, s)

    def _buffer(self, level: int, rows: int) -> torch.Tensor:
        return torch.empty(skip_shape(self.cfg, level, rows), dtype=self.executor.dtype)

    def inputs(self, s: int, i: int, rows: int) -> dict:
        """The skips addressed to stage s, produced stages earlier."""
        stage, x = self.stages[s], self.executor
        skips_in = {}
        for k in stage.skips_in:
            src = x.schedule.rank_of(stage.producer[k])
            got = self.box.pop(("S", k, i)) if src == x.pp_rank else \
                self.skip_f.recv(self._buffer(k, rows), src, phase="pp-skip")  # (mb, c_k, S/2^k, ., .)
            skips_in[k] = got.detach().requires_grad_()
        return skips_in

    def forward(self, s: int, i: int, stage, x, skips_in: dict):
        return stage(x, skips_in)  # (mb, c, s, s, s), {k: (mb, c_k, S/2^k, ., .)}

    def outputs(self, step: int, s: int, i: int, x, out, skips_out: dict) -> None:
        """Each skip produced here straight to its consumer stage, past the ones between."""
        stage, x = self.stages[s], self.executor
        for k, h in skips_out.items():
            dst = x.schedule.rank_of(stage.consumer[k])
            if dst == x.pp_rank:
                self.box[("S", k, i)] = h.detach()
            else:
                x.sends.append(self.skip_f.isend(h.detach(), dst, phase="pp-skip"))  # (mb, c_k, ...)

    def roots(self, s: int, i: int, skips_out: dict, rows: int) -> tuple[list, list]:
        """The skips this stage produced, with ∂L/∂skip from the stage that concatenated each."""
        stage, x = self.stages[s], self.executor
        roots, grads = [], []
        for k in stage.skips_out:
            src = x.schedule.rank_of(stage.consumer[k])
            g = self.box.pop(("SB", k, i)) if src == x.pp_rank else \
                self.skip_b.recv(self._buffer(k, rows), src, phase="pp-skip-bwd")  # ∂L/∂skip
            roots.append(skips_out[k])
            grads.append(g)
        return roots, grads

    def input_grads(self, s: int, i: int, skips_in: dict) -> None:
        """∂L/∂skip back to the stage that produced it."""
        stage, x = self.stages[s], self.executor
        for k, h in skips_in.items():
            src = x.schedule.rank_of(stage.producer[k])
            if src == x.pp_rank:
                self.box[("SB", k, i)] = h.grad
            else:
                x.sends.append(self.skip_b.isend(h.grad, src, phase="pp-skip-bwd"))  # (mb, c_k, ...)


class UNetStaged(StagedModel):
    """The 3-D U-Net cut into stages whose skips cross to later stages (module docstring)."""

    title = "U-Net"
    schedules = ("naive", "gpipe", "1f1b", "eager-1f1b")  # one stage per rank, one backward
    by_memory = True

    def __init__(self):
        super().__init__(unet_stages.n_layers)  # Down × (L-1), Bottom, Up × (L-1), Head

    def build_stages(self, model, stage_ids: list[int], counts: list[int]) -> dict:
        return unet_stages.build_stages(model, stage_ids, counts)

    def time_split(self, model, model_config, rows: int, stages: int) -> list[int]:
        return lamp.time_partition(lamp.layer_times(model, model_config, rows), stages)

    def memory_split(self, model, model_config, rows: int, stages: int, in_flight: list[int],
                     optimizer: str) -> list[int]:
        return lamp.memory_partition(lamp.layer_sizes(model, model_config, rows), stages,
                                     in_flight, lamp.PARAM_COPIES.get(optimizer, 2))

    def strategy(self, ctx, groups: list[list[int]], stages: dict) -> UNetSkips:
        skip_f, skip_b = ctx.comm.split(groups, "pp-skip"), ctx.comm.split(groups, "pp-skip-bwd")
        return UNetSkips(stages, skip_f, skip_b, ctx.cfg.model_config)

    def extras(self, model_config, counts: list[int]) -> dict:
        return {"skip_routes": unet_stages.skip_routes(model_config.levels, counts)}


register_staged("unet3d", UNetStaged())
