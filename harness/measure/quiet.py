"""Is the machine quiet? The CPU time other processes take while a cell is timed, steal, and a reference kernel.

On a small machine one other busy process multiplies a cell's time (when the intra-op threads take every core), and
the whole machine drifts between quiet runs by more than the differences one wants to see (figures:
docs/measuring.md, "Is the machine quiet? Noise flags", and the results files it links). So every timed group of
cells records, over its timing window:

- ``load_other_cores``: CPU time used by every other process, in cores (system busy time from ``/proc/stat`` minus
  this process's own time from ``/proc/self/stat``, over the wall time). The kernel's run-queue average cannot tell
  this: it counts the benchmark's own threads.
- ``steal_fraction``: the share of the window the hypervisor gave this VM's CPUs to others.
- ``calibration_ratio``: the time of a fixed reference kernel around the group against the same kernel at the start
  of the run (1.0 = as fast as then). It is taken before and after the group and the faster counts: a slowdown of
  the machine that lasts through the group shows in both, while a transient of a few milliseconds does not flag the
  group. A reference taken once, before the group, can catch such a transient (just after the group's workloads
  were built, with no other process or steal in sight) and flag every cell of a group whose own rates were those
  of the rest of the quiet run.

A cell is ``noisy`` (a flag with its reason, beside its status) when another process used more than
:data:`BUSY_CORES`, steal exceeded :data:`MAX_STEAL`, or the reference kernel ran more than :data:`MAX_DRIFT`
slower than at the run's start. A faster kernel is not noise: the reference taken at the start can itself be slow
(a transient of the VM), and a two-sided check then flags every cell of a quiet run. On a machine without ``/proc``
the load fields are None and only the drift is checked.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from .gpu import reference_kernel_ms

BUSY_CORES = 0.3  # other processes' CPU use (in cores) above which a timing is not trusted
MAX_STEAL = 0.05
MAX_DRIFT = 0.15  # calibration ratio - 1: how much slower than at the run's start
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_REFERENCE_SIZE = 192  # a 192x192 matmul: short on one core, in cache, no allocation


@dataclass(frozen=True)
class CpuTimes:
    wall_s: float
    busy_ticks: int | None  # all CPUs, every process
    steal_ticks: int | None
    own_ticks: int | None  # this process, all its threads


def cpu_times() -> CpuTimes:
    """A snapshot of the machine's and this process's CPU time."""
    wall = time.monotonic()
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()  # the command name may hold spaces: split after it
    except (OSError, ValueError, IndexError):
        return CpuTimes(wall, None, None, None)
    # user nice system idle iowait irq softirq steal ...: busy = everything but idle and iowait (and steal, counted
    # apart: time the CPU was not ours)
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    steal = fields[7] if len(fields) > 7 else 0
    return CpuTimes(wall, sum(fields[:8]) - idle - steal, steal, int(own[11]) + int(own[12]))  # utime + stime


def load_between(start: CpuTimes, end: CpuTimes) -> dict[str, float | None]:
    """Other processes' CPU use (cores) and the steal fraction between two snapshots."""
    wall = max(end.wall_s - start.wall_s, 1e-9)
    if None in (start.busy_ticks, end.busy_ticks, start.own_ticks, end.own_ticks):
        return {"load_other_cores": None, "steal_fraction": None}
    other = (end.busy_ticks - start.busy_ticks) - (end.own_ticks - start.own_ticks)  # type: ignore[operator]
    steal = (end.steal_ticks - start.steal_ticks) / (_TICKS * wall * (os.cpu_count() or 1))  # type: ignore[operator]
    return {"load_other_cores": max(0.0, other / (_TICKS * wall)), "steal_fraction": max(0.0, steal)}


def calibrate(device: torch.device | None = None, repeats: int = 15) -> float:
    """Median time (ms) of a fixed reference kernel: on a CUDA ``device`` a GPU matrix product
    (:func:`harness.measure.gpu.reference_kernel_ms`: a CPU kernel says nothing of the GPU, and on an idle GPU machine
    it flagged every group), else a CPU one on this process's threads: the machine's speed right now."""
    if device is not None and device.type == "cuda":
        return reference_kernel_ms(device, repeats)
    a = torch.ones(_REFERENCE_SIZE, _REFERENCE_SIZE)
    out = torch.empty_like(a)
    torch.mm(a, a, out=out)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, a, out=out)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def noise_flags(load: dict[str, float | None], calibration_ratio: float | None, *extra: str) -> dict[str, Any]:
    """``noisy`` and its reason (empty when quiet), from the load of a timing window, the calibration drift and any
    ``extra`` reasons (a GPU that slowed itself down)."""
    reasons = [r for r in extra if r]
    other, steal = load.get("load_other_cores"), load.get("steal_fraction")
    if other is not None and other > BUSY_CORES:
        reasons.append(f"other processes used {other:.2f} cores")
    if steal is not None and steal > MAX_STEAL:
        reasons.append(f"CPU steal {100 * steal:.0f}%")
    if calibration_ratio is not None and calibration_ratio - 1 > MAX_DRIFT:
        reasons.append(f"reference kernel {100 * (calibration_ratio - 1):+.0f}% against the run's start")
    return {**load, "calibration_ratio": calibration_ratio, "noisy": bool(reasons), "noisy_reason": "; ".join(reasons)}


def other_load(window_s: float = 1.0) -> float | None:
    """Other processes' CPU use (cores) over the next ``window_s`` seconds while this process sleeps."""
    start = cpu_times()
    time.sleep(window_s)
    return load_between(start, cpu_times())["load_other_cores"]
