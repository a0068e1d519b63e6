"""Chapter 03's "When to use it (from this run)": when tensor parallelism, sequence parallelism and
async TP pay, each verdict computed from numbers the notebook's run already made — part 10's
paced runs at Megatron-LM's 7.5B shapes inside and past one node (`explore.nvlink_domain`:
Narayanan et al., SC 2021, §3), part 7's paced step at tp = 1 and tp = N, part 6's measured activations beside
the closed-form bytes (sequence parallelism, Korthikanti et al., MLSys 2023), part 7's async TP
rows (Wang et al., ASPLOS 2023).
"""

from __future__ import annotations


def degree_line(domain: list[dict], tolerance: float = 0.05) -> str | None:
    """Where TP itself pays, from section 10's runs at a real model's shapes
    (`explore.nvlink_domain.domain_rows`): the speed-up of the largest degree inside one node over
    tp = 1, and the first degree past the node against it; None without both."""
    from parlab.tensor_parallel.explore.nvlink_domain import PER_NODE, verdict

    by_tp = {row["tp"]: row for row in domain}
    inside = max((tp for tp in by_tp if 1 < tp <= PER_NODE), default=None)
    if 1 not in by_tp or inside is None:
        return None
    v = verdict(domain, tolerance)
    line = (f"- TP inside the NVLink domain at a real width (section 10, paced): tp={inside} ran "
            f"{by_tp[inside]['speedup']:.2f}× tp=1's speed in one node")
    if v["holds"] is None:
        return line
    past = min(tp for tp in by_tp if tp > PER_NODE)
    return line + (f"; tp={past} across nodes took {v['ratio']:.2f}× tp={inside}'s step — "
                   + ("keep tp ≤ the GPUs of one node, and grow with pipeline or data "
                      "parallelism past it" if v["holds"] else
                      "here it still paid past the node: the ring's bytes were small beside "
                      "compute ÷ tp at this width"))


def measured_line(timing: list[dict]) -> str | None:
    """Section 7's paced step at tp = N against tp = 1 on one link: faster or slower, computed; None
    when the run measured one degree only. When the all-reduces are under half the predicted step
    the link is not why: the line names the operators every rank runs whole (launch-bound on an
    accelerator)."""
    by_tp = {row["tp"]: row for row in timing}
    if len(by_tp) < 2:
        return None
    one, n = by_tp[min(by_tp)], by_tp[max(by_tp)]
    ratio = n["measured_ms"] / one["measured_ms"]
    share = n["of_which_comm_ms"] / n["predicted_ms"] if n["predicted_ms"] else 0.0
    head = (f"- the chapter's tiny GPT (section 7, {n['link']}, {n['clock']}): "
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
    return head + (f"slower: the all-reduces are {share:.0%} of the predicted step, so TP does "
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


def when_to_use_lines(domain: list[dict], timing: list[dict], memory: list[dict],
                      bytes_ratio: float, async_rows: list[dict]) -> list[str]:
    """The verdict's lines (header first), each from this run's numbers; lines whose numbers the
    run did not make are left out."""
    lines = [degree_line(domain), measured_line(timing), sp_line(memory, bytes_ratio),
             async_line(async_rows)]
    return ["When to use it (from this run):"] + [line for line in lines if line]


def when_to_use(domain: list[dict], timing: list[dict], memory: list[dict], async_rows: list[dict],
                world_size: int) -> None:
    """Print the chapter's "When to use it (from this run)": section 10's paced real-scale degrees,
    section 7's steps, section 6's activations beside the closed-form bytes ratio, the async TP
    rows."""
    from parlab.tensor_parallel.explore import sp_vs_tp_bytes

    ratio = sp_vs_tp_bytes(world_size)["ratio"] if world_size > 1 else float("nan")
    print("\n".join(when_to_use_lines(domain, timing, memory, ratio, async_rows)))
