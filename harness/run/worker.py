"""``--isolate``: each cell in a fresh ``python -m harness.run.worker``, so a crash, a hard hang or leaked memory stays
inside that cell. The parent (:func:`run_isolated`) writes one job as a JSON file, names it on the worker's command
line and reads the result file; the worker (:func:`main`) runs the cell and writes that file atomically. A missing
result file is the worker's death, recorded with its exit code or signal; the time limit kills the worker's process
group. The limit counts from when the worker says it is ready (:data:`READY`), not from its start: Python and torch
take seconds to start, more on a loaded machine, and a healthy cell must not time out for them.

A worker dies with its runner: it asks the kernel for SIGKILL when its parent dies (Linux ``PR_SET_PDEATHSIG``), so a
runner killed by SIGKILL (which no handler sees) leaves no worker writing checkpoints beside the resumed run. Its
job files live under ``<suite dir>/.workers/``, which the next run into that directory clears.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core.cell import Cell, CellResult, Context
from ..core.errors import EnvironmentFault
from ..core.files import atomic_write_text
from ..measure.timing import GLIBC_TUNABLES_TIMING
from .execute import execute_group

#: Where the job and result files of isolated workers live, inside the suite's directory (cleared by the next run).
WORKER_DIR = ".workers"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
FAULT = "environment_fault"  # the key of a worker's result that is an environment fault, not cell results
READY = "ready"  # what a worker prints once it has imported everything and read its job
#: How long a worker may take to get ready (start Python, import torch and the harness, read its job) before its cells'
#: time limit starts. Importing torch takes seconds, far more on a loaded machine; a worker not ready after ten minutes
#: is stuck.
STARTUP_LIMIT_S = 600.0


def run_isolated(cell: Cell, ctx: Context) -> CellResult:
    """Run ``cell`` in a fresh Python process; its death or hang becomes the cell's status."""
    return run_isolated_group([cell], ctx)[0]


def run_isolated_group(cells: list[Cell], ctx: Context) -> list[CellResult]:
    """Run a group of cells (:func:`harness.run.execute.execute_group`) in a fresh Python process; its death or hang
    becomes the status of every cell of the group.

    The time limit (``ctx.timeout_s`` per cell) is enforced here (the process is killed), not inside the worker.
    """
    outcome = _worker(cells, ctx, ctx.timeout_s * len(cells) if ctx.timeout_s else None)
    if isinstance(outcome, list):
        return outcome
    if len(cells) == 1:
        return [outcome]
    # The worker died or hung and took its whole group with it: run each cell alone, so that the failure stays in
    # the cell that caused it (those cells are timed alone, their ratios unpaired).
    return [result for cell in cells for result in run_isolated_group([cell], ctx)]


def _worker(cells: list[Cell], ctx: Context, limit: float | None) -> list[CellResult] | CellResult:
    """One worker process for ``cells``: their results, or the one result of its death or hang."""
    (ctx.workdir / WORKER_DIR).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="worker-", dir=ctx.workdir / WORKER_DIR) as tmp:
        job_path, result_path, stderr_path = (Path(tmp) / name for name in ("job.json", "result.json", "stderr.txt"))
        job = {
            "runner_pid": os.getpid(),
            "cells": [cell.to_json() for cell in cells],
            "gemm_peak_gflops": ctx.gemm_peak_gflops,
            "calibration_ms": ctx.calibration_ms,
            "workdir": str(ctx.workdir),
            "cache_dir": None if ctx.cache_dir is None else str(ctx.cache_dir),
            "result_path": str(result_path),
        }
        job_path.write_text(json.dumps(job))
        env = {**os.environ}
        if cells[0].device.startswith("cpu"):
            env["GLIBC_TUNABLES"] = GLIBC_TUNABLES_TIMING  # read by glibc at process start only
        # stderr to a file, not a pipe: a worker that writes much while the runner only waits must not block on it
        with open(stderr_path, "w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "harness.run.worker", str(job_path)], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=stderr, env=env, bufsize=0, start_new_session=True,
            )
            try:
                late = _wait(proc, limit)
            except BaseException:  # Ctrl-C or a kill of the runner: the worker (its own session) must not outlive it
                os.killpg(proc.pid, signal.SIGKILL)
                raise
            finally:
                proc.stdout.close()
        if late == "start-up":
            return CellResult("timeout", f"worker not ready after {STARTUP_LIMIT_S:g} s (starting Python and "
                                         f"importing torch); killed")
        if late == "cells":
            return CellResult("timeout", f"cell exceeded its {ctx.timeout_s:g} s time limit (worker killed)")
        if result_path.exists():
            outcome = json.loads(result_path.read_text())
            if isinstance(outcome, dict):
                raise EnvironmentFault.relayed(outcome[FAULT])
            return [CellResult(**r) for r in outcome]
        code = proc.returncode
        how = f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        tail = stderr_path.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        if code == -signal.SIGKILL:
            return CellResult("oom", f"worker {how} (likely the kernel's OOM killer) {tail[0]}".strip())
        return CellResult("error", f"worker died ({how}) before reporting: {tail[0]}".strip())


def _wait(proc: subprocess.Popen, limit: float | None) -> str | None:
    """Wait until the worker is ready (at most :data:`STARTUP_LIMIT_S`), then until it ends, at most ``limit`` seconds
    from when it was ready: a cell's time limit counts its measurement, not the worker's start-up
    (Python, torch and the harness imported, which takes seconds and far more on a loaded machine). Returns the phase
    in which the worker was killed for taking too long ("start-up" or "cells"), or None."""
    deadline, ready = time.monotonic() + STARTUP_LIMIT_S, False
    # unbuffered (bufsize=0): a line read is all that was read, so select sees whatever the worker writes next
    while not ready and select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
        line = proc.stdout.readline()
        if not line:  # the worker ended before it was ready
            break
        ready = line.decode(errors="replace").strip() == READY
    phase, timeout = ("cells", limit) if ready else ("start-up", max(0.0, deadline - time.monotonic()))
    try:  # not ready: it ended before it was (a crash at import), or the start-up limit has passed
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker and anything it started
        proc.wait()
        return phase
    return None


def _die_with_parent(runner_pid: int) -> None:
    """Ask for SIGKILL when the runner dies (Linux); if it already died before this call, stop now."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the runner's own handler still kills the worker on Ctrl-C
        pass
    if os.getppid() != runner_pid:
        sys.exit(1)


def main() -> None:
    """The worker: one job from the file its command line names, :data:`READY` on stdout once it can measure, its result
    to the job's result path (never half a file)."""
    job = json.loads(Path(sys.argv[1]).read_text())
    _die_with_parent(int(job["runner_pid"]))
    cache_dir = Path(job["cache_dir"]) if job.get("cache_dir") else None
    ctx = Context(Path(job["workdir"]), cache_dir, job.get("gemm_peak_gflops"),
                  calibration_ms=job.get("calibration_ms"))
    print(READY, flush=True)  # the runner starts the cells' clock now
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing reads the pipe any more
    try:
        results = execute_group([Cell.from_json(c) for c in job["cells"]], ctx)
    except EnvironmentFault as exc:  # the machine's, not the cells': the runner stops with it (nothing stored)
        atomic_write_text(job["result_path"], json.dumps({FAULT: str(exc)}))
        return
    atomic_write_text(job["result_path"], json.dumps([dataclasses.asdict(r) for r in results]))


if __name__ == "__main__":
    main()
