"""What an MoE buys: loss at equal *active* parameters (so equal FLOPs per token, Kaplan et al.
2020), dense vs MoE, over several seeds, with the spread between seeds.

Shazeer et al. 2017 and Switch (Fedus et al., JMLR 2022) report that an MoE reaches a dense
model's loss in fewer steps at the same FLOPs per token, and Jelassi et al. 2024 that the gain
lives in what the model must memorise. Two tasks (`task`): "lookup", a table of K² random facts
(`parlab.expert_parallel.lookup`), and "text", the chapters' next-character data. The tiny GPT
(C = 32) against `gpt-moe` whose router and k experts of width h = (8C − E)/(2k) hold what the
GPT's MLP holds (`explore.dense.equal_active_width`), no capacity, Switch's auxiliary loss. Each
seed draws both models' initial parameters, the batches (and the table); the loss compared is
the cross-entropy alone (auxiliary term left out), mean of the last `tail` steps. Verdict: a gain
beyond the spread when the mean gain exceeds the larger of the two models' seed spreads (max −
min). Trained in this process as `parlab.run("single")` trains (AdamW, lr 3e-3).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from parlab.engine.loop import make_optimizer
from parlab.expert_parallel import lookup
from parlab.expert_parallel.explore.dense import active_parameters, equal_active_width
from parlab.models import build_model, model_config
from parlab.models.data import global_batch, text_tokens
from parlab.models.gpt import GPT

LR = 3e-3  # parlab.run's AdamW default
TASKS = ("lookup", "text")


def moe_overrides(n_experts: int, top_k: int) -> dict:
    """gpt-moe at the tiny GPT's active parameters: E experts of width (8C − E)/(2k), dropless."""
    width = model_config("gpt-moe").n_embd
    return {"n_experts": n_experts, "top_k": top_k, "capacity_factor": None,
            "expert_hidden": equal_active_width(top_k, n_experts, width)}


def _batches(name: str, task: str, seed: int, batch_size: int, block: int):
    """step -> (x (B, T), y (B, T)), and the loss of (model, x, y) the task scores."""
    if task == "text":
        return (lambda step: global_batch(name, step, batch_size, seed, block)), GPT.loss
    facts = lookup.table(seed)  # (K, K)
    return ((lambda step: lookup.batch(step, batch_size, seed, facts, block)),
            lambda model, x, y: lookup.value_loss(model(x), y))


def train_losses(name: str, overrides: dict, seed: int, steps: int, batch_size: int = 12,
                 task: str = "text") -> list:
    """Per step, the task's cross-entropy of `name` on that step's batch before its update (the
    MoE's auxiliary loss is trained on but not counted)."""
    cfg = model_config(name, overrides)
    model = build_model(name, cfg, seed)
    opt = make_optimizer(model.parameters(), SimpleNamespace(optimizer="adamw", lr=LR))
    draw, loss = _batches(name, task, seed, batch_size, cfg.block_size)
    out, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)  # one core, as a rank runs: tiny matmuls gain nothing from more
    try:
        for step in range(steps):
            x, y = draw(step)  # (B, T), (B, T)
            ce = loss(model, x, y)  # one forward; each MoE layer keeps its auxiliary term
            aux = [m.aux for m in getattr(model, "moe_layers", list)() if m.aux is not None]
            opt.zero_grad()
            (ce + sum(aux)).backward()  # what GPTMoE.loss trains on
            opt.step()
            out.append(float(ce.detach()))
    finally:
        torch.set_num_threads(threads)
    return out


def compare(steps: int = 150, seeds=(0, 1, 2), n_experts: int = 8, top_k: int = 1,
            tail: int = 20, task: str = "lookup", batch_size: int = 12) -> dict:
    """Both models over `seeds`; each seed's mean loss over the last `tail` steps."""
    if 2 * tail > steps:
        raise ValueError(f"steps={steps} must be at least 2·tail = {2 * tail}")
    if len(seeds) < 2:
        raise ValueError(f"seeds={tuple(seeds)}: a seed spread needs at least 2 seeds")
    if task not in TASKS:
        raise ValueError(f"task={task!r} is not one of {TASKS}")
    torch.manual_seed(0)  # nothing here draws from the global generator; fixed anyway
    over = moe_overrides(n_experts, top_k)
    out = {"overrides": over, "steps": steps, "tail": tail, "seeds": tuple(seeds), "task": task,
           "batch_size": batch_size, "counts": active_parameters(over)}
    for name, cfg in (("dense", {}), ("moe", over)):
        model = "gpt" if name == "dense" else "gpt-moe"
        curves = [train_losses(model, cfg, s, steps, batch_size, task) for s in seeds]
        out[name + "_curves"] = curves
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


def describe_task(out: dict) -> str:
    """What was trained on, and how many times each fact or character came by."""
    seen = out["steps"] * out["batch_size"] * 32  # tokens
    if out["task"] == "text":
        return (f"task text: {seen:,} characters of data/tinytext.txt's {text_tokens().numel():,} "
                f"({seen / text_tokens().numel():.2f} passes), all positions scored")
    facts, values = lookup.KEYS ** 2, out["steps"] * out["batch_size"] * len(range(1, 32, 3))
    return (f"task lookup: {facts:,} random facts (a, b) → v, {values:,} values scored "
            f"(each fact about {values / facts:.0f} times); chance ln 96 = {math.log(96):.3f} nats")


def show(steps: int = 150, seeds=(0, 1, 2), n_experts: int = 8, top_k: int = 1,
         task: str = "lookup", batch_size: int = 12) -> dict:
    """Run `compare`, print each seed's losses, the spread and the verdict."""
    out = compare(steps, seeds, n_experts, top_k, task=task, batch_size=batch_size)
    c, h = out["counts"], out["overrides"]["expert_hidden"]
    print(f"dense gpt ({c['dense']:,} parameters) vs gpt-moe E = {n_experts}, k = {top_k}, experts "
          f"{h} wide, no capacity ({c['moe_total']:,} parameters, {c['moe_active']:,} active per "
          f"token: {'equal' if c['moe_active'] == c['dense'] else 'NOT equal'} FLOPs per token); "
          f"{steps} steps of {batch_size} × 32 tokens, cross-entropy over the last "
          f"{out['tail']} steps, this CPU (a loss does not depend on a clock)")
    print(describe_task(out))
    for name in ("dense", "moe"):
        print(f"  {name:<5} seeds {list(out['seeds'])}: "
              + ", ".join(f"{v:.3f}" for v in out[name])
              + f"  (mean {sum(out[name]) / len(out[name]):.3f}, spread "
              f"{max(out[name]) - min(out[name]):.3f})")
    v = verdict(out)
    paired = [d - m for d, m in zip(out["dense"], out["moe"])]  # same seed: same batches
    print(f"gain dense − MoE {v['gain']:+.3f} nats against a seed spread of {v['spread']:.3f}: "
          f"{v['verdict']}; per seed (same batches) " + ", ".join(f"{g:+.3f}" for g in paired)
          + f": the MoE ahead on {sum(g > 0 for g in paired)} of {len(paired)}")
    falling = {n: (sum(out[n + "_before"]) - sum(out[n])) / len(out[n]) for n in ("dense", "moe")}
    print(f"still learning: over the last {out['tail']} steps the loss fell by "
          f"{falling['dense']:.3f} (dense) and {falling['moe']:.3f} (MoE) nats against the "
          f"{out['tail']} steps before")
    return {**out, **v}


def draw(out: dict, window: int = 10):
    """Each model's loss per step (a running mean over `window` steps): the seeds' mean as a line,
    their min–max as a band, chance (ln 96) dashed on the lookup task."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    for name, color in (("dense", "tab:grey"), ("moe", "tab:blue")):
        smooth = [[sum(c[max(0, i - window + 1):i + 1]) / len(c[max(0, i - window + 1):i + 1])
                   for i in range(len(c))] for c in out[name + "_curves"]]
        steps = range(len(smooth[0]))
        per_step = list(zip(*smooth))  # (steps, seeds)
        ax.plot(steps, [sum(v) / len(v) for v in per_step], color=color, label=name)
        ax.fill_between(steps, [min(v) for v in per_step], [max(v) for v in per_step],
                        color=color, alpha=0.25)
    if out["task"] == "lookup":
        ax.axhline(math.log(lookup.VOCAB), color="black", linestyle="--", linewidth=0.8,
                   label="chance")
    ax.set_xlabel("step")
    ax.set_ylabel(f"loss ({window}-step mean)")
    ax.set_title(f"task {out['task']}: dense vs MoE at equal active parameters, "
                 f"{len(out['seeds'])} seeds (band: min–max)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
