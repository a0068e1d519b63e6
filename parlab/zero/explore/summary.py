"""Chapter 02's closing verdict, "When to use it (from this run)": which ZeRO stage, when ZeRO-3's
gathers and FSDP's prefetch pay, and when activation checkpointing is the lever instead, each with
the threshold this run measured.

ZeRO (Rajbhandari et al., SC 2020) shards model states, never activations: it pays while the
states it sheds are what fills a rank. ZeRO-3 gathers the parameters before each use, 1.5× DDP's
bytes (§7 of the paper), which prefetch (Zhao et al., FSDP, VLDB 2023, §3.4) hides only while a
gather lasts no longer than the compute beside it. Activation checkpointing (Chen et al., 2016)
trades one more forward for keeping only block inputs.
"""

from __future__ import annotations

WORDS = {"optimizer": "optimizer state", "grads": "gradients", "params": "parameters"}


def stage_lines(table, comm_rows: list[dict]) -> list[str]:
    """At the table's largest N: the stages that keep whole parameters (DDP's bytes) in one line,
    each with what it sheds (the kinds it holds less of than DDP) and the share of DDP's model
    states it keeps; a stage that shards parameters in its own, with what the link of section 9
    charged its communication over the first row's scheme."""
    n = int(table.world_size.max())
    at_n = table[table.world_size == n]
    ddp = at_n[at_n.scheme == "ddp-naive"].iloc[0]
    comm = ""
    if len(comm_rows) > 1:
        first = comm_rows[0]
        comm = "; on {} (section 9) its communication took {}".format(first["link"], ", ".join(
            f"{r['measured_ms'] / first['measured_ms']:.2f}× {first['scheme']}'s" for r in comm_rows[1:]))
    same_bytes, sharded = [], []
    for row in at_n.itertuples():
        if row.scheme == ddp.scheme:
            continue
        shed = [kind for kind in ("optimizer", "grads", "params") if getattr(row, kind) < ddp[kind]]
        held = (f"{row.scheme} held {row.states / ddp.states:.2f}× DDP's model states "
                f"({' + '.join(WORDS[k] for k in shed) or 'nothing'} sharded)")
        (sharded if "params" in shed else same_bytes).append(held)
    lines = []
    if same_bytes:
        lines.append(f"- ZeRO-1/2 whenever N > 1 and the optimizer state or gradients must shrink: at "
                     f"N = {n} {'; '.join(same_bytes)}, at DDP's bytes (section 5): nothing to lose")
    if sharded:
        lines.append(f"- ZeRO-3 only when the parameters themselves must shrink: at N = {n} "
                     f"{'; '.join(sharded)}, but it gathers them before every use (1.5× the bytes, "
                     f"section 5){comm}")
    return lines


def states_or_activations_line(table, trade: dict) -> str:
    """ZeRO pays while the model states it shards outweigh the activations it does not (read on the
    stage that holds the fewest states at the largest N); past that, activation checkpointing is the
    lever, at the memory and time this run measured."""
    n = int(table.world_size.max())
    at_n = table[table.world_size == n]
    sharded = at_n.loc[at_n.states.idxmin()]  # the stage that shards the most: ZeRO-3's
    ratio = sharded.states / sharded.activations
    where = ("states still dominate: more ranks keep paying" if ratio > 1 else
             "activations dominate: more ranks shrink only the smaller part")
    time = trade["time_ratio"]
    return (f"- ZeRO shards states, not activations: it pays while states outweigh activations — at N = "
            f"{n} {sharded.scheme} kept {sharded.states:,} B of states beside {sharded.activations:,} B of "
            f"activations per rank ({ratio:.2f}×: {where}); then checkpoint activations: here it saved "
            f"{100 * trade['saved']:.0f}% of them for {time:.2f}× the forward + backward time (one more "
            f"forward predicts {trade['expected_ratio']:.2f}×; the recompute was "
            f"{trade['recompute_ms'] / trade['forward_ms']:.2f} of a forward, only the blocks being "
            f"checkpointed; {clock_words(trade.get('clock', 'wall'))}, section 7)")


def clock_words(clock: str) -> str:
    """The clock a time was read on, in words."""
    return "this CPU, raw" if clock == "wall" else f"paced {clock} time"


def prefetch_line(report: dict) -> str:
    """Prefetch pays while the gathers last no longer than the compute they hide behind: the
    regime's gathers beside its compute, and the measured gain beside the ideal one."""
    reg, measured, ideal = report["regime"], report["measured"], report["ideal"]
    gain, ceiling = measured[False] / measured[True], ideal[False] / ideal[True]
    forward_covered = reg["gather_f"] <= reg["forward"]
    backward_covered = reg["gather_b"] + reg["scatter"] <= reg["backward"]
    unit = report["clock"].unit if "clock" in report else "ms"
    return (f"- prefetch (FSDP) whenever ZeRO-3 runs on a link slow enough to show its gathers: it hides "
            f"them while a gather lasts no longer than the compute beside it — here A_f "
            f"{reg['gather_f'] * 1e3:.4g} {unit} against F {reg['forward'] * 1e3:.4g} {unit} ("
            + ("covered" if forward_covered else "not covered") + f"), A_b + R "
            f"{(reg['gather_b'] + reg['scatter']) * 1e3:.4g} {unit} against B "
            f"{reg['backward'] * 1e3:.4g} {unit} ("
            + ("covered" if backward_covered else "not covered") + "); with prefetch it ran "
            + (f"{gain:.2f}× faster" if gain > 1 else f"at {gain:.2f}× the speed: no gain")
            + f" ({ceiling:.2f}× at ideal overlap, section 6½)")


def when_to_use(table, comm_rows: list[dict], trade: dict, prefetch: dict) -> list[str]:
    """Print and return the chapter's "When to use it (from this run)" lines: the stages from the
    memory table (section 4) and the link comparison (section 9), prefetch (section 6½), and the
    states-against-activations threshold with checkpointing's trade (section 7)."""
    lines = ["When to use it (from this run):", *stage_lines(table, comm_rows),
             prefetch_line(prefetch), states_or_activations_line(table, trade)]
    print("\n".join(lines))
    return lines
