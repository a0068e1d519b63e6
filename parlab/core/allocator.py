"""Keep freed memory in the process, as a GPU framework's caching allocator does.

On a GPU, PyTorch's caching allocator reuses freed blocks, so a step allocates no new device
memory after the first. On CPU glibc's `malloc` maps large blocks from fresh pages and returns
freed ones to the kernel, so an op writing a tensor that outlives it pays first-touch page faults
its FLOPs do not explain (measured: zero-bubble's split backward 1.15× the plain one, 1.02× with
freed memory kept). `keep_freed_memory()` sets glibc's `mallopt` so large blocks come from the
heap and stay there; every rank `parlab.core.launch` starts calls it first (under torchrun the
allocator is left as it is). The measurement in full: docs/core.md, `parlab.core.allocator`.
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
