"""What every whole model of `parlab.models` shares: a validated config and the checkpoint switch.

`build_model(..., checkpoint=True)` sets `activation_checkpointing` on the model it built, and
each model's forward recomputes its blocks in backward when it is on (`parlab.models.gpt.maybe_checkpoint`).
The config is validated before any parameter exists, so a bad width or depth is refused naming
the value instead of failing inside a layer.
"""

from __future__ import annotations

from torch import nn


class ConfiguredModel(nn.Module):
    """An `nn.Module` built from a config dataclass with a `validate()` method."""

    activation_checkpointing = False  # set by build_model(..., checkpoint=True)

    def __init__(self, cfg):
        super().__init__()
        cfg.validate()
        self.config = cfg
