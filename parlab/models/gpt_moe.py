"""The tiny GPT with mixture-of-experts MLPs (`model="gpt-moe"`), deterministic from a seed.

Shazeer et al., "Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts
Layer" (2017): a router picks k of E experts per token. GShard (Lepikhin et al. 2020): capacity
C = ⌈capacity_factor · N·k / E⌉ per expert, overflow dropped, first choices first. Switch
(Fedus et al., JMLR 2022): the load-balancing loss α·E·Σ_e f_e·P_e. DeepSeek-MoE (Dai et al.
2024): a shared expert; DeepSeek-V3 (2024): a bias b_e used only to choose, b_e += γ·sign(mean
load − load_e).

Routing is global (queues ordered by slot, then by place in the *global* batch), so any number of
ranks routes and drops exactly as one process; `MoE.exchange_counts` is the hook a distributed
layer overrides (`parlab.models.moe_routing`). The rest is `parlab.models.gpt`; `moe_every=2`
puts an MoE in every other block. Even routing and shapes-only runs: docs/models.md,
`parlab.models.gpt_moe`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.models import gpt, node_limited
from parlab.models.data import text_batch, text_max_seq_len
from parlab.models.gpt import GPT, Block, CausalSelfAttention, GPTConfig, MLPBlock, _init_linear
from parlab.models.moe_routing import (  # noqa: F401  (re-exported: the routing plans' old home)
    EvenPlan,
    RoutingPlan,
    assignment_counts,
    capacity,
    even_counts,
    even_experts,
)
from parlab.models.spec import ModelSpec, register_model

ROUTINGS = ("topk", "even")  # by the router's scores; evenly, whatever the scores
_INT_FIELDS = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "n_experts", "top_k",
               "moe_every")


@dataclass(frozen=True)
class GPTMoEConfig(GPTConfig):
    n_experts: int = 4  # E
    top_k: int = 2  # k experts per token
    capacity_factor: float | None = 1.25  # None: no capacity, nothing is dropped
    aux_loss: float = 0.01  # α of Switch's load-balancing loss; 0: off
    bias_update: float = 0.0  # γ of DeepSeek-V3's bias balancing; 0: off
    shared_expert: bool = False  # a dense MLP every token also takes (DeepSeek-MoE)
    moe_every: int = 1  # an MoE in blocks moe_every-1, 2·moe_every-1, ...
    expert_hidden: int = 0  # each expert's hidden width; 0: 4·n_embd (the dense MLP's)
    routing: str = "topk"  # "topk": by the router's scores; "even": fixed, balanced (`EvenPlan`)
    expert_nodes: int = 1  # G nodes of E/G contiguous experts (node-limited routing)
    node_limit: int = 0  # M: each token's experts on at most M nodes (DeepSeek-V3); 0: off

    @property
    def hidden(self) -> int:
        return self.expert_hidden or 4 * self.n_embd

    def validate(self) -> None:
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTMoEConfig.{name}={value!r} must be an int >= 1")
        GPTConfig(**{f.name: getattr(self, f.name) for f in fields(GPTConfig)}).validate()
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k={self.top_k} is more than n_experts={self.n_experts}")
        cf = self.capacity_factor
        if cf is not None and (isinstance(cf, bool) or not isinstance(cf, (int, float))
                               or not 0 < cf < math.inf):
            raise ValueError(f"capacity_factor={cf!r} must be a finite number > 0 (or None: no "
                             "capacity)")
        for name in ("aux_loss", "bias_update"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 <= value < math.inf:
                raise ValueError(f"{name}={value!r} must be a finite number >= 0")
        if not isinstance(self.shared_expert, bool):
            raise ValueError(f"shared_expert={self.shared_expert!r} must be True or False")
        if isinstance(self.expert_hidden, bool) or not isinstance(self.expert_hidden, int) \
                or self.expert_hidden < 0:
            raise ValueError(f"expert_hidden={self.expert_hidden!r} must be an int >= 0")
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing={self.routing!r} must be one of {ROUTINGS}")
        node_limited.check(self.n_experts, self.top_k, self.expert_nodes, self.node_limit)
        if self.moe_every > self.n_layer:
            raise ValueError(f"moe_every={self.moe_every} is more than n_layer={self.n_layer}: "
                             "no block would hold an MoE")


class Router(nn.Module):
    """softmax(x·Wᵀ) over E experts; the top-k of (probabilities + bias) are chosen, the gates
    are the chosen probabilities (the bias steers the choice only: DeepSeek-V3)."""

    def __init__(self, cfg: GPTMoEConfig):
        super().__init__()
        self.top_k, self.n_experts, self.routing = cfg.top_k, cfg.n_experts, cfg.routing
        self.nodes, self.node_limit = cfg.expert_nodes, cfg.node_limit
        self.gate = nn.Linear(cfg.n_embd, cfg.n_experts, bias=False)
        self.register_buffer("bias", torch.zeros(cfg.n_experts))

    def forward(self, x):
        probs = F.softmax(self.gate(x), dim=-1)  # (N, E)
        if self.routing == "even":
            experts = even_experts(x.size(0), self.n_experts, self.top_k)  # (N, k) by place
        elif self.node_limit:  # DeepSeek-V3: the top k among the experts of M nodes
            experts = node_limited.limited_topk(probs.detach() + self.bias, self.top_k,
                                                self.nodes, self.node_limit)  # (N, k)
        else:
            experts = torch.topk(probs.detach() + self.bias, self.top_k, dim=-1).indices  # (N, k)
        return probs, experts, probs.gather(1, experts)  # (N, E), (N, k), (N, k)


def run_experts(rows, row_expert, w_in, w_out, first: int = 0, sizes: list[int] | None = None):
    """Each row through its expert's MLP: rows (A, C), row_expert (A,) ids in [first, first+E');
    w_in (E', C, H), w_out (E', H, C). Rows are grouped by expert, computed, put back. sizes:
    rows per expert when the routing plan knows them (None: counted from row_expert)."""
    order = torch.argsort(row_expert, stable=True)  # (A,) rows grouped by expert
    if sizes is None:
        sizes = torch.bincount(row_expert - first, minlength=w_in.size(0)).tolist()  # (E',)
    groups = rows[order].split(sizes)  # E' × (A_e, C)
    outs = [F.gelu(g @ w_in[e]) @ w_out[e] for e, g in enumerate(groups)]  # E' × (A_e, C)
    return torch.cat(outs)[torch.argsort(order)] if outs else rows  # (A, C) in the rows' order


class MoE(nn.Module):
    """Router + E experts (+ a shared expert); `exchange_counts`, `expert_rows` and `mix` are where
    a distributed layer differs (`parlab.expert_parallel.layer`)."""

    def __init__(self, cfg: GPTMoEConfig):
        super().__init__()
        self.cfg = cfg
        self.router = Router(cfg)
        self.w_in = nn.Parameter(torch.empty(cfg.n_experts, cfg.n_embd, cfg.hidden))
        self.w_out = nn.Parameter(torch.empty(cfg.n_experts, cfg.hidden, cfg.n_embd))
        self.shared = MLPBlock.for_config(cfg) if cfg.shared_expert else None
        self.aux = None  # this forward's load-balancing loss (a scalar tensor) or None
        self.log: list[dict] = []  # per training forward: load, capacity, dropped, kept

    def exchange_counts(self, counts):
        """(k, E) this rank's counts -> ((W, k, E) every rank's, this rank's index)."""
        return counts.unsqueeze(0), 0  # (1, k, E)

    def expert_rows(self, rows, row_expert, plan: RoutingPlan):
        """Kept assignments' rows (A, C), sorted by expert -> the experts' outputs (A, C)."""
        return run_experts(rows, row_expert, self.w_in, self.w_out, sizes=plan.expert_sizes())

    def mix(self, flat, experts, gates, keep, plan: RoutingPlan):
        """Σ over a token's kept slots of gate · expert(token): flat (N, C) -> (N, C)."""
        token, slot = plan.assignments(keep)  # (A,), (A,) kept assignments
        by_expert = torch.argsort(experts[token, slot], stable=True)  # (A,)
        token, slot = token[by_expert], slot[by_expert]  # sorted by expert (so by owner rank)
        out = self.expert_rows(flat[token], experts[token, slot], plan)  # (A, C)
        weighted = out * gates[token, slot].unsqueeze(1)  # (A, C)
        return flat.new_zeros(flat.shape).index_add(0, token, weighted)  # (N, C) summed over slots

    def forward(self, x):
        B, T, C = x.shape
        flat = x.reshape(B * T, C)  # (N, C)
        probs, experts, gates = self.router(flat)  # (N, E), (N, k), (N, k)
        if self.cfg.routing == "even":  # the counts message as always; no value of it is read
            counts, rank = self.exchange_counts(torch.tensor(even_counts(B * T, self.cfg)))
            plan = EvenPlan(B * T, counts.size(0), rank, self.cfg)
        else:
            counts, rank = self.exchange_counts(assignment_counts(experts, self.cfg.n_experts))
            plan = RoutingPlan(counts, rank, capacity(int(counts.sum()), self.cfg))  # (W, k, E)
        y = self.mix(flat, experts, gates, plan.keep_mask(experts), plan)  # (N, C)
        if self.shared is not None:
            y = y + self.shared(flat)  # (N, C)
        self.balance(plan, probs)
        return y.view(B, T, C)  # (B, T, C)

    def balance(self, plan: RoutingPlan | EvenPlan, probs) -> None:
        """Switch's auxiliary loss with the global f_e (so the ranks' terms sum to the single
        process's), DeepSeek-V3's bias step, and the step's log."""
        load = plan.load().to(probs.dtype)  # (E,)
        E = load.numel()
        self.aux = (self.cfg.aux_loss * E * (load / load.sum() * probs.mean(0)).sum()
                    if self.cfg.aux_loss else None)
        if self.training and torch.is_grad_enabled():
            if self.cfg.bias_update:
                with torch.no_grad():
                    self.router.bias += self.cfg.bias_update * torch.sign(load.mean() - load)
            self.log.append(plan.log_entry(load))


def moe_block(cfg: GPTMoEConfig, moe: bool) -> Block:
    """The GPT's block (`parlab.models.gpt.Block`) whose MLP is an MoE when `moe`."""
    return Block(nn.LayerNorm(cfg.n_embd), CausalSelfAttention.for_config(cfg),
                 nn.LayerNorm(cfg.n_embd), MoE(cfg) if moe else MLPBlock.for_config(cfg))


class GPTMoE(GPT):
    """GPT whose blocks (every `moe_every`-th) hold an MoE; loss = cross-entropy + the aux terms.

    Activation checkpointing is not offered: recomputing a block would route again with the
    bias already stepped."""

    def make_block(self, cfg: GPTMoEConfig, index: int) -> Block:
        return moe_block(cfg, (index + 1) % cfg.moe_every == 0)

    def init_mlp(self, mlp: nn.Module, g: torch.Generator, proj_std: float) -> None:
        """An MoE draws its router, then its experts (in, out), then its shared expert."""
        if isinstance(mlp, MoE):
            _init_linear(mlp.router.gate, g)
            with torch.no_grad():
                mlp.w_in.normal_(0.0, 0.02, generator=g)
                mlp.w_out.normal_(0.0, proj_std, generator=g)
            mlp = mlp.shared
        if mlp is not None:
            super().init_mlp(mlp, g, proj_std)

    def __setattr__(self, name, value):
        if name == "activation_checkpointing" and value:
            raise ValueError("checkpoint=True is not supported by model 'gpt-moe' (recomputing a "
                             "block would route it again)")
        super().__setattr__(name, value)

    def moe_layers(self) -> list[MoE]:
        return [b.mlp for b in self.blocks if isinstance(b.mlp, MoE)]

    def loss(self, idx, targets):
        loss = super().loss(idx, targets)
        for moe in self.moe_layers():
            if moe.aux is not None:
                loss = loss + moe.aux
        return loss


# ----------------------------------------------------------------------------- counts, registration
def param_count(cfg: GPTMoEConfig) -> int:
    """Parameters of the MoE GPT, from the config alone: the GPT's trunk, each MoE block's experts
    (w_in, w_out), router and shared expert, each other block's dense 4× MLP."""
    C, moe = cfg.n_embd, cfg.n_layer // cfg.moe_every
    expert = 2 * cfg.n_experts * C * cfg.hidden + C * cfg.n_experts  # w_in, w_out, router
    expert += 8 * C * C if cfg.shared_expert else 0
    return gpt.trunk_param_count(cfg) + moe * expert + (cfg.n_layer - moe) * 8 * C * C


def activation_count(cfg: GPTMoEConfig, batch_size: int) -> int:
    """The GPT's generous count plus each MoE block's routed copies, expert activations and
    router scores."""
    C, tokens = cfg.n_embd, batch_size * cfg.block_size
    routed = tokens * cfg.top_k * (2 * C + 2 * cfg.hidden) + 3 * tokens * cfg.n_experts
    return (gpt.activation_count(cfg, batch_size)
            + (cfg.n_layer // cfg.moe_every) * (routed + 8 * tokens * C))


register_model(ModelSpec("gpt-moe", GPTMoEConfig, GPTMoE, param_count, activation_count, text_batch,
                         text_max_seq_len,
                         no_checkpointing="recomputing a block would route its tokens again"))
