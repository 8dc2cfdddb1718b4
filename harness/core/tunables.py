"""The malloc settings timings run under (``GLIBC_TUNABLES``), in a module without torch: the CLI must re-execute itself
with them before torch is imported (glibc reads them at process start only)."""

from __future__ import annotations

import os

# glibc malloc churn adds up to 20% noise to CPU timings and biases them against variants that
# create many temporaries (measured: Performer CV 17.7% -> 5.8% with these settings): large
# blocks are otherwise mmap'ed and returned to the kernel on every call, and the heap top is
# trimmed and regrown. glibc reads GLIBC_TUNABLES only at process start, so the CLI re-executes
# itself with it set. It keeps freed memory in the process, so it must NOT be set for figures
# based on RSS (peak resident memory would then count memory that is merely cached).
# mmap_max=0 as well: 32 MiB is the largest mmap_threshold glibc accepts, so a larger block (the
# explicit-softmax n x n scores: 128 MiB at n = 2048, batch 4, 2 heads) was still mmap'ed and
# page-faulted in again on every call. That made `vanilla` bimodal between and within quiet runs
# (n = 2048 fwd: 83-207 ms per call, median 147; with mmap_max=0: 88-149, median 90; fwd+bwd
# median 347 -> 240 ms). Without mmap, glibc serves such blocks from the heap it keeps (it still
# falls back to mmap when the heap cannot grow).
# arena_max=1: when an allocation fails in the main heap (an n^2 cell past the address-space cap, recorded as `oom`),
# glibc retries it in a second arena and leaves the thread there; that arena's heaps are at most 64 MiB mmap'ed
# regions, so every later large block went back and forth between arenas, freshly page-faulted. Measured: a 100 MiB
# alloc+fill+free went 4 ms -> 27 ms after one failed 32 GiB allocation, and Scatterbrain at n = 16384 fwd+bwd
# 2.8 s -> 4.9 s after `vanilla`'s oom in the same process; with one arena there is nowhere to switch to, and both
# stay as before (tests/harness/measure/test_timing.py checks the arena count).
GLIBC_TUNABLES_TIMING: str = (
    "glibc.malloc.mmap_threshold=33554432"
    ":glibc.malloc.trim_threshold=1073741824"
    ":glibc.malloc.top_pad=268435456"
    ":glibc.malloc.mmap_max=0"
    ":glibc.malloc.arena_max=1"
)


def timing_env_active() -> bool:
    """Returns whether this process was started with the malloc settings of ``GLIBC_TUNABLES_TIMING``."""
    active = set(os.environ.get("GLIBC_TUNABLES", "").split(":"))
    return set(GLIBC_TUNABLES_TIMING.split(":")) <= active
