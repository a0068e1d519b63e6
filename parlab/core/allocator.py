"""Keep freed memory in the process, as a GPU framework's caching allocator does.

On a GPU, PyTorch's caching allocator keeps every freed block and hands it to the next tensor of
a similar size, so a training step allocates no new device memory after the first. On CPU,
PyTorch asks the C library's `malloc`, and glibc does the opposite for large tensors: a block
over its mmap threshold (128 KB at start) comes from fresh pages the kernel maps on first
touch, 4 KB at a time, and a freed block at the top of the heap over the trim threshold goes
back to the kernel. A tensor that lives past the op that made it (an activation saved for
backward, a stashed gradient) makes the next one of its size take fresh pages again, so the op
that writes it pays page faults that its FLOPs do not explain.

Measured here (a pipeline stage of the wide GPT, 8 rows of 64 tokens, one thread): zero-bubble's
split backward, which stashes ∂L/∂Y of every linear until W, cost 1.15× the plain backward, with
`gelu_backward` twice as slow, all of it first-touch page faults; with freed memory kept, 1.02×.

`keep_freed_memory()` sets glibc's `mallopt` so large blocks come from the heap and freed ones
stay there: each rank's resident memory stays at its peak, as a GPU's reserved memory does. Every
rank that `parlab.core.launch` starts calls it first, so both sides of every comparison run
alike; under torchrun the process is the user's, and its allocator is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>: keep a free heap top up to this many bytes
M_MMAP_THRESHOLD = -3  # serve blocks below this many bytes from the heap, not fresh mmaps
KEEP_BYTES = 1 << 30  # every tensor under 1 GiB; what is freed stays for the next
GLIBC_MMAP_THRESHOLD_MAX = 32 << 20  # the most some glibc versions accept (64-bit)


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse; False where there is no glibc `mallopt`
    (macOS, musl), which leaves the allocator as it is."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):
        return False
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    served = mallopt(M_MMAP_THRESHOLD, KEEP_BYTES) or mallopt(M_MMAP_THRESHOLD,
                                                              GLIBC_MMAP_THRESHOLD_MAX)
    return bool(served) and bool(mallopt(M_TRIM_THRESHOLD, 2 * KEEP_BYTES - 1))
