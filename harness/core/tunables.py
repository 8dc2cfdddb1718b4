"""The malloc settings timings run under (``GLIBC_TUNABLES``), in a module without torch: the CLI must re-execute itself
with them before torch is imported (glibc reads them at process start only)."""

from __future__ import annotations

import os

# glibc malloc churn adds noise to CPU timings and biases them against variants that
# create many temporaries (their spread between calls shrinks with these settings): large
# blocks are otherwise mmap'ed and returned to the kernel on every call, and the heap top is
# trimmed and regrown. glibc reads GLIBC_TUNABLES only at process start, so the CLI re-executes
# itself with it set. It keeps freed memory in the process, so it must NOT be set for figures
# based on RSS (peak resident memory would then count memory that is merely cached).
# mmap_max=0 as well: 32 MiB is the largest mmap_threshold glibc accepts, so a larger block (the
# explicit-softmax n x n scores: 128 MiB at n = 2048, batch 4, 2 heads) was still mmap'ed and
# page-faulted in again on every call. That made `vanilla` bimodal between and within quiet runs,
# forward and backward. Without mmap, glibc serves such blocks from the heap it keeps (it still
# falls back to mmap when the heap cannot grow).
# arena_max=1: when an allocation fails in the main heap (an n^2 cell past the address-space cap, recorded as `oom`),
# glibc retries it in a second arena and leaves the thread there; that arena's heaps are at most 64 MiB mmap'ed
# regions, so every later large block went back and forth between arenas, freshly page-faulted: a large
# alloc+fill+free, and the cells after the `oom` in the same process, ran slower. With one arena there is nowhere to
# switch to, and both stay as before (tests/harness/measure/test_timing.py checks the arena count).
# trim_threshold=1 TiB: the heap top is never given back during a group. At 1 GiB, an explicit-softmax `vanilla` at
# n = 4096 fwd+bwd freed 1.5 GiB of scores on each call, glibc gave the top back and the next call page-faulted it in
# again on every call (its time measured the VM's page faults more than the layer: marked § in the tables). Memory a
# group freed is handed back between groups instead (``release_freed_memory``), so the process does not keep the
# largest group's heap for the rest of the run. Measured: docs/measuring.md, "CPU clock and the allocator", and the
# results files it links.
GLIBC_TUNABLES_TIMING: str = (
    "glibc.malloc.mmap_threshold=33554432"
    ":glibc.malloc.trim_threshold=1099511627776"
    ":glibc.malloc.top_pad=268435456"
    ":glibc.malloc.mmap_max=0"
    ":glibc.malloc.arena_max=1"
)


def timing_env_active() -> bool:
    """Returns whether this process was started with the malloc settings of ``GLIBC_TUNABLES_TIMING``."""
    active = set(os.environ.get("GLIBC_TUNABLES", "").split(":"))
    return set(GLIBC_TUNABLES_TIMING.split(":")) <= active


def _glibc() -> object | None:
    """glibc through ctypes, or None where the C library is another (musl, macOS)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018  (both glibc's: absent elsewhere)
    except (OSError, AttributeError):
        return None
    return libc


def release_freed_memory() -> bool:
    """Hand the memory glibc's malloc holds free back to the OS (``malloc_trim(0)``: the heap top and the free pages
    inside the heap); called between timed groups, since the timing settings never trim during one. Returns whether
    it ran (False where the C library is not glibc)."""
    import ctypes

    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    libc.malloc_trim(0)
    return True


#: mallopt's parameters (glibc's malloc.h).
_M_MMAP_THRESHOLD, _M_MMAP_MAX = -3, -4
#: Blocks from this size on are mapped on their own by :func:`map_large_blocks` (the timing settings' threshold).
LARGE_BLOCK_BYTES = 32 * 2**20


def map_large_blocks() -> bool:
    """From now on, let glibc map every block of :data:`LARGE_BLOCK_BYTES` or more on its own (and unmap it when freed),
    undoing the timing settings' ``mmap_max=0`` for this process. For kinds whose timed calls allocate small blocks
    only (a decoding step) while their setup allocates gigabytes once (a long prompt's prefill): freed from the heap,
    those would be handed back by ``malloc_trim`` with their addresses kept, so that touching them again grows no
    address space and the memory cap (:func:`harness.core.cell.cpu_memory_cap`) must count them against what may
    still be allocated. Returns whether it ran (False where the C library is not glibc)."""
    import ctypes

    libc = _glibc()
    if libc is None:
        return False
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(libc.mallopt(_M_MMAP_MAX, 65536) and libc.mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES))
