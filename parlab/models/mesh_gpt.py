"""The tiny GPT open to every parallel dimension: what each chapter's `apply_*` takes and returns.

torchtitan's `parallelize_llama` style: one reference model, then explicit functions applied in a
fixed order, each taking the mesh and returning the model (`parlab.planner.compose.parallelize`
orders them). `gpt_on_mesh` adopts the reference GPT's own modules (no copy, same parameter
names); each dimension then replaces what it parallelises:

    tensor parallelism (ch. 03)   block.attn / block.mlp parts: column- and row-parallel linears
    context parallelism (ch. 06)  `positions` (this rank's tokens) and every `attn.attend` (ring)
    expert parallelism (ch. 07)   the MoE MLPs; the "ep" dimension (the experts' gradient sum)
    pipeline (ch. 04)             `pipeline`: this rank's stage, its schedule, its comms; the "pp"
                                  dimension (the tied embedding's sum)
    data parallelism / ZeRO       `data_comm` (the dp × cp group); the "dp" dimension (a
                                  reducer) or the "zero" one (the engine) (ch. 01, 02)

The loss is the mean cross-entropy of this rank's own tokens; `parlab.planner.compose` says why
averaging it over the dp × cp ranks makes every plan exact.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from parlab.models.gpt import Block, CausalSelfAttention
from parlab.models.gpt_moe import MoE
from parlab.models.gpt_trunk import embed_tokens, head_logits, maybe_checkpoint, mean_token_loss, run_blocks


class MeshBlock(Block):
    """The reference's pre-LayerNorm block (its own modules), recomputed in backward when
    `checkpoint` (the recomputation redoes its tp and cp communication too)."""

    def __init__(self, block, checkpoint: bool):
        a = block.attn  # a fresh attention over the same linears: apply_cp sets its `attend`
        super().__init__(block.ln_1, CausalSelfAttention(a.c_attn, a.c_proj, a.n_head, a.head_dim,
                                                         a.n_kv_head, a.rope_theta),
                         block.ln_2, block.mlp)
        self.checkpoint = checkpoint

    def forward(self, x):
        return maybe_checkpoint(super().forward, self.checkpoint, x)  # (B, T/cp, C)


class MeshGPT(nn.Module):
    """The tiny GPT with the reference's modules and parameter names, open to every dimension:
    `positions` are the sequence positions of the tokens this rank holds (all of them until
    `apply_cp`); `embed` and `head` are what pipeline stages call."""

    criterion = None  # (model, hidden, targets) -> loss; None: the tied head's mean cross-entropy

    def __init__(self, model):
        super().__init__()
        self.config = model.config
        # registered in the reference's order (wte, wpe, blocks, ln_f, lm_head), so parameters()
        # — and every bucket or flat unit cut along it — is the reference's order too
        self.wte = model.wte
        if hasattr(model, "wpe"):  # learned positions (not with RoPE)
            self.wpe = model.wpe
        checkpoint = getattr(model, "activation_checkpointing", False)
        self.blocks = nn.ModuleList(MeshBlock(b, checkpoint) for b in model.blocks)
        self.ln_f = model.ln_f
        if hasattr(model, "lm_head"):  # an untied head (tie_head=False)
            self.lm_head = model.lm_head
        self.positions = torch.arange(model.config.block_size)  # (T,) until apply_cp
        self.pipeline = None  # split_pp's PipelineParts
        self.data_comm = None  # apply_dp / apply_zero: the dp × cp group
        # what each step must do for a dimension (dp's reducer, ZeRO's engine, the experts' and
        # the tied embedding's sums) is the Dimension its apply_* registers:
        # `parlab.engine.dimension.dimensions(model)`

    def embed(self, idx):
        return embed_tokens(self, idx, self.positions)  # (B, T/cp, C) at the tokens' positions

    def head(self, x):
        return head_logits(self, x)  # (B, T/cp, vocab)

    def forward(self, idx):
        x = run_blocks(self.blocks, self.embed(idx))  # (B, T/cp, C); MeshBlock checkpoints itself
        if self.criterion is not None:
            return x  # (B, T/cp, C): the criterion's head takes it
        return self.head(x)  # (B, T/cp, vocab)

    def loss(self, idx, targets):
        """Mean cross-entropy of this rank's tokens (its share: / (dp·cp), see the module doc), in
        fp32 also in mixed precision, as the reference; `criterion(model, hidden, targets)`, when
        set (apply_tp's vocabulary parallelism), replaces the head and the cross-entropy. Through
        `self(idx)`, so hooks on the model (ZeRO-3's gathers) run."""
        out = self(idx)  # (B, T/cp, vocab), or (B, T/cp, C) for the criterion
        if self.criterion is not None:
            loss = self.criterion(self, out, targets)
        else:
            loss = mean_token_loss(out, targets)
        for block in self.blocks:  # mixture-of-experts: + the load-balancing terms (gpt-moe)
            if isinstance(block.mlp, MoE) and block.mlp.aux is not None:
                loss = loss + block.mlp.aux
        return loss


def gpt_on_mesh(model) -> MeshGPT:
    """The reference GPT's modules (no copy) in a MeshGPT: what the apply_* functions take."""
    return MeshGPT(model)
