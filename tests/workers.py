"""Worker functions for the tests: ranks import them by module name, so they live in a file."""

import os
import time

import torch
import torch.distributed as dist

from parlab.core.comm import Comm


def hello(rank, world_size, scale=1.0):
    t = torch.tensor([float(rank) * scale])
    dist.all_reduce(t)
    return {"rank": rank, "sum": t.item(), "threads": torch.get_num_threads(), "pid": os.getpid()}


def raise_on(rank, world_size, bad_rank):
    if rank == bad_rank:
        raise ValueError(f"deliberate failure on rank {rank}")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.all_reduce(t)
    return rank


def kill_on(rank, world_size, bad_rank):
    if rank == bad_rank:
        os.kill(os.getpid(), 9)
    t = torch.ones(1)
    dist.all_reduce(t)
    return rank


def hang_on(rank, world_size, bad_rank):
    if rank == bad_rank:
        time.sleep(600)
    return os.getpid()


def report_pid_then_hang(rank, world_size, path):
    with open(f"{path}.{rank}", "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)


def collectives_vs_torch(rank, world_size, lengths, algos, seed):
    """Run every collective with every algorithm on random data; return ours, torch's, ledger."""
    comm = Comm()
    out = []
    for numel in lengths:
        g = torch.Generator().manual_seed(seed + 1000 * rank + numel)
        data = torch.randn(numel, generator=g, dtype=torch.float64)
        expect = data.clone()
        dist.all_reduce(expect)
        for algo in algos["all_reduce"]:
            mine = data.clone()
            comm.all_reduce(mine, algo=algo)
            out.append(("all_reduce", algo, numel, (mine - expect).abs().max().item()))
        for algo in algos["reduce_scatter"]:
            shard = comm.reduce_scatter(data.clone(), algo=algo)
            lo = sum(torch.tensor_split(torch.arange(numel), world_size)[r].numel()
                     for r in range(rank))
            ref = expect[lo:lo + shard.numel()]
            out.append(("reduce_scatter", algo, numel, (shard - ref).abs().max().item()
                        if shard.numel() else 0.0))
            # into a caller's buffer (`out=`): the result is a view of it, the values the same;
            # max as well as sum (the ring's last step writes straight into the buffer)
            buffer = torch.full((shard.numel(),), float("nan"), dtype=data.dtype)
            into = comm.reduce_scatter(data.clone(), algo=algo, out=buffer)
            maxed = comm.reduce_scatter(data.clone(), op="max", algo=algo,
                                        out=torch.empty_like(buffer))
            peak = data.clone()
            dist.all_reduce(peak, op=dist.ReduceOp.MAX)
            ok = into.data_ptr() == buffer.data_ptr() or not buffer.numel()
            out.append(("reduce_scatter", algo + "+out", numel, max(
                (into - ref).abs().max().item() if ok and into.numel() else (0.0 if ok else 1.0),
                (maxed - peak[lo:lo + shard.numel()]).abs().max().item() if shard.numel() else 0.0)))
        for algo in algos["all_gather"]:
            piece = torch.tensor_split(data, world_size)[rank]
            sizes = [p.numel() for p in torch.tensor_split(data, world_size)]
            full = comm.all_gather(piece, sizes=sizes, algo=algo)
            # torch's reference: gloo gathers equal sizes only, so pad every piece to the largest
            padded = torch.zeros(max(sizes), dtype=data.dtype)  # (max size,)
            padded[:piece.numel()] = piece
            gathered = [torch.empty(max(sizes), dtype=data.dtype) for _ in sizes]
            dist.all_gather(gathered, padded)  # world × (max size,)
            ref = torch.cat([g[:s] for g, s in zip(gathered, sizes)])  # (numel,)
            error = (full - ref).abs().max().item() if full.shape == ref.shape else float("inf")
            out.append(("all_gather", algo, numel, error))
            buffer = torch.full((numel,), float("nan"), dtype=data.dtype)
            into = comm.all_gather(piece, sizes=sizes, algo=algo, out=buffer)
            ok = into.data_ptr() == buffer.data_ptr()
            out.append(("all_gather", algo + "+out", numel,
                        (into - ref).abs().max().item() if ok else float("inf")))
    return {"errors": out, "ledger": comm.ledger.records}


def concurrent_ring_ops(rank, world_size, rounds):
    """An async ring all-gather in flight on the Comm's background thread while this thread runs
    a ring all-reduce whose messages have the same sizes: each must get its own messages."""
    comm = Comm()
    errors = []
    for i in range(rounds):
        shard = torch.full((1000,), float(rank + 1 + i))  # (S/N,)
        gathering = comm.all_gather(shard, algo="ring", async_op=True)  # (N·S/N,) in flight
        summed = torch.full((1000 * world_size,), 100.0 * (rank + 1))  # (S,) same chunk size
        comm.all_reduce(summed, algo="ring")
        gathered = gathering.wait()
        want = torch.cat([torch.full((1000,), float(r + 1 + i)) for r in range(world_size)])
        errors.append(max((gathered - want).abs().max().item(),
                          (summed - 100.0 * sum(range(1, world_size + 1))).abs().max().item()))
    return errors


def bad_out_buffers(rank, world_size):
    """The ValueError of each wrong `out=`: wrong length, wrong dtype, not contiguous."""
    comm = Comm()
    data = torch.ones(6)
    messages = []
    for call in (lambda: comm.reduce_scatter(data, out=torch.empty(4)),
                 lambda: comm.all_gather(data, out=torch.empty(12, dtype=torch.float64)),
                 lambda: comm.all_gather(data, out=torch.empty(12, 2)[:, 0])):
        try:
            call()
        except ValueError as e:
            messages.append(str(e))
    return messages


def profile_rank_main(rank, world_size, cfg):
    import cProfile
    import io
    import pstats

    from parlab.engine import runner
    prof = cProfile.Profile()
    prof.enable()
    runner._rank_main(rank, world_size, cfg)
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
    return s.getvalue()


def p2p_and_link(rank, world_size):
    from parlab.core.link import Link

    fast = Comm(link=None)
    slow = Comm(link=Link(0.0, 10e6, "10MB/s"))
    out = {}
    if rank == 0:
        fast.send(torch.arange(10, dtype=torch.float32), dst=1)
        out["send_bytes"] = fast.ledger.records[-1]["bytes_sent"]
    else:
        buf = torch.empty(10)
        handle = fast.irecv(buf, src=0)
        handle.wait()
        out["received"] = [int(v) for v in buf.tolist()]
        out["recv_bytes"] = fast.ledger.records[-1]["bytes_recv"]
    big = torch.ones(1 << 18)  # 1 MiB
    handle = slow.all_reduce(big, async_op=True)
    handle.wait()
    record = handle.record  # the ledger's record of the op: issue (t_start) to delivery (t_end)
    out["lasted_s"] = record["t_end"] - record["t_start"]
    # the rank's Timeline holds the same op as a "comm" event, issue to completion
    event = [e for e in slow.timeline.events if e.kind == "comm"][-1]
    out["event_s"] = event.t1 - event.t0
    out["cost_s"] = slow.link.cost(record["bytes_sent"], record["rounds"])  # the link's plan
    out["planned_s"] = handle.ready_at - record["t_start"]  # when the link model said it delivers
    out["slow_bytes"] = record["bytes_sent"]
    out["rounds"] = record["rounds"]
    return out


def all_to_all_check(rank, world_size):
    comm = Comm()
    inputs = [torch.full((rank + 1, 2), float(10 * rank + j)) for j in range(world_size)]
    shapes = [(j + 1, 2) for j in range(world_size)]
    ok = True
    for algo in ("gloo", "pairwise"):
        outputs = comm.all_to_all(inputs, output_shapes=shapes, algo=algo)
        ok &= all(torch.equal(outputs[j], torch.full((j + 1, 2), float(10 * j + rank)))
                  for j in range(world_size))
    return {"ok": ok}


def mesh_check(rank, world_size):
    from parlab.core.mesh import Mesh

    mesh = Mesh(Comm(), [("dp", 2), ("tp", 2)])
    tp = torch.tensor([float(rank)])
    mesh["tp"].all_reduce(tp)
    dp = torch.tensor([float(rank)])
    mesh["dp"].all_reduce(dp)
    return {"coords": mesh.coords, "tp_sum": int(tp.item()), "dp_sum": int(dp.item())}


def duplex_exchange(rank, world_size):
    """isend + irecv at once on an emulated 10 MB/s link: each direction pays its own 0.1 s."""
    from parlab.core.link import Link

    comm = Comm(link=Link(0.0, 10e6, "10MB/s"))
    peer = 1 - rank
    out_buf, in_buf = torch.ones(1 << 18), torch.empty(1 << 18)  # 1 MiB each way
    send = comm.isend(out_buf, peer)
    recv = comm.irecv(in_buf, peer)
    planned = [h.ready_at - h.record["t_start"] for h in (send, recv)]
    send.wait()
    recv.wait()
    return planned


def mmapped_bytes_of_a_new_tensor(rank, world_size):
    """Bytes glibc mmapped for a fresh 8 MB tensor in this rank (glibc's mallinfo2().hblkhd)."""
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Info
    before = libc.mallinfo2().hblkhd
    block = torch.empty(8 << 20, dtype=torch.uint8)  # noqa: F841 - alive while measured
    return libc.mallinfo2().hblkhd - before
