"""What notebook 08's low-dimensional section runs: Kwon et al., "Efficient Compression of
Overparameterized Deep Models through Low-Dimensional Learning Dynamics" (AISTATS 2024, arXiv
2311.05061) — the spectrum of ΔW over training, the compressed network against the original on
deep matrix completion (per iteration and in virtual time on an A100), the transfer to the lab's MLP, and
data parallelism of the compressed model beside PowerSGD of the original one's gradient.

Building blocks: `parlab.compression.lowdim`; closed forms: `parlab.compression.cost` (`dln_params`,
`LOWDIM`); the scheme: `lowdim` (`parlab.compression.schemes_lowdim`).
"""

from __future__ import annotations

import copy

import torch

import parlab
from parlab import models
from parlab.compression import cost, lowdim
from parlab.compression.explore import times_fewer
from parlab.compression.schemes_lowdim import network_of
from parlab.core import clock as clocks
from parlab.core import pacer as pacers
from parlab.core.rank_process import one_thread  # tiny tensors: one intra-op thread, as every rank
from parlab.engine.runner import make_config
from parlab.models.data import global_batch, spirals

# the paper's deep matrix completion at CI size (the authors' code uses d = 100, r = 5)
TASK = {"target_rank": 2, "depth": 3, "observed": 0.5, "init_scale": 0.1, "alpha": 4.0}
LR = 10.0  # gradient descent's step on ½·mean over Ω (ours, tuned at d = 32)
THRESHOLD = 0.05  # recovery error that counts as recovered


def task_of(d: int, seed: int = 0) -> lowdim.CompletionTask:
    return lowdim.completion_task(d, TASK["target_rank"], TASK["observed"], seed)


def width_of(d: int) -> int:
    return cost.lowdim_width(d, "compressed", None, TASK["target_rank"])


def networks(d: int, seed: int = 0) -> dict:
    """{"original": DeepLinear, "compressed": DeepLinear} at their initialisations."""
    task = task_of(d, seed)
    return {net: lowdim.build_network(task, net, d if net == "original" else width_of(d),
                                      TASK["depth"], TASK["init_scale"], seed)
            for net in ("original", "compressed")}


# ----------------------------------------------------------------------------- 1. the counts
def parameter_table(d: int, gpu_d: int = 4096) -> None:
    """Parameters of both networks: the closed form beside the count of the built modules."""
    L, r = TASK["depth"], TASK["target_rank"]
    print(f"deep matrix completion: d = {d}, rank r = {r}, L = {L}, observed p = {TASK['observed']}, "
          f"r̂ = 2r = {width_of(d)}, ε = {TASK['init_scale']}, α = {TASK['alpha']}")
    print(f"{'network':<11} {'width':>5} {'closed form':>12} {'counted':>8}  equal")
    for net, model in networks(d).items():
        width = d if net == "original" else width_of(d)
        formula = cost.dln_params(d, width, L)
        counted = sum(p.numel() for p in model.parameters())
        print(f"{net:<11} {width:>5} {formula:>12,} {counted:>8,}  {formula == counted}")
    print(f"at d = {gpu_d}: {cost.dln_params(gpu_d, gpu_d, L):,} vs "
          f"{cost.dln_params(gpu_d, 2 * r, L):,} parameters")


# ----------------------------------------------------------------------------- 2. ΔW's spectrum
@one_thread()
def spectrum_over_training(d: int, iters: int, checkpoints: int = 4):
    """Train the original DLN on deep matrix *factorization* (every entry observed, the setting of
    the paper's theory) and look at ΔW_1(t) = W_1(t) − W_1(0): its singular values at `checkpoints`
    times, how many exceed 1% of the largest, and the share of each ΔW_1(t) outside the top-2r
    singular subspaces (left and right) of the last one (0: one fixed subspace all along; run long
    enough for every component to be fitted, or the last has not populated them); then the count
    for completion (a fraction p observed), where the masked residual is not low-rank."""
    import matplotlib.pyplot as plt

    r, r2 = TASK["target_rank"], width_of(d)
    every = max(1, iters // checkpoints)
    full = lowdim.completion_task(d, r, 1.0)
    net = lowdim.build_network(full, "original", d, TASK["depth"], TASK["init_scale"])
    run = lowdim.fit(net, full, iters, LR, 1.0, "sgd", snapshot_every=every)
    print(f"original DLN (d = {d}, L = {TASK['depth']}, ε = {TASK['init_scale']}), deep matrix "
          f"factorization of a rank-{r} M, {iters} GD iterations: singular values of ΔW_1 (top {r2 + 2})")
    last = run.snapshots[-1][1][0]
    ranks, outside = [], []
    for step, deltas in run.snapshots:
        values = lowdim.update_spectrum(deltas[0])
        ranks.append(lowdim.effective_rank(values))
        outside.append(max(lowdim.outside_share(deltas[0], last, r2),  # left and right
                           lowdim.outside_share(deltas[0].T, last.T, r2)))
        shown = " ".join(f"{v:.1e}" for v in values[:r2 + 2].tolist())
        print(f"  t = {step:>5}: effective rank {ranks[-1]:>2}  [{shown}]  outside the last top-{r2} "
              f"subspaces {outside[-1]:.1e}  recovery error {run.errors[step - 1]:.3f}")
    fixed = max(outside) < 1e-2
    print(f"every ΔW_1 has effective rank ≤ 2r = {r2}: {max(ranks) <= r2} (max {max(ranks)}); every "
          f"ΔW_1(t) lies in the last top-{r2} subspaces to within {max(outside):.1e} of its norm: "
          f"one fixed subspace all along: {fixed}")
    part = task_of(d)
    net = lowdim.build_network(part, "original", d, TASK["depth"], TASK["init_scale"])
    delta = lowdim.fit(net, part, iters // 2, LR, 1.0, "sgd", snapshot_every=iters // 2).snapshots[-1][1][0]
    print(f"completion (p = {TASK['observed']}), after {iters // 2} iterations: effective rank of ΔW_1 "
          f"{lowdim.effective_rank(lowdim.update_spectrum(delta))} — the observed-entry residual "
          "P_Ω(W − M) is not low-rank, so there the subspace is only approximately invariant")
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for step, deltas in run.snapshots:
        values = lowdim.update_spectrum(deltas[0])
        ax.semilogy(range(1, d + 1), values.clamp(min=1e-12).numpy(), marker=".", label=f"t = {step}")
    ax.axvline(r2 + 0.5, color="k", ls=":", label="2r")
    ax.set(xlabel="index", ylabel="singular value of ΔW_1")
    ax.set_title(f"effective rank of ΔW_1 at most {max(ranks)} (2r = {r2}); "
                 + ("one fixed subspace all along" if fixed else
                    f"up to {max(outside):.0e} of it outside the last subspace"), fontsize=9)
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- 3. original vs compressed
def paced_step(model, task, alpha: float, clock: str = "A100") -> tuple[float, int, float]:
    """(accelerator seconds, operators, FLOPs) of one GD step of `model` on every observed entry,
    priced as the paced clock prices a compute span (`parlab.core.pacer.count_work`,
    `Clock.price`: Σ launch_s + max(FLOPs / F_acc, bytes / HBM))."""
    model = copy.deepcopy(model)
    opt = lowdim.make_dln_optimizer(model, "sgd", LR, alpha)

    def step():
        model.loss(task.index, task.values).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    work = pacers.count_work(step)
    return clocks.resolve(clock, 1).price(work), work.ops, work.flops


def first_below(errors: list[float], threshold: float) -> int | None:
    return next((i + 1 for i, e in enumerate(errors) if e <= threshold), None)


@one_thread()
def original_vs_compressed(d: int, iters: int, clock: str = "A100"):
    """Both networks, GD at the same step (the compressed one's outer factors at α·step): recovery
    error against iterations and against virtual time (the accelerator's seconds)."""
    import matplotlib.pyplot as plt

    task, nets = task_of(d), networks(d)
    clk = clocks.resolve(clock, 1)
    label, acc = clk.label, clk.accelerator
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    rows = {}
    for net, model in nets.items():
        alpha = lowdim.outer_rate(net, TASK["alpha"])
        seconds, ops, flops = paced_step(model, task, alpha, clock)
        run = lowdim.fit(model, task, iters, LR, alpha, "sgd")
        hit = first_below(run.errors, THRESHOLD)
        # launch-bound: the operators' launch cost exceeds the FLOPs' time on the accelerator
        rows[net] = (run, seconds, hit, ops * acc.launch_s > flops / acc.flops)
        print(f"{net:<11} {sum(p.numel() for p in model.parameters()):>6,} params, one step "
              f"{ops} ops {flops:,.0f} FLOP = {seconds * 1e3:.4g} {clk.unit}; "
              f"error after {iters}: {run.errors[-1]:.2e}; ≤ {THRESHOLD} after "
              + (f"{hit} iterations = {hit * seconds * 1e3:.2f} {clk.unit}" if hit else
                 f"> {iters} iterations"))
        steps = range(1, iters + 1)
        left.semilogy(steps, run.errors, label=net)
        right.semilogy([s * seconds * 1e3 for s in steps], run.errors, label=net)
    (orig, t_o, hit_o, bound), (comp, t_c, hit_c, _) = rows["original"], rows["compressed"]
    faster = hit_c is not None and (hit_o is None or hit_c * t_c < hit_o * t_o)
    fewer = hit_c is not None and (hit_o is None or hit_c < hit_o)
    print(f"compressed: fewer iterations to {THRESHOLD}: {fewer}; less {label}: {faster}; "
          f"smaller error after {iters}: {comp.errors[-1] < orig.errors[-1]} "
          f"({comp.errors[-1]:.2e} vs {orig.errors[-1]:.2e}); one compressed step costs "
          f"{t_c / t_o:.2f}× the original's")
    big = networks(8 * d)
    t_big = {net: paced_step(m, task_of(8 * d), lowdim.outer_rate(net, TASK["alpha"]), clock)[0]
             for net, m in big.items()}
    print(f"at d = {d} the original's step costs more in operators than in FLOPs (the {acc.name}'s "
          f"launch cost per operator, {acc.launch_s * 1e6:g} µs): {bound}; at d = {8 * d} one step "
          f"is {t_big['original'] * 1e3:.4g} vs {t_big['compressed'] * 1e3:.4g} {clk.unit}: "
          f"{t_big['original'] / t_big['compressed']:.1f}× cheaper")
    left.set(xlabel="iteration", ylabel="‖W − M‖_F / ‖M‖_F")
    right.set(xlabel=f"time ({clk.unit})")
    fig.suptitle(f"compressed vs original: error after {iters} iterations {comp.errors[-1]:.1e} vs "
                 f"{orig.errors[-1]:.1e}; a step costs {t_c / t_o:.2f}× the original's; reaches {THRESHOLD} "
                 + (f"sooner in {label}" if faster else f"NOT sooner in {label}"), fontsize=10)
    left.legend()
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- 4. a nonlinear model
def spirals_accuracy(net) -> float:
    x, y = spirals()
    with torch.no_grad():
        return (net(x).argmax(-1) == y).float().mean().item()


@one_thread()
def mlp_transfer(steps: int, width: int = 4, lr: float = 1e-2, batch_size: int = 64) -> None:
    """The lab's MLP (spirals) against the same MLP whose hidden d×d layers are rank-r̂ chains
    (`lowdim.compress_mlp`), trained alike (AdamW, the lab's batches); accuracy on every point."""
    nets = {"original": models.build_model("mlp", models.model_config("mlp"), 0)}
    nets["compressed"] = lowdim.compress_mlp(models.build_model("mlp", models.model_config("mlp"), 0),
                                            width)
    result = {}
    for name, net in nets.items():
        opt = torch.optim.AdamW(net.parameters(), lr=lr, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
        for step in range(steps):
            x, y = global_batch("mlp", step, batch_size, 0)
            loss = net.loss(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        result[name] = (sum(p.numel() for p in net.parameters()), loss.item(), spirals_accuracy(net))
        print(f"{name:<11} {result[name][0]:>6,} params  final loss {result[name][1]:.3f}  "
              f"accuracy {result[name][2]:.1%}")
    (p_o, _, a_o), (p_c, _, a_c) = result["original"], result["compressed"]
    print(f"hidden layers at r̂ = {width}: {p_o / p_c:.1f}× fewer parameters, accuracy cost "
          f"{100 * (a_o - a_c):+.1f} points ({steps} steps)")


# ----------------------------------------------------------------------------- 5. data parallelism
def check_exact(world_sizes=(1, 2, 4), steps: int = 4, d: int = 32) -> None:
    """`lowdim` at each world size against the in-process reference of the same network."""
    options = dict(optimizer="sgd", lr=LR, d=d)
    for n in world_sizes:
        task, model, _ = network_of(make_config("lowdim", world_size=n, steps=steps, **options))
        ref = lowdim.fit(model, task, steps, LR, TASK["alpha"], "sgd")
        result = parlab.run("lowdim", world_size=n, steps=steps, **options)
        print(f"lowdim on {n} rank(s) vs lowdim.fit (1e-4): match: {result.compare(ref).match}")


def model_vs_gradient(world_size: int, iters: int, d: int = 32) -> dict:
    """Two data-parallel runs of deep matrix completion: the original network's gradient sent as
    PowerSGD's rank-r̂ factors, and the compressed network all-reduced whole; beside them the
    bytes of the original all-reduced whole, from its closed form (not run, to keep CI short)."""
    r2 = width_of(d)
    variants = {f"original, PowerSGD r={r2}": {"network": "original", "powersgd_rank": r2},
                "compressed, all-reduce": {"network": "compressed"}}
    whole = make_config("lowdim", world_size=world_size, steps=1, network="original", d=d)
    print(f"{world_size} ranks, {iters} GD steps; the original all-reduced whole would send "
          f"{parlab.schemes()['lowdim'].cost(whole).bytes_sent[0]:,} B/step (closed form)")
    rows = {}
    print(f"{'run':<24} {'B/step (ledger)':>15} {'closed form':>11} {'final loss':>11} {'recovery err':>12}")
    for label, options in variants.items():
        result = parlab.run("lowdim", world_size=world_size, steps=iters, optimizer="sgd", lr=LR,
                            d=d, **options)
        per_step = result.bytes_per_rank()[0] / iters
        formula = parlab.schemes()["lowdim"].cost(result.config).bytes_sent[0] / iters
        task = task_of(d, result.config.seed)
        net = lowdim.DeepLinear([result.state[f"factors.{i}"] for i in range(TASK["depth"])])
        error = task.recovery_error(net.end_to_end())
        rows[label] = (per_step, result.losses[-1], error)
        print(f"{label:<24} {per_step:>15,.0f} {formula:>11,.0f} {result.losses[-1]:>11.2e} {error:>12.2e}")
    (b_p, _, e_p), (b_c, _, e_c) = rows[f"original, PowerSGD r={r2}"], rows["compressed, all-reduce"]
    better = b_c < b_p and e_c < e_p
    print(f"after {iters} steps each — compress the model (r̂ = {r2}) vs compress its gradient "
          f"(PowerSGD r = {r2}): {times_fewer(b_p, b_c)} bytes per step, recovery error {e_c:.1e} "
          f"vs {e_p:.1e} — "
          + ("the compressed model ahead on both" if better else "the compressed model not ahead on both")
          + f" after {iters} steps, not a verdict: the networks converge at different speeds "
            "(equal error below)")
    equal_error(d, iters, b_c, parlab.schemes()["lowdim"].cost(whole).bytes_sent[0], e_p, b_p)
    return rows


@one_thread()
def equal_error(d: int, iters: int, b_compressed: float, b_whole: float, e_powersgd: float,
                b_powersgd: float, cap: int = 1000) -> dict:
    """The fixed-step comparison is confounded (the networks converge at different speeds):
    bytes each needs to reach the recovery error THRESHOLD, from its steps to it (the in-process
    reference `lowdim.fit`, which the data-parallel runs equal: `check_exact`) × its bytes/step."""
    task, nets = task_of(d), networks(d)
    hits = {}
    for net, model in nets.items():
        run = lowdim.fit(model, task, cap, LR, lowdim.outer_rate(net, TASK["alpha"]), "sgd")
        hits[net] = first_below(run.errors, THRESHOLD)
    cost_to = {"compressed": b_compressed, "original": b_whole}
    print(f"at equal error (recovery ≤ {THRESHOLD}), steps from `lowdim.fit` (≤ {cap}) × bytes/step:")
    for net in ("compressed", "original"):
        print(f"  {net + ', all-reduce':<24} " + (
            f"{hits[net]:>5} steps × {cost_to[net]:,.0f} B = {hits[net] * cost_to[net]:,.0f} B"
            if hits[net] else f"not within {cap} steps"))
    reached = e_powersgd <= THRESHOLD
    print(f"  original, PowerSGD        recovery error {e_powersgd:.2e} after {iters} steps: "
          + ("reached" if reached else f"not reached — it needs more than {iters} steps × "
             f"{b_powersgd:,.0f} B = {iters * b_powersgd:,.0f} B"))
    both = hits["compressed"] and hits["original"]
    if both:
        ratio = hits["original"] * b_whole / (hits["compressed"] * b_compressed)
        print(f"  the compressed model reaches {THRESHOLD} with {ratio:.1f}× fewer bytes than the "
              f"original all-reduced whole ({hits['original'] / hits['compressed']:.1f}× fewer steps, "
              f"{b_whole / b_compressed:.1f}× fewer bytes per step): "
              + ("holds" if ratio > 1 else "does NOT hold"))
    return hits
