"""Tests of harness.timing (structure and units only; nothing here asserts a speed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
import torch

import harness.measure.timing
from harness.measure.timing import (
    GLIBC_TUNABLES_TIMING,
    TimingResult,
    build_plans,
    cache_flags,
    time_fn,
    timing_env_active,
    warm_cache,
)

CPU = torch.device("cpu")


def test_cpu_result_is_consistent() -> None:
    x = torch.randn(64, 64)
    result = time_fn(lambda: x @ x, CPU, min_run_time_s=0.05, min_repeats=7)
    assert isinstance(result, TimingResult)
    assert len(result.times_ms) >= 7
    assert result.n_calls >= len(result.times_ms)
    assert min(result.times_ms) <= result.median_ms <= max(result.times_ms)
    assert min(result.times_ms) <= result.mean_ms <= max(result.times_ms)
    assert result.iqr_ms >= 0
    assert result.threads == torch.get_num_threads()
    assert result.method == "torch.utils.benchmark.blocked_autorange"


def test_slow_call_is_topped_up_to_min_repeats() -> None:
    # One call outlasts min_run_time_s, so blocked_autorange alone yields a single sample.
    result = time_fn(lambda: time.sleep(0.02), CPU, min_run_time_s=0.01, min_repeats=4, warmup=0)
    assert len(result.times_ms) == 4
    assert result.n_calls == 4


def test_sleep_is_reported_in_milliseconds() -> None:
    result = time_fn(lambda: time.sleep(0.01), CPU, min_run_time_s=0.05, min_repeats=3, warmup=1)
    assert 9.0 <= result.median_ms <= 60.0


def test_warmup_calls_are_made_and_not_counted() -> None:
    calls = []
    result = time_fn(lambda: calls.append(1), CPU, min_run_time_s=0.01, min_repeats=5, warmup=3)
    # blocked_autorange also calls fn while sizing its blocks, so only a lower bound is exact.
    assert len(calls) >= 3 + result.n_calls


def test_result_is_immutable() -> None:
    result = time_fn(lambda: None, CPU, min_run_time_s=0.01)
    with pytest.raises(AttributeError):
        result.median_ms = 0.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("value", "active"),
    [
        (None, False),
        ("", False),
        ("glibc.malloc.mmap_threshold=33554432", False),
        (GLIBC_TUNABLES_TIMING, True),
        ("glibc.pthread.rseq=0:" + GLIBC_TUNABLES_TIMING, True),
    ],
)
def test_timing_env_active(monkeypatch: pytest.MonkeyPatch, value: str | None, active: bool) -> None:
    if value is None:
        monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    else:
        monkeypatch.setenv("GLIBC_TUNABLES", value)
    assert timing_env_active() is active


_AFTER_FAILED_ALLOCATION = """
import ctypes, resource, threading, torch
# A second thread, as the runner has (torch's pool, tqdm's monitor): glibc retries a failed allocation in another
# arena only in a multi-threaded process.
threading.Thread(target=threading.Event().wait, daemon=True).start()
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, resource.RLIM_INFINITY))  # 1 GiB of headroom
try:
    torch.empty(2**30)  # 4 GiB: fails, as an n^2 cell past the runner's cap does
except RuntimeError:
    pass
else:
    raise SystemExit("the allocation was expected to fail")
block = torch.ones(2**25)  # 128 MiB: a large block after the failure
del block
ctypes.CDLL("libc.so.6").malloc_stats()  # per-arena statistics on stderr
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
@pytest.mark.parametrize(("tunables", "one_arena"), [
    (GLIBC_TUNABLES_TIMING, True),
    # The control: without arena_max=1 glibc opens more arenas (the slowdown's cause), so the check can fail.
    (GLIBC_TUNABLES_TIMING.replace(":glibc.malloc.arena_max=1", ""), False),
])
def test_failed_allocation_keeps_one_malloc_arena(tunables: str, one_arena: bool) -> None:
    assert "arena_max=1" in GLIBC_TUNABLES_TIMING
    env = {**os.environ, "GLIBC_TUNABLES": tunables, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _AFTER_FAILED_ALLOCATION], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    arenas = re.findall(r"^Arena (\d+):", proc.stderr, flags=re.M)
    assert (arenas == ["0"]) is one_arena, proc.stderr


_REFAULTS = """
import ctypes, resource
from harness.core.tunables import release_freed_memory

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

def call() -> None:  # a call that fills and frees a large block, as `vanilla`'s n x n scores (128 MiB here)
    block = libc.malloc(2**27)
    ctypes.memset(block, 1, 2**27)
    libc.free(block)

start = rss()
call()  # the first call faults its memory in, as a warm-up does
call()
kept = rss() - start  # what the heap holds after a call: the block, or nothing where it was trimmed
release_freed_memory()
print(kept, kept - (rss() - start))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
@pytest.mark.parametrize(("tunables", "refaults"), [
    (GLIBC_TUNABLES_TIMING, False),
    # The control: a trim threshold below the block (the old 1 GiB against 1.5 GiB of scores, scaled down, with no
    # top pad that would keep the block anyway) gives the heap top back after every call, so every call faults the
    # block in again (the § effect): the check can fail.
    (GLIBC_TUNABLES_TIMING.replace("trim_threshold=1099511627776", "trim_threshold=67108864")
     .replace("top_pad=268435456", "top_pad=0"), True),
])
def test_a_freed_block_stays_for_the_next_call_and_is_given_back_between_groups(tunables: str,
                                                                                refaults: bool) -> None:
    """Memory kept between calls is memory not faulted in again (page sizes differ between kernels, so the check
    reads the resident set rather than a fault count)."""
    # above the largest block a suite frees within a group (`vanilla`'s scores at n = 4096 fwd+bwd: 1.5 GiB)
    assert "trim_threshold=1099511627776" in GLIBC_TUNABLES_TIMING
    env = {**os.environ, "GLIBC_TUNABLES": tunables, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _REFAULTS], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kept, released = map(float, proc.stdout.split())
    block = 2**27
    assert (kept < block / 2) is refaults, kept
    if not refaults:  # what the heap kept during the "group" goes back to the OS between groups
        assert released > block / 2, released


_UNMAPS = """
import ctypes, sys
from harness.core.tunables import map_large_blocks, release_freed_memory

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def mapped_not_resident() -> int:  # what the memory cap counts against the room it grants (cpu_memory_cap)
    with open("/proc/self/status") as f:
        kb = {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith(("VmSize:", "VmRSS:"))}
    return (kb["VmSize"] - kb["VmRSS"]) * 1024

if sys.argv[1] == "1":
    assert map_large_blocks()
release_freed_memory()
start = mapped_not_resident()
block = libc.malloc(2**28)  # a prefill's scores (256 MiB here), freed before the timed steps
ctypes.memset(block, 1, 2**28)
libc.sbrk.restype, libc.sbrk.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t]
in_heap = block < libc.sbrk(0)  # below the program break: in the brk heap, not a mapping of its own
kept_alive = libc.malloc(2**20)  # what the prefill leaves (its cache): above the block, so the heap cannot shrink
libc.free(block)
release_freed_memory()  # what the harness does between groups: the block's pages go, its addresses stay
print(mapped_not_resident() - start, int(in_heap))
libc.free(kept_alive)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
# False: the control (the freed block stays mapped). It kept ~1 MiB instead of the 256 MiB hole in two fresh-clone
# CI runs on 2026-11-28 and passed alone every time: what decides it on this VM is not understood, so the control runs
# with the slow tests (`make test-slow`) and the mechanism's own case in every run.
@pytest.mark.parametrize("mapped", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_map_large_blocks_gives_a_freed_block_s_address_space_back(mapped: bool) -> None:
    """Address space a freed block keeps counts against the memory cap (``RLIMIT_AS``): after ``map_large_blocks`` a
    freed large block leaves none behind, where under the timing settings alone it stays mapped, a hole in the heap."""
    env = {**os.environ, "GLIBC_TUNABLES": GLIBC_TUNABLES_TIMING, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _UNMAPS, "1" if mapped else "0"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kept, in_heap = map(int, proc.stdout.split())
    if not mapped and not in_heap:  # glibc falls back to a mapping when brk cannot grow the heap (the address space
        # above it taken): no heap hole to show on this run (a fresh-clone CI run saw the control keep 1 MiB)
        pytest.skip("the control's block was mapped on its own (brk could not grow the heap): no hole to show")
    assert (kept < 2**26) is mapped, kept


MIB = 2**20


@pytest.mark.parametrize(("working_set", "l2", "flush_l2", "warm"), [
    (10 * MIB, 50 * MIB, False, True),  # fits in L2, not flushed: every timed call ran from a warm L2
    (50 * MIB, 50 * MIB, False, True),  # exactly fits
    (51 * MIB, 50 * MIB, False, False),  # does not fit: the calls stream it from memory either way
    (10 * MIB, 50 * MIB, True, False),  # flushed before every call: cold by construction
    (10 * MIB, None, False, None),  # no L2 size (the CPU): no flag
    (None, 50 * MIB, False, None),  # no working set measured: no flag
])
def test_a_working_set_that_fits_in_l2_is_flagged_warm_unless_l2_is_flushed(
        working_set: int | None, l2: int | None, flush_l2: bool, warm: bool | None) -> None:
    assert warm_cache(working_set, l2, flush_l2) is warm


def test_no_cache_flag_is_set_on_the_cpu() -> None:
    assert cache_flags(MIB, CPU, False) == {}


def test_a_cuda_flag_stores_the_working_set_and_l2_beside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.measure.timing, "l2_cache_bytes", lambda device: 50 * MIB)
    assert cache_flags(MIB, torch.device("cuda"), None) == {
        "working_set_bytes": MIB, "l2_cache_bytes": 50 * MIB, "warm_cache": True}


def test_the_l2_flush_writes_twice_the_l2(monkeypatch: pytest.MonkeyPatch) -> None:
    """At least 256 MiB (any current GPU's L2 twice over), and twice the L2 of a device with more (allocated here on
    the CPU, untouched: the size is what is tested)."""
    monkeypatch.setattr(harness.measure.timing, "l2_cache_bytes", lambda device: 200 * MIB)
    assert harness.measure.timing._flush_buffer(CPU).numel() == 400 * MIB
    monkeypatch.setattr(harness.measure.timing, "l2_cache_bytes", lambda device: 50 * MIB)
    assert harness.measure.timing._flush_buffer(CPU).numel() == 256 * MIB


class _Planned(torch.nn.Module):
    """A made-up attention with a plan: counts its build_plan calls and the shapes they were for."""

    def __init__(self) -> None:
        super().__init__()
        self.plans: list[tuple[int, int]] = []

    def build_plan(self, seq_len: int, batch_size: int) -> None:
        self.plans.append((seq_len, batch_size))
        time.sleep(0.01)


def test_every_module_with_a_plan_builds_it_once_and_the_costs_add_up() -> None:
    model = torch.nn.Sequential(_Planned(), torch.nn.Linear(2, 2), torch.nn.Sequential(_Planned()))
    ms = build_plans(model, 128, 4, CPU)
    assert ms is not None and ms >= 20  # two plans of 10 ms each, summed
    assert model[0].plans == [(128, 4)] and model[2][0].plans == [(128, 4)]


def test_a_module_without_a_plan_has_no_plan_time() -> None:
    assert build_plans(torch.nn.Linear(2, 2), 128, 4, CPU) is None
