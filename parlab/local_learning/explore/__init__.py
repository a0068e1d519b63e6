"""What notebook 05 runs: the routes and their bytes, the exact cases, the emulation check, the
ledger beside the closed forms, stashed versions, the widget and the summary (the timing part —
loss against steps and paced time, idle fractions, the locks drawn — is `explore.timing`; the
exercises: `exercises`). Every timing runs on the paced clock (`clock="A100"`, parlab.core.clock).
Papers: Belilovsky et al. (ICML 2020), Gomez et al. (JMLR 2022), Narayanan et al. (PipeDream,
SOSP 2019; PipeDream-2BW, ICML 2021)."""

from __future__ import annotations

import parlab
from parlab.engine.registry import get_scheme
from parlab.engine.runner import make_config
from parlab.engine.verify import compare_states
from parlab.local_learning import cost
from parlab.local_learning.emulate import emulate
from parlab.local_learning.explore import timing as ex_timing
from parlab.local_learning.layout import resolve
from parlab.local_learning.routes import Route


# ----------------------------------------------------------------------------- routes and bytes
def route_table(pp: int, rows: int = 12, model: str = "gpt") -> None:
    """Per scheme and boundary: the losses whose gradient crosses it, bytes per step up / down."""
    mc = make_config("single", model=model).model_config
    for name, depth, w in (("local", 0, 1.0), ("interlocking d=1", 1, 1.0),
                           (f"interlocking d={pp - 1}, w=0 (global)", pp - 1, 0.0)):
        route = Route.of(pp, depth, w)
        print(f"{name}: tie kept: {route.tied}")
        for row in cost.boundary_table(route, mc, rows):
            print(f"  boundary {row['boundary']}: up {row['activations']:>7,} B, down "
                  f"{row['gradients']:>7,} B per step; losses down {list(row['losses_down'])}")


def run_route(scheme: str, world_size: int, steps: int = 3, **options):
    return parlab.run(scheme, world_size=world_size, steps=steps, **options)


# ----------------------------------------------------------------------------- correctness
def check_exact(world_size: int, steps: int = 3) -> dict:
    """The settings where theory says the scheme *is* global backprop: prints match lines."""
    ref = parlab.run("single", steps=steps)
    cases = [("local", {"pp": 1}), ("interlocking", {"pp": 1}),
             ("interlocking", {"depth": world_size - 1, "aux_weight": 0.0}),
             ("pipedream", {"microbatches": 1}), ("pipedream-2bw", {"microbatches": 1})]
    results = {}
    for scheme, options in cases:
        r = run_route(scheme, world_size, steps, **options)
        c = r.compare(ref)
        label = ", ".join(f"{k}={v}" for k, v in options.items())
        print(f"{scheme:14} {label:26} match: {c.match}")
        results[(scheme, label)] = r
    return results


def emulation_check(scheme: str, world_size: int, steps: int = 3, **options) -> tuple:
    """A distributed run and its one-process emulation: (run, max parameter diff, match)."""
    r = run_route(scheme, world_size, steps, **options)
    cfg = make_config(scheme, world_size=world_size, steps=steps, **options)
    layout = resolve(cfg)
    route = Route.of(layout.pp, cfg.options.get("depth", 0), cfg.options.get("aux_weight", 1.0))
    em = emulate(cfg, layout, route)
    worst, _, problems = compare_states(r.state, em.state)
    loss_ok = all(abs(a - b) <= 1e-4 * max(abs(b), 1) for a, b in zip(r.losses, em.losses))
    label = ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"
    print(f"{scheme:13} pp={layout.pp} {label:24} equals its emulation: {loss_ok and not problems}")
    return r, worst, loss_ok and not problems


def ledger_report(result) -> None:
    """Bytes per step across each boundary, measured beside the closed form."""
    cfg = result.config
    layout = resolve(cfg)
    route = Route.of(layout.pp, cfg.options.get("depth", 0), cfg.options.get("aux_weight", 1.0))
    print(f"{cfg.scheme} (depth {route.depth}, aux_weight {route.aux_weight:g}), pp={layout.pp}, "
          f"{layout.rows} rows per step")
    for row in get_scheme(cfg.scheme).forms["boundary_bytes"](route, cfg.model_config, layout.rows):
        j = row["boundary"]
        up = result.bytes_per_rank(phase="pp-fwd")[j] // cfg.steps
        down = result.bytes_per_rank(phase="pp-bwd")[j + 1] // cfg.steps
        print(f"  boundary {j}: up {up:>7,} B (closed form {row['activations']:>7,}), down "
              f"{down:>7,} B (closed form {row['gradients']:>7,}) per step")


def summary(lesson: dict, losses: dict) -> None:
    """The chapter's measured headlines, printed from this run's results, each with its verdict."""
    verdict = lambda ok: "holds" if ok else "does not hold (diagnosis above)"  # noqa: E731
    print(f"- local: {lesson['local']:.2f}× pp-1f1b's throughput (model {lesson['model_local']:.2f}×)"
          f"; faster, as the model predicts (±15%): {verdict(lesson['local_holds'])}")
    print(f"- interlocking depth 1: {lesson['interlocking']:.2f}× (model "
          f"{lesson['model_interlocking']:.2f}×); between global and local: "
          f"{verdict(lesson['interlocking_holds'])}")
    spread = (f" (seeds {losses['seeds']}: local − interlocking {losses['gap_mean']:+.4f} ± "
              f"{losses['gap_sd']:.4f} sd)" if "seeds" in losses else " (one seed)")
    print(f"- spirals MLP: interlocking's final loss {losses['interlocking']:.4f} against local's "
          f"{losses['local']:.4f}{spread}; lower beyond the seed spread: "
          + (verdict(losses["holds"]) if "seeds" in losses or losses["holds"] else
             "within noise: one seed"))


def _faster(ratio: float) -> str:
    return "faster" if ratio > 1 else "not faster"


def _lower(a: float, b: float) -> str:
    return "lower" if a < b else "not lower"


def when_to_use_lines(lesson: dict, losses: dict, sweep: list[dict], merge_speed: dict,
                      merge_loss: dict) -> list[str]:
    """The chapter's "When to use it (from this run)" lines, each threshold from this run: the
    timing sweep's throughputs and compute (`explore.timing.lessons`), the flushed pipeline's
    catch-up m by the chapter's model (`cost.flushed_catches_up`, idle closed forms), the losses of
    the sweep and of the spirals MLP (`explore.timing.loss_report`), and section 5's layerwise-merge
    beside PipeDream and 2BW (`explore.merge.throughput_report`, `loss_comparison`)."""
    pp, m, steps = lesson["pp"], lesson["microbatches"], lesson["steps"]
    by = {}
    for row in sweep:
        by.setdefault(row["scheme"].split()[0], row)
    g_loss, l_loss = by["pp-1f1b"]["final_loss"], by["local"]["final_loss"]

    def catch_up(ratio):
        m_even = cost.flushed_catches_up(pp, steps, ratio)
        return (f"by the chapter's model the flushed pipeline catches up from m ≥ {m_even}"
                if m_even else "by the chapter's model the flushed pipeline never catches up")

    lines = ["When to use it (from this run):"]
    lines.append(
        f"- local learning (Belilovsky et al. 2020) while the flushed pipeline's bubble "
        f"(p−1)/(m+p−1) costs more than the auxiliary heads: at p={pp}, m={m} (bubble "
        f"{cost.one_f_one_b_idle(pp, m):.0%}) it ran {lesson['local']:.2f}× pp-1f1b's throughput "
        f"({_faster(lesson['local'])}) at {lesson['compute_local']:.2f}× its compute per step; "
        f"{catch_up(lesson['compute_local'])}; its final loss {l_loss:.4f} was "
        f"{'higher' if l_loss > g_loss else 'not higher'} than global backprop's {g_loss:.4f}")
    lines.append(
        f"- interlocking (Gomez et al. 2022) when local's loss is too high: on the spirals MLP its "
        f"final loss {losses['interlocking']:.4f} was {_lower(losses['interlocking'], losses['local'])} "
        f"than local's {losses['local']:.4f}; it ran {lesson['interlocking']:.2f}× pp-1f1b's "
        f"throughput ({_faster(lesson['interlocking'])}) at {lesson['compute_interlocking']:.2f}× "
        f"its compute, and {catch_up(lesson['compute_interlocking'])}")
    busy = "m ≥ p here" if m >= pp else f"here m={m} < p={pp}: PipeDream idled {by['pipedream']['idle']:.0%}"
    lines.append(
        f"- weight stashing (PipeDream, 2BW) only with m ≥ p in flight ({busy}) and memory for the "
        f"stashed versions; the synchronous, exact layerwise-merge ran {merge_speed['vs_pipedream']:.2f}× "
        f"PipeDream's ({_faster(merge_speed['vs_pipedream'])}) and {merge_speed['vs_2bw']:.2f}× 2BW's "
        f"throughput ({_faster(merge_speed['vs_2bw'])}) with no stashed version, while PipeDream's "
        f"losses drifted up to {merge_loss['stale_gaps'][0]:.1e} from global backprop's — stashing "
        + ("did not pay here" if min(merge_speed["vs_pipedream"], merge_speed["vs_2bw"]) > 1
           else "paid here"))
    return lines


def when_to_use(lesson: dict, losses: dict, sweep: list[dict], merge_speed: dict,
                merge_loss: dict) -> None:
    """Print `when_to_use_lines`: when local learning, interlocking and weight stashing pay."""
    print("\n".join(when_to_use_lines(lesson, losses, sweep, merge_speed, merge_loss)))


def stash_report(world_size: int, microbatches: int = 4, steps: int = 3) -> None:
    """Weight versions each stage held at its peak, PipeDream vs 2BW, beside the closed forms, and
    what every backward used (its forward's version)."""
    held = {}
    for scheme in ("pipedream", "pipedream-2bw"):
        r = parlab.run(scheme, world_size=world_size, steps=steps, microbatches=microbatches)
        print(f"{scheme}, p={world_size}, m={microbatches}:")
        for out in r.outputs:
            s, x = out.extras["stage"], out.extras
            formula = get_scheme(scheme).forms["versions"](world_size, microbatches, s)
            used_own = all(fwd == used for _, fwd, used, _ in x["versions"])
            stale = max(live - fwd for _, fwd, _, live in x["versions"])
            print(f"  stage {s}: {x['peak_versions']} versions (closed form {formula}) = "
                  f"{cost.stash_bytes(x['peak_versions'], x['stage_numel']):>8,} B; every backward "
                  f"used its forward's weights: {used_own}; most updates behind: {stale}")
        held[scheme] = sum(cost.stash_bytes(o.extras["peak_versions"], o.extras["stage_numel"])
                           for o in r.outputs)
    ratio = held["pipedream"] / held["pipedream-2bw"]
    print(f"all stages together: PipeDream stashes {held['pipedream']:,} B, 2BW "
          f"{held['pipedream-2bw']:,} B — PipeDream holds {ratio:.2f}× 2BW's"
          + (" (at this p and m PipeDream's stages hold at most two versions too: 2BW saves from "
             "p, m ≥ 3)" if ratio <= 1 else ""))


def panel_follow(values: dict) -> dict:
    """`widgets.experiment_panel`'s `follow`: depth only for interlocking, and only 1 … p−1."""
    if "depth" not in parlab.schemes()[values["scheme"]].options:
        return {"depth": (["n/a"], "n/a")}
    depths = list(range(1, values["world_size"]))
    depth = values["depth"]
    return {"depth": (depths, min(depth, depths[-1]) if isinstance(depth, int) else 1)}


def widget_run(world_size: int = 2, scheme: str = "interlocking", depth: int | str = 1,
               microbatches: int = 2) -> None:
    """The panel's callback: one scheme against pp-1f1b at `microbatches` per step, timelines and
    the bytes per boundary (the figure is left open: the panel draws it in its own output)."""
    options = {"depth": min(depth, world_size - 1)} if "depth" in parlab.schemes()[scheme].options \
        and depth != "n/a" else {}
    tm = ex_timing
    rows = tm.compare_schemes(world_size, steps=3, model_config=tm.TIMING_MODEL,
                              batch_size=tm.TIMING_BATCH, link=tm.TIMING_LINK,
                              microbatches=microbatches, schemes=(("pp-1f1b", {}), (scheme, options)))
    if "boundary_bytes" in get_scheme(scheme).forms:  # the schemes that send per boundary
        ledger_report(rows[1]["result"])
    tm.gantt(rows)
