"""Run a suite's cells through an executor into the store, then write the reports.

Executors:
- in-process (default): fastest; a per-cell ``--timeout`` is enforced with SIGALRM between torch ops.
- ``--isolate``: one fresh ``python -m harness.worker`` per cell, so a crash, a hard hang or leaked memory
  stays inside that cell; the timeout kills the process. Peak-memory figures come from the allocator
  (profiler or CUDA stats), so they are the same either way.
- ``--executor ray``: one Ray task per cell, on this machine or an existing cluster (``harness.ray_executor``).

Whatever the executor, only this process writes the store, and every finished cell goes through ``_Recorder``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from . import faults, report
from .accuracy import checkpoint_path, run_accuracy_cell, task_data
from .envinfo import collect_env
from .errors import UserError
from .flops import measure_gemm_peak_gflops
from .measure import CellResult, measure_cell
from .store import Store
from .suite import Cell, Suite, expand_patterns
from .timing import GLIBC_TUNABLES_TIMING


@dataclass(frozen=True)
class Context:
    """What a cell needs besides itself: where its checkpoints and cached data go, limits, the GEMM peak."""

    workdir: Path
    cache_dir: Path | None = None
    gemm_peak_gflops: float | None = None
    timeout_s: float | None = None


def execute_cell(cell: Cell, ctx: Context) -> CellResult:
    """Run one cell in this process with the executor of its kind."""
    if cell.kind == "accuracy":
        return run_accuracy_cell(cell, workdir=ctx.workdir, cache_dir=ctx.cache_dir, timeout_s=ctx.timeout_s)
    return measure_cell(cell, gemm_peak_gflops=ctx.gemm_peak_gflops, timeout_s=ctx.timeout_s)


@dataclass
class RunSummary:
    out_dir: Path
    total: int
    skipped_done: int
    statuses: dict[str, int] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)
    wall_s: float = 0.0


@dataclass
class _Recorder:
    """The one place a finished cell is recorded, whichever executor ran it.

    ``starting`` runs before a cell is measured or submitted, ``__call__`` once its result is in: the store row
    (one transaction), the accuracy checkpoint it no longer needs, the status count and the progress line.
    """

    store: Store
    run_id: int
    ctx: Context
    summary: RunSummary
    bar: Any  # tqdm
    tty: bool
    total: int
    done: int = 0

    def starting(self, cell: Cell) -> None:
        self.bar.set_postfix_str(cell.label)
        faults.point("runner.before_cell", cell.label)

    def __call__(self, cell: Cell, result: CellResult) -> None:
        faults.point("runner.before_put", cell.label)
        self.store.put(self.run_id, cell, result.status, result.message, result.metrics, result.curve)
        faults.point("runner.after_put", cell.label)
        if cell.kind == "accuracy":
            checkpoint_path(self.ctx.workdir, cell).unlink(missing_ok=True)  # the row is stored: no resume needed
        self.summary.statuses[result.status] = self.summary.statuses.get(result.status, 0) + 1
        self.done += 1
        self.bar.update()
        if not self.tty:
            print(f"[{self.done}/{self.total}] {cell.label}: {_describe(result)}", file=sys.stderr, flush=True)


def suite_dir(out: str | Path, suite: Suite) -> Path:
    """Where a suite's store and reports live: ``<out>/<suite>/<profile>/``."""
    return Path(out) / suite.name / suite.profile


def run_isolated(
    cell: Cell,
    *,
    gemm_peak_gflops: float | None,
    timeout_s: float | None,
    workdir: Path | None = None,
    cache_dir: Path | None = None,
) -> CellResult:
    """Measure ``cell`` in a fresh Python process; its death or hang becomes the cell's status.

    The time limit is enforced here (the process is killed), not inside the worker.
    """
    with tempfile.TemporaryDirectory(prefix="attnbench-") as tmp:
        result_path = Path(tmp) / "result.json"
        job = {
            "cell": cell.to_json(),
            "gemm_peak_gflops": gemm_peak_gflops,
            "workdir": str(workdir or tmp),
            "cache_dir": None if cache_dir is None else str(cache_dir),
            "result_path": str(result_path),
        }
        env = {**os.environ}
        if cell.device.startswith("cpu"):
            env["GLIBC_TUNABLES"] = GLIBC_TUNABLES_TIMING  # read by glibc at process start only
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.worker"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=env, text=True, start_new_session=True,
        )
        try:
            _, stderr = proc.communicate(json.dumps(job), timeout=timeout_s or None)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and anything it started
            proc.communicate()
            return CellResult("timeout", f"cell exceeded its {timeout_s:g} s time limit (worker killed)")
        if result_path.exists():
            return CellResult(**json.loads(result_path.read_text()))
        code = proc.returncode
        how = f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        tail = (stderr or "").strip().splitlines()[-1:] or [""]
        if code == -signal.SIGKILL:
            return CellResult("oom", f"worker {how} (likely the kernel's OOM killer) {tail[0]}".strip())
        return CellResult("error", f"worker died ({how}) before reporting: {tail[0]}".strip())


def run_suite(
    suite: Suite,
    *,
    out: str | Path = "results",
    device: str = "cpu",
    fresh: bool = False,
    isolate: bool = False,
    timeout_s: float | None = None,
    only: list[str] | None = None,
    argv: list[str] | None = None,
    progress: bool | None = None,
    executor: str = "local",
    address: str | None = None,
    cpus_per_task: int | None = None,
) -> RunSummary:
    """Expand, skip finished cells, measure the rest (one store transaction each), write reports.

    Args:
        suite: a validated suite (profile applied).
        out: output root; results go to ``<out>/<suite>/<profile>/``.
        device: "cpu", "cuda" or "cuda:N".
        fresh: redo cells that already have a result.
        isolate: one subprocess per cell (local executor only).
        timeout_s: per-cell time limit (None = no limit).
        only: fnmatch patterns restricting the attention axis.
        argv: the command line, stored with the run.
        progress: show a progress bar (None = when stderr is a terminal; else one line per cell).
        executor: "local" (this process, or subprocesses with ``isolate``) or "ray" (one Ray task per cell).
        address: Ray cluster address (None = start Ray embedded on this machine); ray only.
        cpus_per_task: CPUs each Ray task reserves on CPU (None = ``torch.get_num_threads()``); ray only.
    """
    if executor not in ("local", "ray"):
        raise UserError(f"executor {executor!r}: use local or ray")
    if executor == "ray" and isolate:
        raise UserError("--isolate is for the local executor; Ray already runs each cell in a worker process")
    started = time.perf_counter()
    every_cell = suite.expand(device)
    cells = every_cell
    if only:
        keep = set(expand_patterns(only))
        cells = [c for c in cells if c.params["attention"] in keep]
    directory = suite_dir(out, suite)
    with Store(directory / "results.db") as store:
        done = set() if fresh else store.finished_keys()
        todo = [c for c in cells if c.key not in done]
        env = collect_env(torch.device(device))
        env.update(suite=suite.name, profile=suite.profile, executor="isolate" if isolate else "in-process")
        if executor == "ray":
            from . import ray_executor  # imports ray only here: it is an optional extra

            env.update(ray_executor.describe(address, cpus_per_task))
        env["report"] = suite.report_options()  # so `attnbench report` rewrites the same tables later
        needs_peak = any("flops" in c.metrics and "time" in c.metrics for c in todo)
        if needs_peak:
            env["gemm_peak_gflops"] = measure_gemm_peak_gflops(torch.device(device))
        run_id = store.start_run(suite.name, suite.profile, env, argv or [])
        summary = RunSummary(directory, len(cells), len(cells) - len(todo))
        tty = sys.stderr.isatty() if progress is None else progress
        ctx = Context(directory, Path(out) / ".data_cache", env.get("gemm_peak_gflops"), timeout_s)
        if suite.kind == "accuracy" and todo:
            _prepare_data(todo, ctx)
        bar = tqdm(total=len(todo), desc=f"{suite.name}/{suite.profile}", unit="cell", disable=not tty,
                   dynamic_ncols=True)
        record = _Recorder(store, run_id, ctx, summary, bar, tty, len(todo))
        if executor == "ray":
            ray_executor.run_cells(todo, ctx, record, address=address, cpus_per_task=cpus_per_task)
        else:
            for cell in todo:
                record.starting(cell)
                if isolate and not cell.skip_reason:
                    result = run_isolated(cell, gemm_peak_gflops=ctx.gemm_peak_gflops, timeout_s=timeout_s,
                                          workdir=ctx.workdir, cache_dir=ctx.cache_dir)
                else:
                    result = execute_cell(cell, ctx)
                record(cell, result)
        bar.close()
        faults.point("runner.before_reports")
        # The reports cover the whole suite as stored, not just what --only ran this time.
        summary.written = write_suite_reports(store, suite, keys=[c.key for c in every_cell])
    summary.wall_s = time.perf_counter() - started
    return summary


def _prepare_data(cells: list[Cell], ctx: Context) -> None:
    """Load or generate every dataset the cells need before the first one runs.

    A missing or malformed data file is then an exit-2 error up front, not a failed cell an hour in, and
    generated datasets land in the cache once rather than in each isolated worker.
    """
    seen = set()
    for cell in cells:
        key = json.dumps(cell.fixed["data"], sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            task_data(cell.fixed["data"], ctx.cache_dir)


def _describe(result: CellResult) -> str:
    if result.status != "ok":
        return f"{result.status} {result.message}".strip()
    m = result.metrics
    if "test_acc" in m:
        return f"ok test acc {m['test_acc']:.4f} (best dev {m['best_dev_acc']:.4f}), {m['steps_per_s']:.3g} steps/s"
    parts = []
    if "time_ms_median" in m:
        parts.append(f"{m['time_ms_median']:.3g} ms (IQR {m['time_ms_iqr']:.2g})")
    if "peak_mem_bytes" in m:
        parts.append(f"{m['peak_mem_bytes'] / 2**20:.3g} MiB")
    return "ok " + ", ".join(parts)


def write_suite_reports(store: Store, suite: Suite | None = None, *, keys: list[str] | None = None) -> list[Path]:
    """Export the store (optionally only ``keys``) as CSV/Markdown/LaTeX tables and plots beside it."""
    df = store.dataframe(keys)
    if df.empty:
        return []
    env: dict[str, Any] = store.latest_env()
    opts = suite.report_options() if suite is not None else env.get("report", {})
    name = suite.name if suite is not None else str(df["suite"].iloc[0])
    if (df["kind"] == "accuracy").all():
        from .report_accuracy import write_accuracy_reports

        return write_accuracy_reports(df, store.curves(keys), store.path.parent, env=env, suite=name,
                                      baseline=opts.get("baseline", "vanilla"), options=opts)
    return report.write_reports(
        df, store.path.parent, env=env, suite=name, baseline=opts.get("baseline", "vanilla"),
        slope_min_seq_len=int(opts.get("slope_min_seq_len", 1024)),
    )
