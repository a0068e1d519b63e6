"""`python -m parlab bench tp`: tensor parallelism (Megatron-LM; sequence parallelism, Korthikanti
et al. 2023) against PyTorch's parallelize_module, and cross-mesh resharding methods (AlpaComm,
Zhuang et al., MLSys 2023), each measured side by side in one run.

Part 1: tp, tp-sp, torch-tp (with and without sp) at each degree on loopback, median step times
over interleaved rounds, `vs_tp` the ratio to `tp`; SGD by default. Part 2: async TP (Wang et
al., ASPLOS 2023) against tp-sp on NVLink as an A100 sees it (`parlab.core.link.faithful`).
Part 3: resharding a tensor between two meshes with send-recv, broadcast, even split and
AlpaComm, beside each plan's α-β prediction; `--reshard-ordered` runs transfers in plan order.
How each part measures and why (loopback only for DTensor, SGD not AdamW): docs/tensor_parallel.md,
`parlab.tensor_parallel.bench`.
"""

from __future__ import annotations

import argparse
import json

from parlab.core.progress import progress

ASYNC_VARIANTS = ("tp-sp", "tp-sp:algo=ring", "tp-sp:async_tp")


def comm_and_compute(result, rank: int = 0, warmup: int = 1) -> tuple[float, float]:
    """(seconds waiting on communication, seconds computing) per step of `rank`, measured: the
    waits are the timeline's wait events inside forward and backward, the compute what is left of
    those spans."""
    events = [e for e in result.timeline if e["rank"] == rank]
    spans = [e for e in events if e["kind"] == "compute" and e["name"] in ("forward", "backward")
             and (e.get("args") or {}).get("step", 0) >= warmup]
    steps = len({e["args"]["step"] for e in spans}) or 1
    inside = sum(w["t1"] - w["t0"] for w in events if w["kind"] == "wait"
                 and any(s["t0"] <= w["t0"] and w["t1"] <= s["t1"] for s in spans))
    total = sum(s["t1"] - s["t0"] for s in spans)
    return inside / steps, (total - inside) / steps


def async_tp_rows(repeats: int, link=None, clock: str = "A100", steps: int = 3) -> list[dict]:
    """tp-sp (gloo's collectives), tp-sp with the pipelined ring's, and async TP at tp = 2, each
    step split into waiting and computing, with the diagnosis of what the overlap bought. On a
    paced `clock` (default A100, `parlab.core.clock`) the link is the real NVLink, undilated, in
    virtual time; with clock="wall" (this CPU, raw) NVLink dilated by this CPU's measured rate."""
    import statistics

    import parlab
    from parlab.core.link import achieved_flops, faithful
    from parlab.tensor_parallel.explore import print_rows, tp_rows

    model_config = {"n_embd": 256, "block_size": 128, "n_head": 4}
    if link is None and clock == "wall":
        probe = parlab.run("single", steps=3, model_config=model_config, batch_size=8)
        link = faithful("NVLink", achieved_flops(probe), "A100")
    elif link is None:
        link = "NVLink"
    print(f"\n# async TP, GPT n_embd=256 T=128 batch=8, tp=2, link {link}, clock {clock}")
    runs: dict = {}
    rows = tp_rows(ASYNC_VARIANTS, (2,), steps, link, model_config, 8, repeats, "sgd", runs=runs,
                   clock=clock)
    print_rows(rows)
    split = {}
    for variant in ASYNC_VARIANTS:  # the waiting / computing split of the same runs
        samples = [comm_and_compute(result) for result in runs[(variant, 2)]]
        split[variant] = tuple(statistics.median(x[i] for x in samples) for i in (0, 1))
        unit = runs[(variant, 2)][0].clock.unit
        print(f"{variant:16s} waiting {split[variant][0] * 1e3:6.3f} {unit}, computing "
              f"{split[variant][1] * 1e3:6.3f} {unit} per step (rank 0, inside forward + backward)")
    step = {r["scheme"]: r["step_ms"] for r in rows}
    ring, overlapped = split["tp-sp:algo=ring"], split["tp-sp:async_tp"]
    print(f"async TP: {step['tp-sp'] / step['tp-sp:async_tp']:.2f}× tp-sp's throughput (gloo's "
          f"collectives), {step['tp-sp:algo=ring'] / step['tp-sp:async_tp']:.2f}× with the ring's "
          f"(same bytes: {rows[0]['tp_MB_per_step']:.3f} MB per step each)")
    paced = runs[("tp-sp:async_tp", 2)][0].clock.paced
    print(f"against the ring, per step: {(ring[0] - overlapped[0]) * 1e3:.3f} {unit} less waiting, "
          f"{(overlapped[1] - ring[1]) * 1e3:.3f} {unit} more outside the waits (the chunked "
          "matmuls" + ("" if paced else ", and gloo sends that block in the caller until the peer "
                       "has posted its receive") + "): "
          + ("the overlap hides more than it costs" if ring[0] - overlapped[0] > overlapped[1] - ring[1]
             else "the chunked matmuls' extra operators, a kernel launch each, cost more than the "
             "waits the overlap hides" if paced else
             "the chunked matmuls and gloo's socket copies, which run on the same two cores "
             "as the matmuls (a GPU's copy engines do not), cost what the overlap hides"))
    return rows


def main(argv: list[str]) -> int:
    from parlab.tensor_parallel.explore import print_rows, tp_rows
    from parlab.tensor_parallel.explore.reshard import reshard_experiment

    parser = argparse.ArgumentParser(prog="python -m parlab bench tp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--degrees", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--schemes", nargs="+", default=["tp", "tp-sp", "torch-tp", "torch-tp:sp"],
                        help="scheme[:flag...], e.g. torch-tp:sp or tp:vocab_parallel")
    parser.add_argument("--steps", type=int, default=4, help="measured steps (after 1 warm-up)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--optimizer", default="sgd", help="sgd (default) or adamw; see below")
    parser.add_argument("--reshard-shape", type=int, nargs=2, default=[128, 128])
    parser.add_argument("--reshard-worlds", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--reshard-links", nargs="+", default=["loopback", "1GbE"])
    parser.add_argument("--reshard-repeats", type=int, default=3)
    parser.add_argument("--reshard-ordered", action="store_true",
                        help="each rank's transfers one at a time in plan order (Alpa's runtime, "
                             "where AlpaComm's send order matters)")
    parser.add_argument("--skip-tp", action="store_true")
    parser.add_argument("--skip-reshard", action="store_true")
    parser.add_argument("--skip-async", action="store_true")
    parser.add_argument("--json", help="save every row here")
    args = parser.parse_args(argv)

    out = {"tp": [], "async_tp": [], "reshard": []}
    if not args.skip_tp:
        model_config = {"n_embd": args.n_embd, "block_size": args.block_size, "n_head": 4}
        print(f"# tensor parallelism, GPT n_embd={args.n_embd} T={args.block_size} "
              f"batch={args.batch_size}, loopback, {args.repeats} round(s)")
        out["tp"] = tp_rows(args.schemes, args.degrees, args.steps, None, model_config,
                            args.batch_size, args.repeats, args.optimizer)
        print_rows(out["tp"])
    if not args.skip_async:
        out["async_tp"] = async_tp_rows(args.repeats)
    if not args.skip_reshard:
        for world in progress(args.reshard_worlds, desc="resharding"):
            for link in args.reshard_links:
                print(f"\n# resharding {tuple(args.reshard_shape)} fp32, ranks "
                      f"[0,{world // 2}) -> [{world // 2},{world}), link {link}"
                      + (", ordered runtime" if args.reshard_ordered else ""))
                rows = reshard_experiment(world, tuple(args.reshard_shape),
                                          None if link == "loopback" else link,
                                          repeats=args.reshard_repeats,
                                          ordered=args.reshard_ordered)
                for row in rows:
                    row.update(world_size=world, link=link)
                print_rows(rows)
                out["reshard"] += rows
    print("\nTimes are measured on a shared 2-core machine: ratios within one run are the "
          "signal; absolute numbers are noisy.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0
