"""Many ranks on a laptop: which schemes run at 8, 16 and 32 ranks, what a launch and a rank cost.

Virtual time (`parlab.core.clock`) makes more ranks than cores honest: 16 ranks sharing 2 cores
keep the timeline 16 accelerators would. The checks of issue 34 that need no timing model:
`exactness(world_sizes)` (every registered scheme against `single` where exact, and its ledger
against its registered closed form; `WIDE` where the default GPT is too small) and
`launch_cost(world_size)` (cold and warm launch, each rank's RSS and USS/PSS). The timing sweep is
chapter 13's (`parlab.planner.scaling.points`, `step_model`, `bench_scale`). In full:
docs/engine.md, `parlab.engine.many_ranks`.
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


def measure_run(scheme: str, world_size: int, **options) -> dict:
    """`parlab.run(scheme, world_size, **options)` with its ranks' memory sampled while they run:
    the wall time, and the peak over samples of all ranks' PSS together (shared torch pages
    counted once) and of their RSS (counted per rank)."""
    import threading

    import parlab

    stop, found = threading.Event(), []
    sampler = threading.Thread(target=_measure_children, args=(stop, found), daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    try:
        result = parlab.run(scheme, world_size, **options)
    finally:
        wall = time.perf_counter() - t0
        stop.set()
        sampler.join()
    by_round: dict = {}  # samples taken in one sweep of the children share a round
    round_ = 0
    seen: set = set()
    for pid, _, mem in found:
        if pid in seen:
            round_, seen = round_ + 1, set()
        seen.add(pid)
        by_round.setdefault(round_, []).append(mem)
    peak = {k: max((sum(m[k] for m in ms) for ms in by_round.values()), default=0)
            for k in ("rss", "pss")}
    return {"result": result, "wall_s": wall, "peak_pss": peak["pss"], "peak_rss": peak["rss"],
            "world_size": world_size}


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
