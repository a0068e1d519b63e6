"""The heartbeat (parlab.core.rank_process) reads where the main thread is without disturbing what
the main thread counts: a paced rank's operator count is the same whether or not another thread
reads its stack. Reading it with `sys._current_frames()` was not: the frame objects kept finished
frames' locals alive until the reader let go, and a shapes-only Adam step counted a `detach` more
in some runs (CI saw a 4 µs step-0 difference between a shapes-only run and its real run)."""

import tempfile
import threading

import torch

from parlab.core.pacer import work_meter
from parlab.core.rank_process import thread_stack, where
from parlab.core.shapes import shapes


def _adam_first_steps(rounds: int) -> tuple[int, float]:
    ops = flops = 0
    with shapes():
        for _ in range(rounds):
            params = [torch.nn.Parameter(torch.zeros(16, 16)) for _ in range(40)]
            for p in params:
                p.grad = torch.zeros_like(p)
            optimizer = torch.optim.Adam(params)
            meter = work_meter()
            with meter:
                optimizer.step()  # the first step: Adam's lazy state, torch.tensor(0.0) per parameter
            ops, flops = ops + meter.ops, flops + meter.flops
    return ops, flops


def test_reading_the_main_threads_stack_changes_no_count():
    alone = _adam_first_steps(1)
    stop, main, seen = threading.Event(), threading.get_ident(), []

    def heartbeat():
        with tempfile.TemporaryFile() as dump:
            while not stop.wait(0.0001):  # 5000× the real period: every chance to disturb
                seen.append(where(thread_stack(dump, main)))

    reader = threading.Thread(target=heartbeat, daemon=True)
    reader.start()
    try:
        read = _adam_first_steps(20)
    finally:
        stop.set()
        reader.join()
    assert read == (20 * alone[0], 20 * alone[1])
    assert len(seen) > 20 and any("test_heartbeat.py" in at for at, _ in seen)
