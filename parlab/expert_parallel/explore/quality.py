"""What an MoE buys: language-model loss at equal *active* parameters (so equal FLOPs per token,
Kaplan et al. 2020), dense vs MoE, over several seeds, with the spread between seeds.

Shazeer et al. 2017 and Switch (Fedus et al., JMLR 2022) report that an MoE reaches a dense
model's loss in fewer steps at the same FLOPs per token — Switch "up to 7x" faster pre-training
than T5 at the same computational resources — at ~10^5 steps of ~10^6 tokens, where a dense
model's parameters, not its data, limit it. Here: the tiny GPT (C = 32) against `gpt-moe` whose
router and k experts of width h = (8C − E)/(2k) hold what the GPT's MLP holds
(`explore.dense.equal_active_width`), no capacity (nothing dropped), Switch's auxiliary loss.
Each seed draws both models' initial parameters and the batches; the loss compared is the
cross-entropy alone (the auxiliary term left out), the mean of the last `tail` steps. Verdict: a
gain beyond the spread when the mean gain exceeds the larger of the two models' seed spreads
(max − min over seeds); each model trained in this process, as `parlab.run("single")` trains it
(`parlab.engine.loop.make_optimizer`: AdamW, lr 3e-3).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from parlab.engine.loop import make_optimizer
from parlab.expert_parallel.explore.dense import active_parameters, equal_active_width
from parlab.models import build_model, model_config
from parlab.models.data import global_batch
from parlab.models.gpt import GPT

LR = 3e-3  # parlab.run's AdamW default


def moe_overrides(n_experts: int, top_k: int) -> dict:
    """gpt-moe at the tiny GPT's active parameters: E experts of width (8C − E)/(2k), dropless."""
    width = model_config("gpt-moe").n_embd
    return {"n_experts": n_experts, "top_k": top_k, "capacity_factor": None,
            "expert_hidden": equal_active_width(top_k, n_experts, width)}


def train_losses(name: str, overrides: dict, seed: int, steps: int, batch_size: int = 12) -> list:
    """Per step, the cross-entropy of `name` on that step's batch before its update (the MoE's
    auxiliary loss is trained on but not counted)."""
    cfg = model_config(name, overrides)
    model = build_model(name, cfg, seed)
    opt = make_optimizer(model.parameters(), SimpleNamespace(optimizer="adamw", lr=LR))
    out, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)  # one core, as a rank runs: tiny matmuls gain nothing from more
    try:
        for step in range(steps):
            x, y = global_batch(name, step, batch_size, seed, cfg.block_size)  # (B, T), (B, T)
            ce = GPT.loss(model, x, y)  # one forward; each MoE layer keeps its auxiliary term
            aux = [m.aux for m in getattr(model, "moe_layers", list)() if m.aux is not None]
            opt.zero_grad()
            (ce + sum(aux)).backward()  # what GPTMoE.loss trains on
            opt.step()
            out.append(float(ce.detach()))
    finally:
        torch.set_num_threads(threads)
    return out


def compare(steps: int = 200, seeds=(0, 1, 2), n_experts: int = 8, top_k: int = 1,
            tail: int = 20) -> dict:
    """Both models over `seeds`; each seed's mean loss over the last `tail` steps."""
    if 2 * tail > steps:
        raise ValueError(f"steps={steps} must be at least 2·tail = {2 * tail}")
    torch.manual_seed(0)  # nothing here draws from the global generator; fixed anyway
    over = moe_overrides(n_experts, top_k)
    out = {"overrides": over, "steps": steps, "tail": tail, "seeds": tuple(seeds),
           "counts": active_parameters(over)}
    for name, cfg in (("dense", {}), ("moe", over)):
        model = "gpt" if name == "dense" else "gpt-moe"
        curves = [train_losses(model, cfg, s, steps) for s in seeds]
        out[name] = [sum(curve[-tail:]) / tail for curve in curves]
        out[name + "_before"] = [sum(curve[-2 * tail:-tail]) / tail for curve in curves]
    return out


def verdict(out: dict) -> dict:
    """Mean gain (dense − MoE, nats), each model's seed spread, and the verdict."""
    dense, moe = out["dense"], out["moe"]
    gain = sum(dense) / len(dense) - sum(moe) / len(moe)
    spread = max(max(dense) - min(dense), max(moe) - min(moe))
    word = ("MoE better beyond the spread" if gain > spread else
            "MoE worse beyond the spread" if -gain > spread else "no gain beyond the spread")
    return {"gain": gain, "spread": spread, "verdict": word}


def show(steps: int = 200, seeds=(0, 1, 2), n_experts: int = 8, top_k: int = 1,
         batch_size: int = 12) -> dict:
    """Run `compare`, print each seed's losses, the spread and the verdict, and the tokens each
    expert saw beside the papers' scale."""
    out = compare(steps, seeds, n_experts, top_k)
    c, h = out["counts"], out["overrides"]["expert_hidden"]
    print(f"dense gpt ({c['dense']:,} parameters) vs gpt-moe E = {n_experts}, k = {top_k}, experts "
          f"{h} wide, no capacity ({c['moe_total']:,} parameters, {c['moe_active']:,} active per "
          f"token: {'equal' if c['moe_active'] == c['dense'] else 'NOT equal'} FLOPs per token); "
          f"{steps} steps of {batch_size} × 32 characters, cross-entropy over the last "
          f"{out['tail']} steps, this CPU (loss does not depend on a clock)")
    for name in ("dense", "moe"):
        print(f"  {name:<5} seeds {list(out['seeds'])}: "
              + ", ".join(f"{v:.3f}" for v in out[name])
              + f"  (mean {sum(out[name]) / len(out[name]):.3f}, spread "
              f"{max(out[name]) - min(out[name]):.3f})")
    v = verdict(out)
    per_expert = steps * batch_size * 32 * top_k // n_experts
    paired = [d - m for d, m in zip(out["dense"], out["moe"])]  # same seed: same batches
    print(f"gain dense − MoE {v['gain']:+.3f} nats against a seed spread of {v['spread']:.3f}: "
          f"{v['verdict']}; per seed (same batches) " + ", ".join(f"{g:+.3f}" for g in paired)
          + f": the MoE ahead on {sum(g > 0 for g in paired)} of {len(paired)}")
    falling = {n: (sum(out[n + "_before"]) - sum(out[n])) / len(out[n]) for n in ("dense", "moe")}
    print(f"both still learning: over the last {out['tail']} steps the loss fell by "
          f"{falling['dense']:.3f} (dense) and {falling['moe']:.3f} (MoE) nats against the "
          f"{out['tail']} steps before; each expert saw about {per_expert:,} tokens (steps·B·T·k/E)")
    print("the papers' gains come from long runs on large data, where the dense model's parameters, "
          "not its steps, limit it: Switch-Base with 64 experts reaches T5-Base's quality at step "
          "60k instead of 450k at equal FLOPs per token (Fedus et al., JMLR 2022, §3.2); GShard's "
          "600 B-parameter MoE translates 100 languages better than dense baselines (Lepikhin et al., "
          "ICLR 2021)")
    return {**out, **v}
