"""Chapter 03's "When to use it (from this run)": when tensor parallelism, sequence parallelism and
async TP pay, each verdict computed from numbers the notebook's run already made — part 10's
per-link fastest degree (`explore.figures.degree_times`, `cost.block_times`: Megatron-LM, Shoeybi
et al. 2019, §3), part 7's paced step at tp = 1 and tp = N, part 6's measured activations beside
the closed-form bytes (sequence parallelism, Korthikanti et al., MLSys 2023), part 7's async TP
rows (Wang et al., ASPLOS 2023).
"""

from __future__ import annotations


def _short(link_name: str) -> str:
    """'NVLink ÷100 (teaching preset)' -> 'NVLink ÷100'."""
    return link_name.split(" (")[0]


def _shape(shape: dict) -> str:
    return f"C={shape['n_embd']} (B={shape['batch_rows']}, T={shape['seq_len']})"


def degree_line(by_shape: list[tuple[dict, dict]], flops_per_s: float) -> str:
    """Where TP itself pays, per model shape: the links on which a degree above 1 is fastest (with
    that degree and its gain) and those on which it never pays. `by_shape`: [(shape, the
    `explore.figures.degree_times` of that shape)]."""
    parts = []
    for shape, links in by_shape:
        pays = [f"{_short(name)} (tp={row['best']}, {row['base_ms'] / row['best_ms']:.1f}× faster)"
                for name, row in links.items() if row["best"] > row["base"]]
        never = [_short(name) for name, row in links.items() if row["best"] <= row["base"]]
        parts.append(f"{_shape(shape)}: pays on " + (", ".join(pays) if pays else "no link")
                     + ("; never on " + ", ".join(never) if never else ""))
    return ("- TP itself while compute ÷ tp saves more than 4 all-reduces of B·T·C per block cost "
            f"(section 10, this machine's {flops_per_s / 1e9:.1f} GFLOP/s): " + "; ".join(parts)
            + " — compute grows as C², bytes as C, so a wider model pays on slower links")


def measured_line(timing: list[dict], speedup_vs_preset: float | None = None) -> str | None:
    """Section 7's paced step at tp = N against tp = 1 on one link: faster or slower, computed; None
    when the run measured one degree only. `speedup_vs_preset`: the paced accelerator's FLOP/s over
    this CPU's, divided by the teaching presets' link scale — above 1, the accelerator on the real
    link is more link-bound than this CPU on a preset, which explains a width that pays in section
    10 and not here. When the all-reduces are under half the predicted step the link is not why:
    the line names the operators every rank runs whole (launch-bound on an accelerator)."""
    by_tp = {row["tp"]: row for row in timing}
    if len(by_tp) < 2:
        return None
    one, n = by_tp[min(by_tp)], by_tp[max(by_tp)]
    ratio = n["measured_ms"] / one["measured_ms"]
    share = n["of_which_comm_ms"] / n["predicted_ms"] if n["predicted_ms"] else 0.0
    head = (f"- measured here (section 7, {n['link']}, {n['clock']}): the chapter's GPT at "
            f"tp={max(by_tp)} took {ratio:.2f}× tp={min(by_tp)}'s step — ")
    if ratio < 1:
        return head + f"faster: TP pays at this width on this link ({share:.0%} of the model's step is comm)"
    advice = ("use it when one device cannot hold the layer, or at a width where the line above "
              "says it pays")
    if share < 0.5:  # not the link: the operators every rank runs whole
        return head + (f"slower, though the all-reduces are only {share:.0%} of the predicted step: "
                       "not the link — every rank runs as many operators as one, each with its "
                       "fixed cost (a kernel launch on an accelerator: a model this narrow is "
                       "launch-bound), so dividing the FLOPs by tp does not divide the step; "
                       + advice)
    why = ""
    if speedup_vs_preset is not None:
        why = (f" (the accelerator's compute is {speedup_vs_preset:.0f}× further ahead of this CPU's "
               "than the real link is of its ÷100 preset: more link-bound than section 10's line)"
               if speedup_vs_preset > 1 else "")
    return head + (f"slower: the all-reduces are {share:.0%} of the predicted step{why}, so TP does "
                   "not pay for a model this narrow; " + advice)


def sp_line(memory: list[dict], bytes_ratio: float) -> str | None:
    """Sequence parallelism: its measured activations beside tp's (section 6, `explore.memory_rows`;
    the re-gathering variant, whose bytes `bytes_ratio` is) and its bytes beside tp's (closed form,
    section 5); the direction computed. None without both rows at tp > 1."""
    plain = [row for row in memory if row["tp"] > 1 and not row["sequence_parallel"]]
    sp = [row for row in memory if row["tp"] > 1 and row["sequence_parallel"] and row["regather"]]
    if not plain or not sp:
        return None
    act = sp[0]["measured_bytes"] / plain[0]["measured_bytes"]
    if act < 1:
        return (f"- sequence parallelism when activation memory, not the link, is the limit: here "
                f"tp-sp held {act:.2f}× tp's activations ({1 - act:.0%} less, measured) for "
                f"{bytes_ratio:.2f}× tp's bytes per step — worth it while those bytes are not the "
                "step's bottleneck")
    return (f"- sequence parallelism did not pay here: tp-sp held {act:.2f}× tp's activations "
            f"(measured, not less) for {bytes_ratio:.2f}× the bytes — keep plain tp")


def async_line(async_rows: list[dict]) -> str | None:
    """Async TP against the synchronous ring with the same bytes (section 7's async rows): faster
    or slower, computed. None when the rows lack either."""
    step = {row["scheme"]: row["step_ms"] for row in async_rows}
    ring, overlapped = step.get("tp-sp:algo=ring"), step.get("tp-sp:async_tp")
    if ring is None or overlapped is None:
        return None
    gain = ring / overlapped
    verdict = ("faster: the overlap pays when a shard's matmul is as long as its transfer, as at "
               "this width" if gain > 1 else
               "not faster: the chunked matmuls cost what the overlap hides here (diagnosis in "
               "section 7); it pays only when the waits it hides outlast the extra operators of "
               "the chunked matmuls (a shard's transfer as long as its matmul)")
    return (f"- async TP over the synchronous ring (same bytes, C=256, tp=2, paced): "
            f"{gain:.2f}× its throughput — {verdict}")


def when_to_use_lines(flops_per_s: float, by_shape: list[tuple[dict, dict]], timing: list[dict],
                      memory: list[dict], bytes_ratio: float, async_rows: list[dict],
                      speedup_vs_preset: float | None = None) -> list[str]:
    """The verdict's lines (header first), each from this run's numbers; lines whose numbers the
    run did not make are left out."""
    lines = [degree_line(by_shape, flops_per_s), measured_line(timing, speedup_vs_preset),
             sp_line(memory, bytes_ratio), async_line(async_rows)]
    return ["When to use it (from this run):"] + [line for line in lines if line]


def when_to_use(flops_per_s: float, timing: list[dict], memory: list[dict], async_rows: list[dict],
                world_size: int, clock: str = "A100") -> None:
    """Print the chapter's "When to use it (from this run)": part 10's fastest degrees for the tiny
    and the wide model (recomputed from the same closed form at the run's measured FLOP/s), part 7's
    steps on `clock` (an accelerator's paced time, or "wall"), part 6's activations beside the
    closed-form bytes ratio, the async TP rows."""
    from parlab.core.link import ACCELERATORS, PRESET_SCALE
    from parlab.tensor_parallel.explore import sp_vs_tp_bytes
    from parlab.tensor_parallel.explore.figures import TINY_MODEL, WIDE_MODEL, degree_times

    by_shape = [(shape, degree_times(**shape, flops_per_s=flops_per_s))
                for shape in (TINY_MODEL, WIDE_MODEL)]
    ratio = sp_vs_tp_bytes(world_size)["ratio"] if world_size > 1 else float("nan")
    speedup = (ACCELERATORS[clock].flops / flops_per_s / PRESET_SCALE if clock in ACCELERATORS
               else None)
    print("\n".join(when_to_use_lines(flops_per_s, by_shape, timing, memory, ratio, async_rows,
                                       speedup)))
