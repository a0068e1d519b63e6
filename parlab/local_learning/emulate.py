"""Local and interlocking learning in one process: the definition the distributed runs equal.

Every stage gets its own copy of the reference model cut to its layers (as on its rank) and its
auxiliary head; each step, every micro-batch goes through the stages, and each loss m is
differentiated with respect to exactly the parameters it may train — stages m−d … m and its own
head (`Route.reaching`) — with `torch.autograd.grad`: the truncated gradient of Gomez et al.
(JMLR 2022, §3) written as its definition rather than as messages. The tied embedding's two
copies are summed when the route keeps the tie. The distributed schemes must reproduce these
losses and parameters (1e-4): their bound, where they are not the reference itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from parlab.engine.loop import build_model, make_optimizer, micro_batches, state_of, step_batch
from parlab.local_learning.heads import AuxHead
from parlab.local_learning.layout import Layout
from parlab.local_learning.routes import Route
from parlab.pipeline import stages as stages_mod


@dataclass
class Emulation:
    losses: list[float]  # the true loss at each step (mean over micro-batches)
    aux_losses: list[list[float]]  # [step][stage] mean auxiliary loss (nan without a head)
    state: dict = field(default_factory=dict)


def emulate(cfg, layout: Layout, route: Route) -> Emulation:
    """Train `cfg.steps` steps of the route on one replica (dp = 1) of `layout`."""
    p, m = layout.pp, layout.microbatches
    stages, heads, params, optims, models = [], [], [], [], []
    for s in range(p):
        model = build_model(cfg)
        stage = stages_mod.build_stages(model, [s], list(layout.counts))[s]
        head = AuxHead(cfg.model_config, s, cfg.seed) if route.has_head(s) else None
        ps = list(model.parameters())
        hs = list(head.parameters()) if head is not None else []
        stages.append(stage), heads.append(head), models.append(model)
        params.append((ps, hs))
        optims.append(make_optimizer(ps + hs, cfg))
    losses, aux_log = [], []
    for step in range(cfg.steps):
        true, aux = [], [[] for _ in range(p)]
        for x, y in micro_batches(step_batch(cfg, step), m):  # m × (B/m, T)
            h, roots = x, []
            for s in range(p):
                h = stages[s](h)  # (mb, T, C), or logits on the last stage
                if s == p - 1:
                    loss = stages[s].loss(h, y)
                    true.append(loss.item())
                    roots.append((s, loss / m))
                elif heads[s] is not None:
                    a = heads[s].loss(h, y)
                    aux[s].append(a.item())
                    roots.append((s, route.weight(s) * a / m))
            for loss_index, root in roots:
                trained = [j for j in range(p) if loss_index in route.reaching(j)]
                targets = [q for j in trained for q in params[j][0]] + params[loss_index][1]
                grads = torch.autograd.grad(root, targets, retain_graph=True, allow_unused=True)
                for q, g in zip(targets, grads):
                    if g is not None:
                        q.grad = g.clone() if q.grad is None else q.grad + g
        if route.tied and p > 1 and cfg.model == "gpt":
            first, last = models[0].wte.weight, models[-1].wte.weight
            total = first.grad + last.grad  # (vocab, C) the tied copies' gradients summed
            first.grad, last.grad = total.clone(), total.clone()
        for opt in optims:
            opt.step()
            opt.zero_grad(set_to_none=True)
        losses.append(sum(true) / m)
        aux_log.append([sum(a) / len(a) if a else float("nan") for a in aux])
    state = {}
    for model in models:  # stage order: the last stage's copy of a shared name wins
        state.update(state_of(model))
    return Emulation(losses, aux_log, state)
