"""What notebook 07 runs: sparse vs dense, capacity and dropping drawn, the all-to-all drawn with
real counts, exactness, the ledger beside the closed forms, memory, load balancing (an auxiliary
loss in Switch's form vs DeepSeek-V3's bias), step times and the widget callback (`exercises`).

Papers: Shazeer et al. 2017 (top-k experts, the first load-balancing losses), GShard (Lepikhin et
al. 2021: capacity, all-to-all, auxiliary loss), Switch (Fedus et al. 2022: k = 1, the simplified
auxiliary loss), DeepSeek-V3 (2024: auxiliary-loss-free bias).
"""

from __future__ import annotations

import matplotlib.pyplot as plt

import parlab
from parlab.expert_parallel import cost
from parlab.expert_parallel.explore.dense import TIMING_BATCH, TIMING_LINK, TIMING_TOP_K, print_comparison
from parlab.models import build_model, model_config
from parlab.models.data import global_batch

BALANCING = {"none": {"aux_loss": 0.0}, "aux": {"aux_loss": 0.01},
             "bias": {"aux_loss": 0.0, "bias_update": 0.01}}


# ----------------------------------------------------------------------------- 1. intuition
def sparse_vs_dense(configs: dict[str, dict] | None = None) -> None:
    """Parameters held vs parameters each token uses (the FLOPs follow the latter)."""
    configs = configs or {"gpt-moe E=4 k=2": {}, "gpt-moe E=8 k=2": {"n_experts": 8},
                          "gpt-moe E=8 k=1": {"n_experts": 8, "top_k": 1}}
    print(f"{'model':<18} {'parameters':>11} {'active per token':>17} {'ratio':>6}")
    dense = cost.parameter_counts(model_config("gpt-moe", {"n_experts": 1, "top_k": 1}))
    print(f"{'dense (E=1, k=1)':<18} {sum(dense.values()):>11,} {sum(dense.values()):>17,} "
          f"{1:>6.2f}")
    for name, overrides in configs.items():
        m = model_config("gpt-moe", overrides)
        counts = cost.parameter_counts(m)
        active = counts["dense"] + counts["experts"] * m.top_k // m.n_experts
        total = sum(counts.values())
        print(f"{name:<18} {total:>11,} {active:>17,} {total / active:>6.2f}")


def first_plan(model_overrides: dict | None = None, seed: int = 0, batch_size: int = 12):
    """The initial model's routing of step 0's batch: one log entry per MoE layer."""
    m = model_config("gpt-moe", model_overrides)
    model = build_model("gpt-moe", m, seed)
    x, y = global_batch("gpt-moe", 0, batch_size, seed, m.block_size)
    model.loss(x, y)
    return [moe.log[0] for moe in model.moe_layers()]


def draw_capacity(model_overrides: dict | None = None):
    """Tokens routed to each expert, kept (inside the capacity) and dropped, per MoE layer."""
    plans = first_plan(model_overrides)
    fig, axes = plt.subplots(1, len(plans), figsize=(3 * len(plans), 2.8), sharey=True)
    for i, (ax, plan) in enumerate(zip(axes, plans)):
        load, cap = plan["load"], plan["capacity"]
        kept = [min(n, cap) if cap is not None else n for n in load]
        ax.bar(range(len(load)), kept, color="tab:blue", label="kept")
        ax.bar(range(len(load)), [n - k for n, k in zip(load, kept)], bottom=kept,
               color="tab:red", label="dropped")
        if cap is not None:
            ax.axhline(cap, color="black", linestyle="--", linewidth=1, label="capacity")
        ax.set_title(f"layer {i}: {plan['dropped']} dropped")
        ax.set_xlabel("expert")
    axes[0].set_ylabel("assignments (tokens × k)")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- 2. math
def bytes_formula_table(tokens_per_rank: int = 192, n_embd: int = 32) -> None:
    """Forward bytes per rank and MoE layer, balanced routing without drops: all-to-all (dispatch
    + combine, 2·(ep−1)/ep·N_r·k·C fp32) vs all-gather (tokens and gates, (ep−1)·N_r·(C+k) fp32;
    expert ids, (ep−1)·N_r·k int64; reduce-scatter of the outputs, (ep−1)·N_r·C fp32: in all
    4·(ep−1)·N_r·(2C+3k) bytes), each column from `cost`'s ring closed forms."""
    print(f"N_r={tokens_per_rank} tokens per rank, width C={n_embd}, fp32 rows, int64 expert ids")
    print(f"{'ep':>3} {'k':>2} {'all-to-all B':>13} {'all-gather B':>13} {'ratio':>6} {'ep/k':>5}")
    for ep in (2, 4, 8):
        for k in (1, 2):
            a2a = 2 * (ep - 1) * tokens_per_rank * k * n_embd * 4 // ep
            ag = cost.all_gather_layer_bytes(tokens_per_rank, ep, 0, ep, 0, n_embd, k, 8)
            forward = ag["gather"] + ag["routing"] + ag["scatter"]
            assert forward == 4 * (ep - 1) * tokens_per_rank * (2 * n_embd + 3 * k)
            print(f"{ep:>3} {k:>2} {a2a:>13,} {forward:>13,} {forward / a2a:>6.2f} {ep / k:>5.1f}")
    print("ratio = ep·(2C+3k)/(2kC): ep/k, plus the gate and id columns' share 3/(2C)·ep")


# ----------------------------------------------------------------------------- 3. all-to-all drawn
def draw_dispatch(world_size: int, layer: int = 0):
    """Rows each rank dispatches to each ep rank in step 0 of a real `ep` run (the diagonal stays
    home: no bytes on the wire)."""
    result = parlab.run("ep", world_size=world_size, model="gpt-moe", steps=1)
    out = result.outputs[0].extras
    kept = out["routing"][layer][0]["kept"]  # (W, E)
    E, ep = len(kept[0]), out["ep"]
    matrix = [[sum(n for e, n in enumerate(row) if cost.owner(e, E, ep) == j) for j in range(ep)]
              for row in kept]  # (W, ep)
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * ep, 1 + 0.8 * world_size))
    ax.imshow(matrix, cmap="Blues")
    for s, row in enumerate(matrix):
        for j, n in enumerate(row):
            ax.text(j, s, str(n), ha="center", va="center", fontsize=9)
    ax.set_xticks(range(ep), [f"ep {j}\nexperts {j * E // ep}–{(j + 1) * E // ep - 1}"
                              for j in range(ep)], fontsize=7)
    ax.set_yticks(range(world_size), [f"rank {r}" for r in range(world_size)])
    ax.set_title(f"dispatch of layer {layer}, step 0 (rows of C floats)", fontsize=9)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- 4. correctness
def exact_cases(world_size: int) -> list[tuple[str, dict, dict | None]]:
    cases = [("ep", {}, None), ("ep", {}, {"capacity_factor": None}), ("ep-allgather", {}, None)]
    if world_size == 4:
        cases += [("ep", {"ep": 2}, None), ("ep-allgather", {"ep": 2}, {"capacity_factor": None})]
    return cases


def exact_runs(world_size: int, steps: int) -> list[dict]:
    """Every case of `exact_cases` and its `single` reference."""
    refs, runs = {}, []
    for scheme, options, overrides in exact_cases(world_size):
        key = repr(overrides)
        if key not in refs:
            refs[key] = parlab.run("single", model="gpt-moe", steps=steps, model_config=overrides)
        result = parlab.run(scheme, world_size=world_size, model="gpt-moe", steps=steps,
                            model_config=overrides, **options)
        runs.append({"scheme": scheme, "options": options, "overrides": overrides,
                     "result": result, "comparison": result.compare(refs[key])})
    return runs


def _label(run: dict) -> str:
    extras = run["result"].outputs[0].extras
    drop = "no capacity" if run["overrides"] else "capacity 1.25"
    return f"{run['scheme']:<13} dp={extras['dp']} × ep={extras['ep']}  {drop:<13}"


def print_exact(runs: list[dict]) -> None:
    for run in runs:
        print(f"{_label(run)} match: {run['comparison'].match}")


# ----------------------------------------------------------------------------- 5. measurement
def closed_form(result, rank: int = 0) -> dict:
    """Rank `rank`'s bytes by phase from the closed forms and the run's logged routing counts."""
    cfg, extras = result.config, result.outputs[rank].extras
    m, W, ep = cfg.model_config, cfg.world_size, extras["ep"]
    total: dict[str, int] = {}
    for layer in extras["routing"]:
        for step in layer:
            part = (cost.all_to_all_layer_bytes(step["kept"], rank, extras["group"], m.n_embd,
                                                m.top_k) if cfg.scheme == "ep" else
                    cost.all_gather_layer_bytes(cfg.batch_size // W * m.block_size, ep,
                                                extras["ep_rank"], W, rank, m.n_embd, m.top_k,
                                                m.n_experts))
            for phase, nbytes in part.items():
                total[phase] = total.get(phase, 0) + nbytes
    counts = cost.parameter_counts(m)
    sync = cost.sync_bytes(counts["dense"], counts["experts"] // ep, W, rank, extras["dp"],
                           rank // ep)
    return {**total, **{phase: cfg.steps * nbytes for phase, nbytes in sync.items()}}


def ledger_table(runs: list[dict], rank: int = 0) -> None:
    """Rank `rank`'s bytes per phase over the run: ledger vs closed form."""
    for run in runs:
        result = run["result"]
        expect = closed_form(result, rank)
        print(_label(run).rstrip())
        for phase, nbytes in expect.items():
            got = result.bytes_per_rank(phase=phase)[rank]
            print(f"    {phase:<18} ledger {got:>10,}  closed form {nbytes:>10,}  equal: {got == nbytes}")


def memory_table(world_size: int) -> None:
    """Measured bytes per rank (weights + grads + AdamW moments) vs 16·(Ψ_dense + Ψ_experts/ep)."""
    for ep in [d for d in (1, 2, 4) if d <= world_size and world_size % d == 0]:
        result = parlab.run("ep", world_size=world_size, model="gpt-moe", steps=1, ep=ep)
        expect = cost.memory_per_rank(result.config.model_config, ep)
        measured = sum(result.memory[0][k] for k in expect)
        print(f"ep={ep}: rank 0 holds {measured:>9,} bytes, formula {sum(expect.values()):>9,}, "
              f"equal: {measured == sum(expect.values())}")


def balance_runs(steps: int, world_size: int = 1, modes=("none", "aux", "bias"),
                 top_k: int = 1) -> dict:
    """Training with each balancing mode at `top_k` (Switch's k = 1 by default: the load's
    ceiling E/k is then 4, far from even): per step max/mean expert load, dropped fraction, loss."""
    out = {}
    for mode in modes:
        result = parlab.run("ep", world_size=world_size, model="gpt-moe", steps=steps,
                            model_config={**BALANCING[mode], "top_k": top_k})
        logs = result.outputs[0].extras["routing"]
        imbalance = [max(max(s["load"]) * len(s["load"]) / sum(s["load"]) for s in steps_)
                     for steps_ in zip(*logs)]  # worst layer per step
        dropped = [sum(s["dropped"] for s in steps_) / sum(sum(s["load"]) for s in steps_)
                   for steps_ in zip(*logs)]
        m = result.config.model_config
        out[mode] = {"imbalance": imbalance, "dropped": dropped, "loss": result.losses,
                     "ceiling": m.n_experts / m.top_k, "top_k": m.top_k, "E": m.n_experts,
                     "capacity_factor": m.capacity_factor}
    return out


def draw_balance(runs: dict):
    fig, axes = plt.subplots(1, 3, figsize=(11, 2.9))
    for mode, run in runs.items():
        for ax, key in zip(axes, ("imbalance", "dropped", "loss")):
            ax.plot(run[key], label=mode, linewidth=1)
    first = next(iter(runs.values()))
    axes[0].axhline(first["ceiling"], color="grey", linestyle="--", linewidth=1,
                    label=f"ceiling E/k = {first['ceiling']:g}")
    axes[0].axhline(1, color="grey", linestyle=":", linewidth=1, label="even")
    tail = lambda mode, key: sum(runs[mode][key][-10:]) / len(runs[mode][key][-10:])  # noqa: E731
    balanced = [m for m in runs if m != "none"]
    titles = ["worst expert's load, last 10 steps: " + ", ".join(
                  f"{m} {tail(m, 'imbalance'):.2f}" for m in runs),
              "dropped share: " + ", ".join(f"{m} {100 * tail(m, 'dropped'):.0f}%" for m in runs),
              "loss vs none, last 10 steps: " + ", ".join(
                  f"{m} {tail(m, 'loss') - tail('none', 'loss'):+.3f}" for m in balanced)
              if "none" in runs else "training loss"]
    for ax, title, unit in zip(axes, titles,
                               ("max / mean expert load", "dropped fraction", "loss (nats)")):
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("step")
        ax.set_ylabel(unit, fontsize=8)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def summarize_balance(runs: dict, last: int = 10) -> None:
    first = next(iter(runs.values()))
    print(f"E={first['E']} experts, k={first['top_k']}: an expert holds at most every token once, so "
          f"max/mean load ≤ N / (N·k/E) = E/k = {first['ceiling']:g} (the plot's ceiling)")
    for mode, run in runs.items():
        n = min(last, len(run["loss"]))
        imbalance, dropped, loss = (sum(run[key][-n:]) / n for key in ("imbalance", "dropped", "loss"))
        print(f"{mode:<5} last {n} steps: max/mean load {imbalance:.2f}, dropped "
              f"{100 * dropped:.1f}%, loss {loss:.4f}")


def time_table(world_size: int, link: str = TIMING_LINK, steps: int = 3, top_k: int = TIMING_TOP_K,
               clock: str = "A100", batch_size: int | None = TIMING_BATCH) -> dict:
    """Step time of ep, ep-allgather and the dense GPT of equal active parameters, on loopback
    and `link` in one run on `clock` (paced by default), beside the α-β prediction and the
    lesson's verdict (`parlab.expert_parallel.explore.dense`)."""
    return print_comparison(world_size, link, steps, top_k, clock, batch_size)


def summary(out: dict, balance: dict, link: str = TIMING_LINK, last: int = 10,
            quality: dict | None = None) -> None:
    """The chapter's measured headlines from this run's results, each with its verdict, and when
    to use which method (thresholds from this run's regime)."""
    rows = out[link]
    if quality is not None:
        n, task = len(quality["seeds"]), quality["task"]
        print(f"- MoE (E = {quality['overrides']['n_experts']}, k = {quality['overrides']['top_k']}) "
              f"vs dense at equal active parameters, task {task}, {quality['steps']} steps, {n} "
              f"seeds: dense − MoE loss {quality['gain']:+.3f} nats against a seed spread of "
              f"{quality['spread']:.3f}: {quality['verdict']}")
    ratio = rows["ep-allgather"]["seconds"] / rows["ep"]["seconds"]
    print(f"- ep-allgather took {ratio:.2f}× ep's step time on {link} ({rows['ep']['clock']}), "
          f"sending {rows['ep-allgather']['bytes'] / rows['ep']['bytes']:.2f}× the bytes; all-to-all "
          f"beats all-gather: {'holds' if ratio > 1 else 'does not hold (diagnosis above)'}")
    for mode, run in balance.items():
        n = min(last, len(run["loss"]))
        print(f"- balancing {mode}: max/mean expert load {sum(run['imbalance'][-n:]) / n:.2f}, "
              f"dropped {100 * sum(run['dropped'][-n:]) / n:.1f}% over the last {n} steps")
    tail = {m: sum(balance[m]["imbalance"][-last:]) / len(balance[m]["imbalance"][-last:])
            for m in ("none", "aux", "bias")}
    print(f"  balancing lowers the worst expert's load (aux {tail['aux']:.2f} and bias "
          f"{tail['bias']:.2f} below none's {tail['none']:.2f}): "
          + ("holds" if max(tail["aux"], tail["bias"]) < tail["none"] else
             "does not hold at this many steps"))
    cf = balance["aux"]["capacity_factor"]
    if cf is not None:
        even = max(tail["aux"], tail["bias"]) <= cf
        print(f"  it keeps the experts even enough that none overflows (max/mean ≤ the capacity "
              f"factor {cf:g}): " + ("holds" if even else f"does NOT hold — the worst expert "
                                     f"still carries {tail['aux']:.2f}× (aux) and {tail['bias']:.2f}× "
                                     f"(bias) the mean load, so overflow is still dropped: "
                                     f"balancing narrows the spread, it does not remove it here"))
    ran = rows["ep"]["link"]
    ab = ran.latency_s * ran.bandwidth_Bps
    print("\nWhen to use it (from this run):")
    print(f"- all-to-all (`ep`) over all-gather when k < ep and the dispatch messages reach the "
          f"link's α·β ({ab:,.0f} B on {link}), where the all-gather's extra bytes cost as much "
          f"as a round's latency; well below it latency dominates both (the α-β model)")
    loop = out["loopback"]
    print(f"- MoE vs dense: without any link time (loopback) the MoE step took "
          f"{loop['ep']['seconds'] / loop['dense']['seconds']:.2f}× the dense step of equal active "
          f"parameters — the MoE layer's routing and index operators, which the FLOP count leaves "
          f"out; what it buys is the loss above, not speed")
    ep, rep = rows["ep"], rows["replicated"]
    print(f"- EP vs replicated experts on {link} ({ep['clock']}): `ep` {1e3 * ep['seconds']:.3f} ms "
          f"per step, "
          f"sending {ep['bytes']:,} B (all-to-alls grow with the tokens), against every rank "
          f"holding every expert {1e3 * rep['seconds']:.3f} ms, sending {rep['bytes']:,} B "
          f"(all-reduce grows with the experts' parameters): EP "
          + ("faster" if ep["seconds"] < rep["seconds"] else
             f"{ep['seconds'] / rep['seconds']:.2f}× slower") + " here. EP pays when the experts' "
          "memory is what one rank cannot hold: parameters per rank fall as 1/ep (section 5)")
    lower = max(tail["aux"], tail["bias"]) < tail["none"]
    print(f"- train with a balancing term: without one, the worst expert sat at "
          f"{tail['none']:.2f}× the mean load (ceiling {balance['none']['ceiling']:g}) and every "
          f"overflow beyond the capacity is dropped; with one, {tail['aux']:.2f}× (aux) and "
          f"{tail['bias']:.2f}× (bias): " + ("lower" if lower else "not lower at this many steps")
          + ("" if cf is None else ", even" if max(tail["aux"], tail["bias"]) <= cf else ", not even"))


def panel(world_size: int, top_k: int, capacity_factor: str, balancing: str, steps: int = 3):
    """Widget callback: one `ep` run against `single`, its drops and its dispatch bytes."""
    overrides = {"top_k": top_k, **BALANCING[balancing],
                 "capacity_factor": None if capacity_factor == "none" else float(capacity_factor)}
    result = parlab.run("ep", world_size=world_size, model="gpt-moe", steps=steps,
                        model_config=overrides)
    ref = parlab.run("single", model="gpt-moe", steps=steps, model_config=overrides)
    logs = result.outputs[0].extras["routing"]
    dropped = sum(s["dropped"] for layer in logs for s in layer)
    routed = sum(sum(s["load"]) for layer in logs for s in layer)
    print(f"{result.compare(ref)}")
    print(f"dropped {dropped} of {routed} assignments; rank 0 dispatched "
          f"{result.bytes_per_rank(phase='dispatch')[0]:,} B (closed form "
          f"{closed_form(result)['dispatch']:,}); final loss {result.losses[-1]:.4f}")
