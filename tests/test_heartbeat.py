"""The heartbeat (parlab.core.rank_process) reads where the main thread is without disturbing what
the main thread counts: a paced rank's operator count is the same whether or not another thread
reads its stack. Reading it with `sys._current_frames()` at any time was not: the frame objects
kept finished frames' locals alive until the reader let go, and a shapes-only Adam step counted a
`detach` more in some runs (CI saw a 4 µs step-0 difference between a shapes-only run and its real
run). The heartbeat now leaves the frames alone while a paced span counts (`pacer.counting`)."""

import threading

import torch

from parlab.core import clock as clocks
from parlab.core.pacer import Pacer, counting
from parlab.core.rank_process import thread_stack, where
from parlab.core.shapes import shapes


def _adam_first_steps(rounds: int) -> tuple[int, float]:
    pacer = Pacer(clocks.resolve("A100"))
    with shapes():
        for _ in range(rounds):
            params = [torch.nn.Parameter(torch.zeros(16, 16)) for _ in range(40)]
            for p in params:
                p.grad = torch.zeros_like(p)
            optimizer = torch.optim.Adam(params)
            pacer.enter()  # a paced compute span, as a rank's loop opens one
            optimizer.step()  # the first step: Adam's lazy state, torch.tensor(0.0) per parameter
            pacer.exit()
    return pacer.ops, pacer.flops


def test_reading_the_main_threads_stack_changes_no_count():
    alone = _adam_first_steps(1)
    stop, main, seen = threading.Event(), threading.get_ident(), []

    def heartbeat():
        while not stop.wait(0.0001):  # 5000× the real period: every chance to disturb
            frames = thread_stack(main)
            if frames is not None:
                seen.append(where(frames))

    reader = threading.Thread(target=heartbeat, daemon=True)
    reader.start()
    try:
        read = _adam_first_steps(20)
    finally:
        stop.set()
        reader.join()
    assert read == (20 * alone[0], 20 * alone[1])
    assert len(seen) > 20 and any("test_heartbeat.py" in at for at, _ in seen)
    assert not counting()  # every span closed


def test_no_stack_is_read_inside_a_counting_span():
    pacer = Pacer(clocks.resolve("A100"))
    pacer.enter()
    try:
        assert counting() and thread_stack(threading.get_ident()) is None
    finally:
        pacer.exit()
    assert thread_stack(threading.get_ident())[-2][2] == "test_no_stack_is_read_inside_a_counting_span"
