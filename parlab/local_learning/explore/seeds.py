"""Notebook 05's accuracy verdict across seeds: Gomez et al.'s claim (Interlocking
Backpropagation, JMLR 2022) that interlocking reaches a lower loss than local learning
(Belilovsky et al., ICML 2020), judged on the spirals MLP at several seeds (each seed: another
initialisation and another data order), so the verdict says whether the gap is beyond the spread
between seeds or within noise."""

from __future__ import annotations

import statistics

import parlab


def loss_over_seeds(curves: list[dict], link=None, seeds=(1, 2),
                    schemes=("local", "interlocking")) -> dict:
    """Re-run `schemes` of the spirals comparison (`explore.timing.compare_schemes`'s rows, seed 0)
    at each of `seeds` with the same settings (`link`: the name the curves ran on); print each
    scheme's final loss per seed, mean ± standard deviation, and the verdict: interlocking lower
    than local at every seed and by more than the difference's own spread (HOLDS), or within
    noise. Returns `loss_report`'s keys (the seed-0 losses) plus "seeds", "gaps" (local −
    interlocking per seed) and "holds"."""
    by = {}
    for row in curves:
        by.setdefault(row["scheme"].split()[0], row)
    finals = {s: [by[s]["final_loss"]] for s in schemes}
    used = [by[schemes[0]]["result"].config.seed]
    for seed in seeds:
        used.append(seed)
        for scheme in schemes:
            cfg = by[scheme]["result"].config
            r = parlab.run(cfg.scheme, world_size=cfg.world_size, steps=cfg.steps, model=cfg.model,
                           seed=seed, link=link, clock=cfg.clock.name,
                           batch_size=cfg.batch_size, **cfg.options)
            finals[scheme].append(r.losses[-1])
    for scheme in schemes:
        xs = finals[scheme]
        print(f"{scheme:13} final loss at seeds {used}: " + ", ".join(f"{x:.4f}" for x in xs)
              + f"; mean {statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f} (sd)")
    gaps = [a - b for a, b in zip(finals["local"], finals["interlocking"])]
    mean, sd = statistics.mean(gaps), statistics.stdev(gaps)
    wins = sum(g > 0 for g in gaps)
    holds = wins == len(gaps) and mean > sd
    print("local − interlocking per seed: " + ", ".join(f"{g:+.4f}" for g in gaps)
          + f"; mean {mean:+.4f} ± {sd:.4f} (sd); interlocking lower at {wins} of {len(gaps)} seeds: "
          + ("HOLDS beyond the seed spread" if holds else
             "WITHIN NOISE — the gap between seeds is as large as the effect (a tiny MLP, few steps)"))
    return {"global": by.get("pp-1f1b", {}).get("final_loss"),
            "interlocking": finals["interlocking"][0], "local": finals["local"][0],
            "holds": holds, "seeds": used, "gaps": gaps, "gap_mean": mean, "gap_sd": sd,
            "finals": finals}
