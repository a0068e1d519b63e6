"""What notebook 09's SSP comparison runs: does bounded staleness absorb a *jittery* worker and a
*persistently slow* one alike? Ho et al. (SSP, NeurIPS 2013, §2–3) let a worker run up to s clocks
ahead of the slowest, so a worker that is slow on one clock and fast on the next catches up within
the window; a worker slow on every clock falls behind by a fraction of a clock each clock until the
window is used up, and from then on the fast workers wait for it as under BSP.

Measured on the seeded virtual clock that `delays="seeded"` runs use (`parlab.asynchrony.delays`:
one gradient = 1 unit; jitter j makes each gradient take 1 + j·U, U uniform and seeded), through the
server's own book (`versions.simulate`), without processes: a pure function of its settings.
"""

from __future__ import annotations

from parlab.asynchrony.explore import schedule


def idle_share(workers: int, spans: list, fast: list[int]) -> float:
    """Share of the run the `fast` workers spent waiting (not computing), averaged over them."""
    end = max(e for _, _, e in spans)
    busy = {w: 0.0 for w in fast}
    for worker, start, stop in spans:
        if worker in busy:
            busy[worker] += stop - start
    return sum(end - b for b in busy.values()) / (len(fast) * end)


def ssp_absorbs(workers: int, steps: int = 24, staleness: tuple = (0, 1, 2, 4), jitter: float = 1.0,
                straggler: float = 1.5) -> dict:
    """BSP (s = 0) and SSP (s > 0) with every worker jittering (each gradient 1–(1+jitter)× as long)
    vs the last worker `straggler`× slower on every clock (its mean cost under jitter is 1 + jitter/2:
    the default 1.5 matches jitter 1.0). Prints, per case and s, the time to the last update, the
    fast workers' waiting share and the max staleness; the verdict computed. Returns the shares."""
    workers = max(workers, 1)
    cases = {"jitter (every worker)": dict(straggler=1.0, jitter=jitter),
             f"persistent {straggler:g}× straggler": dict(straggler=straggler, jitter=0.0)}
    fast = list(range(1, workers)) or [1]
    print(f"{workers} worker(s), {steps} clocks, seeded virtual clock (one gradient = 1 unit); the waiting "
          f"share is over worker(s) {fast}")
    print(f"{'case':<28} {'s':>2} {'time to last update':>20} {'fast workers waiting':>21} "
          f"{'max staleness':>14}")
    out = {}
    for case, kw in cases.items():
        out[case] = {}
        for s in staleness:
            book, spans = schedule("ssp", workers, steps, s, **kw)
            share = idle_share(workers, spans, fast)
            out[case][s] = share
            print(f"{case:<28} {s:>2} {max(e for _, _, e in spans):>20.2f} {share:>21.1%} "
                  f"{max(g.staleness for g in book.log):>14}")
    (jit, per), top = out.values(), max(staleness)
    absorbed, kept = jit[0] - jit[top], per[0] - per[top]
    if workers < 2:
        print("verdict: one worker waits for no one: nothing for SSP to absorb")
    elif absorbed > 0.01 and abs(kept) < 0.01:
        print(f"verdict: SSP absorbs jitter, not a persistent straggler: with s = {top} the fast workers' "
              f"waiting fell from {jit[0]:.1%} to {jit[top]:.1%} under jitter, but stayed at {per[top]:.1%} "
              f"(BSP: {per[0]:.1%}) behind the {straggler:g}× straggler — once it is s clocks behind, "
              "they wait for it every clock")
    else:
        print(f"verdict: NOT the expected pattern (waiting under jitter {jit[0]:.1%} → {jit[top]:.1%}, "
              f"behind the straggler {per[0]:.1%} → {per[top]:.1%}). Diagnosis: {steps} clocks may be too "
              f"few for the straggler to use up the s = {top} window")
    return out
