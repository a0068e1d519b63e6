"""Many ranks on a laptop: which schemes run at 8, 16 and 32 ranks, what a launch and a rank cost.

Paced time (`parlab.core.clock`) makes more ranks than cores honest: a rank spends most of its
paced span asleep, so the CPU work of a step is the same whatever the world size, only spread over
more processes. This module holds the checks of issue 34 that do not depend on a timing model:

- `exactness(world_sizes)`: every registered scheme at each world size (batch_size divisible by
  it), exact vs `single` where the scheme is exact (`RunResult.compare(ref).match`), and the
  ledger's bytes per rank against the scheme's registered closed form
  (`parlab.schemes()[name].cost(cfg).bytes_sent`) where it has one. A scheme whose default degrees
  do not fit the default GPT (4 layers, 4 heads) is run on a wider one (`WIDE`).
- `launch_cost(world_size)`: cold and warm launch of an empty function on `world_size` ranks, and
  each rank's memory (RSS, and what it does not share with its siblings: USS/PSS from
  /proc/PID/smaps_rollup) while it waits.

The timing sweep (strong and weak scaling beside a model) is `parlab.engine.bench_scale`.
"""

from __future__ import annotations

import os
import time

WIDE = {"n_layer": 16, "n_head": 16, "n_embd": 64}  # degrees up to 16 for tp and pp
WIDE_MOE = {"n_layer": 4, "n_head": 4, "n_embd": 32}


# ----------------------------------------------------------------------------- exactness
def _model_for(spec) -> str:
    return "gpt" if "gpt" in spec.models else spec.models[0]


def check_scheme(name: str, world_size: int, steps: int = 2, batch_size: int = 16,
                 references: dict | None = None, clock: str = "wall", **options) -> dict:
    """One scheme at one world size: {scheme, world_size, model_config, ok, match, bytes_ok,
    error, wall_s}. `references` caches the `single` runs by (model, model_config)."""
    import parlab
    from parlab.engine.registry import get_scheme
    from parlab.engine.runner import make_config

    spec = get_scheme(name)
    info = parlab.schemes()[name]
    model = _model_for(spec)
    row = {"scheme": name, "world_size": world_size, "exact": info.exact, "model_config": None,
           "ok": False, "match": None, "bytes_ok": None, "error": "", "wall_s": 0.0}
    tried = []
    for mc in (None, WIDE):
        try:
            cfg = make_config(name, world_size, model, steps, 0, None, batch_size=batch_size,
                              model_config=mc, clock=clock, **options)
            break
        except ValueError as err:
            tried.append(str(err).split("\n")[0][:160])
    else:
        row["error"] = "invalid: " + " | ".join(tried)
        return row
    row["model_config"] = mc
    t0 = time.perf_counter()
    try:
        r = parlab.run(name, world_size, model, steps, 0, batch_size=batch_size, model_config=mc,
                       clock=clock, **options)
    except Exception as err:  # noqa: BLE001 - a failing scheme is a row of the table
        row["error"] = f"{type(err).__name__}: {str(err)[:2000]}"
        row["wall_s"] = time.perf_counter() - t0
        return row
    row["wall_s"] = time.perf_counter() - t0
    row["ok"] = True
    if info.exact:
        key = (model, repr(mc))
        references = {} if references is None else references
        if key not in references:
            references[key] = parlab.run("single", 1, model, steps, 0, batch_size=batch_size,
                                         model_config=mc)
        row["match"] = bool(r.compare(references[key]).match)
    if info.cost is not None:
        try:
            predicted = list(info.cost(cfg).bytes_sent)
            row["bytes_ok"] = predicted == r.bytes_per_rank()
            if not row["bytes_ok"]:
                row["error"] = (f"bytes: ledger {r.bytes_per_rank()[:4]}… vs closed form "
                                f"{predicted[:4]}…")
        except Exception as err:  # noqa: BLE001
            row["bytes_ok"] = False
            row["error"] = f"cost(cfg) raised {type(err).__name__}: {err}"[:400]
    return row


def exactness(world_sizes=(8, 16), schemes: list | None = None, steps: int = 2,
              batch_size: int = 16, progress=print) -> list[dict]:
    """`check_scheme` for every registered scheme (or `schemes`) at each world size."""
    import parlab

    names = schemes or [n for n in parlab.schemes() if n != "single"]
    references: dict = {}
    rows = []
    for ws in world_sizes:
        for name in names:
            row = check_scheme(name, ws, steps, batch_size, references)
            rows.append(row)
            if progress:
                progress(format_row(row))
    return rows


def format_row(row: dict) -> str:
    mark = {None: "-", True: "yes", False: "NO"}
    mc = "wide" if row["model_config"] else "default"
    status = "runs" if row["ok"] else ("n/a" if row["error"].startswith("invalid") else "FAILS")
    return (f"{row['scheme']:<16} {row['world_size']:>3}  {status:<5} {mc:<7} "
            f"exact={mark[row['match']]:<3} bytes=cost={mark[row['bytes_ok']]:<3} "
            f"{row['wall_s']:5.1f}s  {row['error'][:140]}")


# ----------------------------------------------------------------------------- launch and memory
def _smaps(pid: int) -> dict:
    """{'rss', 'pss', 'uss'} bytes of process `pid` (/proc/PID/smaps_rollup)."""
    out = {"rss": 0, "pss": 0, "uss": 0}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2 or not parts[1].isdigit():
                continue
            kb = int(parts[1]) * 1024
            if parts[0] == "Rss:":
                out["rss"] = kb
            elif parts[0] == "Pss:":
                out["pss"] = kb
            elif parts[0] in ("Private_Clean:", "Private_Dirty:"):
                out["uss"] += kb
    return out


def idle_rank(rank: int, world_size: int, hold_s: float = 0.0) -> dict:
    """A rank that does nothing but join the group (and, with hold_s, wait so it can be measured):
    its pid and its own memory once it is up."""
    import torch.distributed as dist

    if hold_s:
        dist.barrier()
        time.sleep(hold_s)
    return {"pid": os.getpid(), **_smaps(os.getpid())}


def _measure_children(stop, found: list) -> None:
    """Sample every parlab rank among this process's descendants until `stop` is set."""
    import psutil

    me = psutil.Process()
    while not stop.is_set():
        try:
            for p in me.children(recursive=True):
                try:
                    found.append((p.pid, p.ppid(), _smaps(p.pid)))
                except (OSError, psutil.Error):
                    pass
        except psutil.Error:
            pass
        time.sleep(0.2)


def launch_cost(world_size: int = 16, warm_repeats: int = 3, hold_s: float = 1.5) -> dict:
    """Cold launch (the first in this process: starts the forkserver, which imports torch and
    parlab), warm launches (median of `warm_repeats`), and memory of the ranks while they wait:
    per rank RSS (pages it touches, shared ones included), PSS (its fair share of shared pages)
    and USS (pages only it holds: what one more rank costs), and the forkserver's."""
    import statistics
    import threading

    import psutil

    from parlab.core.launch import launch

    t0 = time.perf_counter()
    launch(idle_rank, world_size)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(warm_repeats):
        t0 = time.perf_counter()
        launch(idle_rank, world_size)
        warm.append(time.perf_counter() - t0)
    # memory while every rank is up
    stop, found = threading.Event(), []
    sampler = threading.Thread(target=_measure_children, args=(stop, found), daemon=True)
    sampler.start()
    results = launch(idle_rank, world_size, hold_s)
    stop.set()
    sampler.join()
    pids = {r["pid"] for r in results}
    latest: dict = {}
    for pid, ppid, mem in found:
        latest[pid] = (ppid, mem)
    ranks = [latest[p][1] for p in pids if p in latest]
    others = {pid: mem for pid, (ppid, mem) in latest.items() if pid not in pids}
    server = max(others.values(), key=lambda m: m["rss"]) if others else {"rss": 0, "pss": 0, "uss": 0}
    parent = _smaps(os.getpid())
    mean = {k: statistics.mean(m[k] for m in ranks) if ranks else 0 for k in ("rss", "pss", "uss")}
    total = {k: sum(m[k] for m in ranks) for k in ("rss", "pss", "uss")}
    return {"world_size": world_size, "cold_s": cold, "warm_s": statistics.median(warm),
            "warm_all_s": warm, "ranks_measured": len(ranks), "per_rank": mean,
            "ranks_total": total, "forkserver": server, "parent": parent,
            "machine_used": psutil.virtual_memory().total - psutil.virtual_memory().available}


def format_launch(m: dict) -> str:
    mib = 2 ** 20
    pr, tot = m["per_rank"], m["ranks_total"]
    return (f"launch of {m['world_size']} ranks: cold {m['cold_s']:.2f} s (starts the forkserver: "
            f"imports torch + parlab once), warm {m['warm_s']:.2f} s (median of "
            f"{len(m['warm_all_s'])}: {', '.join(f'{x:.2f}' for x in m['warm_all_s'])})\n"
            f"memory of {m['ranks_measured']} waiting ranks: per rank RSS {pr['rss'] / mib:.0f} MiB, "
            f"PSS {pr['pss'] / mib:.0f} MiB, USS (its own pages) {pr['uss'] / mib:.0f} MiB; "
            f"all ranks: RSS {tot['rss'] / mib:.0f} MiB (counts shared torch pages {m['ranks_measured']}×), "
            f"PSS {tot['pss'] / mib:.0f} MiB (real), USS {tot['uss'] / mib:.0f} MiB; "
            f"forkserver RSS {m['forkserver']['rss'] / mib:.0f} MiB")


# ----------------------------------------------------------------------------- the scaling sweep
# One point of a sweep: a dimension at n ranks. Strong scaling keeps the global batch (STRONG_BATCH)
# and splits it; weak scaling keeps each rank's share (WEAK_ROWS rows per data-parallel rank, and a
# pipeline's microbatch size), so the global batch grows with the cluster.
DIMENSIONS = ("dp", "zero3", "tp", "pp", "3d")
STRONG_BATCH = 16
WEAK_ROWS = 2
NODE = 8  # accelerators per node: NVLink inside, the inter-node link between
PLANS_3D = {1: (1, 1, 1), 2: (2, 1, 1), 4: (1, 2, 2), 8: (2, 2, 2), 16: (4, 2, 2)}  # dp, tp, pp


def point_config(dim: str, n: int, mode: str = "strong", bucket_mb: float = 0.1) -> dict | None:
    """{scheme, batch_size, options, degrees} for dimension `dim` on n ranks, or None when the
    default GPT (4 layers, 4 heads) cannot be cut n ways along it (tp ≤ heads, pp ≤ layers)."""
    if mode not in ("strong", "weak"):
        raise ValueError(f"mode={mode!r} must be 'strong' or 'weak'")
    if dim not in DIMENSIONS:
        raise ValueError(f"dimension {dim!r} must be one of {DIMENSIONS}")
    heads = layers = 4
    dp, tp, pp = {"dp": (n, 1, 1), "zero3": (n, 1, 1), "tp": (1, n, 1), "pp": (1, 1, n),
                  "3d": PLANS_3D.get(n, (0, 0, 0))}[dim]
    if dp == 0 or tp > heads or pp > layers:
        return None
    batch = STRONG_BATCH if mode == "strong" else WEAK_ROWS * n
    if batch % dp:
        return None
    micro = 2 * pp if pp > 1 else 1  # microbatches: twice the stages (bubble (p-1)/(m+p-1))
    if (batch // dp) % micro:
        return None
    if n == 1:
        return {"scheme": "single", "batch_size": batch, "options": {}, "degrees": (1, 1, 1)}
    scheme, options = {
        "dp": ("ddp-overlap", {"bucket_mb": bucket_mb}),
        "zero3": ("zero3", {}),
        "tp": ("tp", {"tp": tp}),
        "pp": ("pp-1f1b", {"pp": pp, "microbatches": micro}),
        "3d": ("nd", {"dp": dp, "tp": tp, "pp": pp, "microbatches": micro}),
    }[dim]
    return {"scheme": scheme, "batch_size": batch, "options": options, "degrees": (dp, tp, pp)}


def cluster_link(n: int, intra: str = "NVLink", inter: str = "100Gb-IB"):
    """`intra` inside a node of NODE accelerators; two nodes joined by `inter` beyond NODE."""
    from parlab.core.topology import two_nodes

    return intra if n <= NODE else two_nodes(n, intra=intra, inter=inter, first=NODE)


def run_point(dim: str, n: int, mode: str = "strong", intra: str = "NVLink",
              inter: str = "100Gb-IB", steps: int = 2, clock: str = "A100",
              bucket_mb: float = 0.1):
    """One paced run of the point (None where the dimension cannot reach n)."""
    import parlab

    spec = point_config(dim, n, mode, bucket_mb)
    if spec is None:
        return None
    return parlab.run(spec["scheme"], world_size=n, steps=steps, batch_size=spec["batch_size"],
                      clock=clock, link=cluster_link(n, intra, inter), **spec["options"])


# ----------------------------------------------------------------------------- the model
def _contained(inner, outer) -> float:
    return max(0.0, min(inner["t1"], outer["t1"]) - max(inner["t0"], outer["t0"]))


def rank_step(r, rank: int, step: int) -> dict:
    """What rank `rank` did in step `step` (paced seconds): its compute (spans, less the
    communication waited inside them), compute by span name, its wait, the step's window."""
    mine = [e for e in r.timeline if e["rank"] == rank]
    comp = [e for e in mine if e["kind"] == "compute"]
    this = [e for e in comp if e["args"].get("step") == step]
    before = [e for e in comp if e["args"].get("step") == step - 1]
    start = max((e["t1"] for e in before), default=min(e["t0"] for e in this))
    end = max(e["t1"] for e in this)
    waits = [e for e in mine if e["kind"] == "wait" and e["t1"] > start and e["t0"] < end]
    by_name: dict = {}
    for e in this:
        nested = sum(_contained(w, e) for w in waits)
        by_name[e["name"]] = by_name.get(e["name"], 0.0) + (e["t1"] - e["t0"]) - nested
    wait = sum(_contained(w, {"t0": start, "t1": end}) for w in waits)
    return {"compute": sum(by_name.values()), "by_name": by_name, "wait": wait,
            "window": end - start}


def op_seconds(r, record) -> float:
    """α-β seconds of one ledger record on the run's (paced) link, charged as `Comm` does: a
    message on its pair's link, a collective on its group's slowest link; sends and receives of
    one op overlap (full duplex)."""
    from parlab.core.topology import Topology

    link = r.config.link
    if link is None:
        return 0.0
    if isinstance(link, Topology):
        ranks = ([record["rank"], *record["peers"]] if record["op"] in ("send", "recv")
                 else list(record["group_ranks"]))
        link = link.link_for(ranks)
        if link is None:
            return 0.0
    nbytes = max(record["bytes_sent"], record["bytes_recv"])
    return link.cost(nbytes, record["rounds"])


def predict_step(r, step: int = 1) -> dict:
    """The model's step time (paced seconds) and per-rank wait for run `r`'s step `step`.

    Input: each rank's compute in the step as the clock's operator meter counted it
    (deterministic; the planner calls it a counted profile) and the ledger's bytes and rounds
    (equal to the closed forms: `exactness`). Predicted: communication time (α-β on the link each
    op crosses, `op_seconds`), its overlap and the pipeline bubble:
      serial (single, zero3, tp): T = max_r (C_r + Σ comm_r)
      ddp-overlap (WFBP): buckets ready through backward in proportion to their bytes, sent one
        after another: T = fwd + max(bwd, last bucket's end) + optimizer
      pipeline (pp-1f1b, nd with pp > 1): per microbatch a stage computes w = (F + B + its
        blocking tp comm) / m; a hop between stages costs c (α-β of one activation); fill and
        drain pay each hop once and the steady state one hop per microbatch (a forward output and
        a backward input cross at once, full duplex):
        T = (m + p - 1) · max_stage w + (2(p - 1) + m) · c + max_r (optimizer + grad sync)."""
    cfg, n = r.config, r.config.world_size
    ranks = [rank_step(r, k, step) for k in range(n)]
    recs = [[x for x in r.ledger if x["rank"] == k and x["step"] == step] for k in range(n)]
    cost = [[op_seconds(r, x) for x in recs[k]] for k in range(n)]
    opts = cfg.options
    pp = opts.get("pp") or 1
    if cfg.scheme == "ddp-overlap":
        per = []
        for k in range(n):
            c = ranks[k]["by_name"]
            fwd, bwd, opt = c.get("forward", 0.0), c.get("backward", 0.0), c.get("optimizer", 0.0)
            sizes = [x["numel"] for x in recs[k]]
            total, done, free = sum(sizes) or 1, 0, 0.0
            for size, t in zip(sizes, cost[k]):
                done += size
                free = max(fwd + bwd * done / total, free) + t
            per.append(fwd + max(fwd + bwd, free) - fwd + opt)
        model = "WFBP overlap"
    elif pp > 1:
        m = opts.get("microbatches") or 1
        inner = n // pp
        stage_w, hop, tail = [], [], []
        for k in range(n):
            c = ranks[k]["by_name"]
            tp_comm = sum(t for x, t in zip(recs[k], cost[k]) if str(x["phase"]).startswith("tp-"))
            stage_w.append((c.get("F", 0.0) + c.get("B", 0.0) + c.get("W", 0.0) + tp_comm) / m)
            hop.append(max((t for x, t in zip(recs[k], cost[k])
                            if str(x["phase"]).startswith("pp-") and x["op"] == "send"), default=0.0))
            sync = sum(t for x, t in zip(recs[k], cost[k])
                       if not str(x["phase"]).startswith(("tp-", "pp-")))
            tail.append(c.get("optimizer", 0.0) + sync)
        w = max(max(stage_w[s * inner:(s + 1) * inner]) for s in range(pp))
        per = [(m + pp - 1) * w + (2 * (pp - 1) + m) * max(hop) + max(tail)] * n
        model = f"1F1B bubble (m={m}, p={pp})"
    else:
        per = [ranks[k]["compute"] + sum(cost[k]) for k in range(n)]
        model = "serial α-β"
    t = max(per)
    compute = [x["compute"] for x in ranks]
    return {"step_s": t, "model": model, "wait_s": sum(t - c for c in compute) / n,
            "measured_wait_s": sum(x["wait"] for x in ranks) / n, "compute_s": compute}


def state_bytes(r) -> int:
    """Model state the busiest rank holds (parameters + gradients + optimizer state), measured."""
    return max(sum(v for k, v in m.items() if k in ("params", "grads", "optimizer"))
               for m in r.memory)


def predicted_state_bytes(dim: str, degrees: tuple, n: int) -> int:
    """Closed form of the busiest rank's model state, 16 bytes per parameter it holds (fp32 weight,
    gradient, AdamW's two moments): DP the whole model; ZeRO-3 1/n of it; TP the blocks' matrices
    / tp beside replicated embeddings and norms; PP one stage's blocks and the (tied) embedding."""
    from parlab.engine.loop import build_model
    from parlab.engine.runner import make_config

    model = build_model(make_config("single"))
    emb = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("blocks."))
    mats = sum(p.numel() for name, p in model.named_parameters()
               if name.startswith("blocks.") and p.dim() == 2)
    norms = sum(p.numel() for name, p in model.named_parameters()
                if name.startswith("blocks.") and p.dim() == 1)
    dp, tp, pp = degrees
    if dim == "zero3" and n > 1:
        return -(-16 * (emb + mats + norms) // n)
    return 16 * (emb + (mats // tp + norms) // pp)


def measure_point(dim: str, n: int, mode: str = "strong", **kw) -> dict | None:
    """Run the point and put it beside the model: accelerator µs per step (measured and
    predicted), waiting per step (exposed communication, and the bubble), state memory per rank."""
    r = run_point(dim, n, mode, **kw)
    if r is None:
        return None
    spec = point_config(dim, n, mode, kw.get("bucket_mb", 0.1))
    pred = predict_step(r, step=1)
    clock = r.clock
    acc = clock.accelerator_seconds
    measured = r.step_times[1] if len(r.step_times) > 1 else r.step_times[0]
    mem = state_bytes(r)
    mem_pred = predicted_state_bytes(dim, spec["degrees"], n)
    return {"dim": dim, "mode": mode, "n": n, "scheme": spec["scheme"],
            "degrees": spec["degrees"], "batch": spec["batch_size"],
            "step_us": acc(measured) * 1e6, "pred_us": acc(pred["step_s"]) * 1e6,
            "error": pred["step_s"] / measured - 1, "model": pred["model"],
            "wait_us": acc(pred["measured_wait_s"]) * 1e6, "pred_wait_us": acc(pred["wait_s"]) * 1e6,
            "state_B": mem, "pred_state_B": mem_pred,
            "overrun": r.pace.get("overrun_share", 0.0), "clock": clock.label,
            "wall_s": r.wall_s}


def with_efficiency(rows: list[dict]) -> list[dict]:
    """Throughput (samples per accelerator second) and efficiency against the 1-rank point of the
    same dimension and mode, measured and predicted: strong T1/(n·Tn), weak (B_n/T_n)/(n·B_1/T_1)."""
    base = {(r["dim"], r["mode"]): r for r in rows if r["n"] == 1}
    for r in rows:
        b = base.get((r["dim"], r["mode"]))
        r["throughput"] = r["batch"] / (r["step_us"] * 1e-6)
        r["pred_throughput"] = r["batch"] / (r["pred_us"] * 1e-6)
        if b is None:
            r["eff"] = r["pred_eff"] = float("nan")
            continue
        r["eff"] = r["throughput"] / (r["n"] * b["throughput"])
        r["pred_eff"] = r["pred_throughput"] / (r["n"] * b["pred_throughput"])
    return rows


def stops_paying(rows: list[dict]) -> list[str]:
    """For each dimension and mode: the first n where doubling the ranks no longer raises the
    throughput by half of what perfect scaling would (efficiency of the step < 75%), and why:
    the share of the step that is waiting (communication that does not shrink, or the bubble)."""
    lines = []
    for dim in DIMENSIONS:
        for mode in ("strong", "weak"):
            pts = sorted((r for r in rows if r["dim"] == dim and r["mode"] == mode),
                         key=lambda r: r["n"])
            if len(pts) < 2:
                continue
            stop = None
            for a, b in zip(pts, pts[1:]):
                gain = b["throughput"] / a["throughput"]
                if gain < 1 + 0.5 * (b["n"] / a["n"] - 1):
                    stop = (a, b, gain)
                    break
            if stop is None:
                lines.append(f"{dim:>5} {mode:<6}: still pays up to {pts[-1]['n']} ranks "
                             f"(efficiency {pts[-1]['eff']:.0%})")
                continue
            a, b, gain = stop
            share = b["wait_us"] / b["step_us"]
            why = ("the bubble and waiting on stages" if b["degrees"][2] > 1 and dim == "pp" else
                   "communication α (rounds grow with n) and bytes that do not shrink")
            if b["n"] > NODE >= a["n"]:
                why = "the step crosses the inter-node link: " + why
            lines.append(f"{dim:>5} {mode:<6}: stops paying at {a['n']}→{b['n']} ranks "
                         f"(throughput ×{gain:.2f} for ×{b['n'] // a['n']} ranks; {share:.0%} of the "
                         f"step is waiting: {why})")
    return lines


def format_table(rows: list[dict]) -> str:
    head = (f"{'dim':>5} {'mode':<6} {'n':>3} {'scheme':<12} {'B':>3} {'step µs':>8} {'model':>8} "
            f"{'err':>6} {'samples/s':>10} {'eff':>5} {'model':>5} {'wait µs':>8} {'model':>8} "
            f"{'state KiB':>9} {'model':>7} {'overrun':>7}")
    out = [head]
    for r in rows:
        out.append(f"{r['dim']:>5} {r['mode']:<6} {r['n']:>3} {r['scheme']:<12} {r['batch']:>3} "
                   f"{r['step_us']:8.1f} {r['pred_us']:8.1f} {r['error']:+6.1%} "
                   f"{r['throughput']:10.3g} {r['eff']:5.0%} {r['pred_eff']:5.0%} "
                   f"{r['wait_us']:8.1f} {r['pred_wait_us']:8.1f} "
                   f"{r['state_B'] / 1024:9.0f} {r['pred_state_B'] / 1024:7.0f} {r['overrun']:7.1%}")
    return "\n".join(out)
