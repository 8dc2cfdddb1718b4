"""Run a suite's cells through an executor into the store, then write the reports.

Executors:
- in-process (default): fastest; a per-cell ``--timeout`` is enforced with SIGALRM between torch ops.
- ``--isolate``: one fresh ``python -m harness.run.worker`` per cell (:mod:`harness.run.worker`), so a crash, a hard
  hang or leaked memory stays inside that cell; the timeout kills the process. Peak-memory figures come from the
  allocator (profiler or CUDA stats), so they are the same either way.
- ``--executor ray``: one Ray task per cell, on this machine or an existing cluster (:mod:`harness.run.ray_executor`).

Whatever the executor, only this process writes the store, and every finished cell goes through
:class:`~harness.run.execute.Recorder`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ..core import faults
from ..core.cell import Cell, Context
from ..core.envinfo import collect_env
from ..core.errors import RunFailed, UserError, printable
from ..core.files import DATA_CACHE, directory_lock, refuse_links_outside, refuse_symlinks, remove_temporaries
from ..core.kind_table import is_timed
from ..core.store import Store
from ..core.suite import Suite, expand_patterns
from ..measure.group import listening
from ..measure.quiet import BUSY_CORES, other_load
from ..report.export import write_suite_reports
from . import ray_executor
from .execute import Recorder, RunSummary, execute_group, groups
from .progress import Console, make_bar, reasons_line
from .worker import WORKER_DIR, run_isolated_group


def suite_dir(out: str | Path, suite: Suite) -> Path:
    """Where a suite's store and reports live: ``<out>/<suite>/<profile>/``."""
    return Path(out) / suite.name / suite.profile


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
    quiet_limit_s: float | None = None,
    retry_failed: bool = False,
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
        quiet_limit_s: wait before each timed group until the machine is quiet, up to this long, then stop
            (``--require-quiet``); None = measure whatever the load (cells are flagged ``noisy``).
        retry_failed: measure again the cells whose latest result is a failure (:data:`RETRIED`), as ``fresh`` would
            but leaving the rest (``--retry-failed``).
    """
    if executor not in ("local", "ray"):
        raise UserError(f"executor {executor!r}: use local or ray")
    if executor == "ray" and isolate:
        raise UserError("--isolate is for the local executor; Ray already runs each cell in a worker process")
    started = time.perf_counter()
    every_cell = suite.expand(device)
    keep = set(expand_patterns(only)) if only else None
    cells = [c for c in every_cell if keep is None or c.params["attention"] in keep]
    directory = suite_dir(out, suite)
    keyed = dict(zip([c.key for c in cells], cells := _with_data(suite, cells), strict=True))
    every_cell = [keyed.get(c.key, c) for c in every_cell]
    refuse_symlinks(out, directory)
    refuse_links_outside(out, Path(out) / DATA_CACHE)
    with directory_lock(directory), Store(directory / "results.db", suite=suite.name, kind=suite.kind.name,
                                          source=suite.path.name) as store:
        _begin(store, directory, suite)
        done = set() if fresh else store.finished_keys() - (_failed(store, cells) if retry_failed else set())
        todo = [c for c in cells if c.key not in done]
        env = _run_env(suite, device, todo, "isolate" if isolate else "in-process", executor, address, cpus_per_task)
        run_id = store.start_run(suite.name, suite.profile, env, argv or [])
        if line := emulated_bf16(todo, env):
            print(printable(f"attnbench: warning: {line}"), file=sys.stderr, flush=True)
        summary = RunSummary(directory, len(cells), len(cells) - len(todo))
        ctx = Context(directory, Path(out) / DATA_CACHE, env.get("gemm_peak_gflops"), timeout_s,
                      env.get("calibration_ms"), fresh=fresh)
        _prepare(suite, cells, done, todo, ctx)
        batches = groups(todo, every_cell, suite.report.get("baseline"))
        summary.references = sum(map(len, batches)) - len(todo)
        console, skipped = _console(suite, batches, sys.stderr.isatty() if progress is None else progress,
                                    quiet_limit_s is not None)
        bar = console.bar
        record = Recorder(store, run_id, ctx, summary, console)
        try:
            if executor == "ray":
                ray_executor.run_groups(batches, ctx, record, address=address, cpus_per_task=cpus_per_task)
            else:
                _run_local(batches, ctx, record, isolate, quiet_limit_s)
        except BaseException as exc:  # the run's end is recorded however it ends
            store.finish_run(run_id, {**_run_summary(summary), "stopped_by": type(exc).__name__})
            exc.stored_cells = len(store.finished_keys() & {c.key for c in cells})  # for the resume hint
            raise
        finally:
            bar.close()
            console.close(announced=skipped)
        store.finish_run(run_id, _run_summary(summary))
        faults.point("runner.before_reports")
        # The reports cover every stored cell of the suite and profile, not just what this run's --only or --set
        # chose (as `attnbench report` writes them).
        summary.written = write_suite_reports(store, suite.name, suite.report_options())
    summary.wall_s = time.perf_counter() - started
    return summary


def _prepare(suite: Suite, cells: list[Cell], done: set[str], todo: list[Cell], ctx: Context) -> None:
    """Before the first cell: the clean-up a run killed between a cell's row and its clean-up left to do, and what
    the kind prepares once (its data)."""
    for cell in cells:
        if cell.key in done:
            suite.kind.finished(cell, ctx)
    if todo:
        suite.kind.prepare(todo, ctx)


def _console(suite: Suite, batches: list[list[Cell]], tty: bool, require_quiet: bool) -> tuple[Console, list[str]]:
    """The run's console (the bar on a terminal, with elapsed time and ETA; without one the bar is off and the
    console prints a line a minute), having said which cells do not run here; and their reasons."""
    total = sum(map(len, batches))
    console = Console(total, tty, make_bar(total, f"{suite.name}/{suite.profile}", tty), require_quiet=require_quiet)
    skipped = [c.skip_reason for cells in batches for c in cells if c.skip_reason]
    if line := reasons_line("not run here (the profile's rules, this device, the variants' limits)", skipped):
        console.write(line)
    return console, skipped


def _begin(store: Store, directory: Path, suite: Suite) -> None:
    """What a run does once it owns its directory: the suite's description, its temporary folder, the removal of what
    a killed run left behind (its workers' files, a report file whose writer was killed before its rename), a word on
    stale results."""
    if suite.description:  # every input checked and the directory ours: the run begins
        print(printable(f"{suite.name}: {suite.description}"), flush=True)
    _temporary_folder()
    shutil.rmtree(directory / WORKER_DIR, ignore_errors=True)
    remove_temporaries(directory)
    if stale := store.stale_cells():
        print(printable(f"attnbench: {store.path}: {stale} cell{'s' * (stale != 1)} stored by an earlier attnbench "
                        f"are stale (their keys did not cover code, data and settings); this run measures them again, "
                        f"and the tables show them only while nothing newer is stored"), file=sys.stderr, flush=True)


#: The statuses ``--retry-failed`` measures again: what the machine or a limit may have caused, unlike ``ok`` and
#: ``unsupported``, which another try would give again.
RETRIED = ("error", "oom", "nan", "timeout")


def _failed(store: Store, cells: list[Cell]) -> set[str]:
    """The keys of ``cells`` whose latest stored result has a status of :data:`RETRIED`."""
    df = store.dataframe([c.key for c in cells])
    return set() if df.empty else set(df.loc[df["status"].isin(RETRIED), "key"])


def _with_data(suite: Suite, cells: list[Cell]) -> list[Cell]:
    """The cells with the identity of the user's data they read (:attr:`~harness.core.suite.SuiteKind.data_identity`),
    once ``check_inputs`` has read it: bad input is refused here, before anything is written under ``--out``."""
    kind = suite.kind
    if kind.check_inputs is not None:
        kind.check_inputs(cells)
    if kind.data_identity is None:
        return cells
    return [dataclasses.replace(c, data=kind.data_identity(c)) for c in cells]


def _temporary_folder() -> None:
    """Create the temporary folder the CLI pointed TMPDIR at (under ``--out``), now that the run owns its directory,
    and make Python's tempfile use it; a folder that cannot be made leaves the system's (nothing fails for it)."""
    folder = os.environ.get("TMPDIR")
    if folder:
        with contextlib.suppress(OSError):
            os.makedirs(folder, exist_ok=True)
            tempfile.tempdir = None


def _run_summary(summary: RunSummary) -> dict[str, Any]:
    """What the store keeps of a finished run: statuses, cells flagged noisy, baselines timed again, the load."""
    load = summary.load
    return {"statuses": summary.statuses, "noisy": len(summary.noisy), "references": summary.references,
            "load_other_cores_max": max(load, default=None),
            "load_other_cores_mean": sum(load) / len(load) if load else None}


def emulated_bf16(cells: list[Cell], env: dict[str, Any]) -> str | None:
    """The warning, before anything runs, that the bfloat16 cells of a CPU run measure software emulation: a CPU
    without bfloat16 instructions (``cpu_bf16`` of the run's environment) makes torch convert every operation, which
    multiplies a bfloat16 layer's time many times over float32's; None where that does not apply."""
    bf16 = [c for c in cells if c.params.get("dtype") == "bfloat16" and str(c.device).startswith("cpu")
            and not c.skip_reason]
    if not bf16 or env.get("cpu_bf16") != "emulated":
        return None
    return (f"{len(bf16)} cells run in bfloat16 on a CPU without bfloat16 instructions ({env.get('cpu_model')}; torch "
            f"dispatches for {env.get('cpu_capability') or 'an unknown instruction set'}, and no avx512_bf16 or "
            f"amx_bf16): torch emulates them in software, many times slower than float32, so their times measure "
            f"the emulation, not the layer. Leave them out (--set dtype=float32) or time bfloat16 on a GPU or a CPU "
            f"that has it")


def _run_env(suite: Suite, device: str, todo: list[Cell], local_executor: str, executor: str, address: str | None,
             cpus_per_task: int | None) -> dict[str, Any]:
    """The environment block stored with the run: machine, executor, report options, the GEMM peak if needed."""
    env = collect_env(torch.device(device))
    env.update(suite=suite.name, profile=suite.profile, executor=local_executor)
    if executor == "ray":
        env.update(ray_executor.describe(address, cpus_per_task))
    env["report"] = suite.report_options()  # so `attnbench report` rewrites the same tables later
    if todo and suite.kind.run_env is not None:  # what the kind measures of the machine once (GEMM peak, ...)
        env.update(suite.kind.run_env(todo, torch.device(device)))
    return env


def _run_local(batches: list[list[Cell]], ctx: Context, record: Recorder, isolate: bool,
               quiet_limit_s: float | None) -> None:
    """Run the groups one after the other, in this process or (``isolate``) each in a fresh worker process."""
    with listening(record.in_group):  # the groups timed in this process say how far they have got
        for cells in batches:
            if quiet_limit_s is not None and any(is_timed(c) for c in cells):
                wait_for_quiet(quiet_limit_s)
            for cell in cells:
                record.starting(cell)
            if isolate and not all(c.skip_reason for c in cells):
                results = run_isolated_group(cells, ctx)
            else:
                results = execute_group(cells, ctx)
            for cell, result in zip(cells, results, strict=True):
                record(cell, result)
            record.group_done()


def wait_for_quiet(limit_s: float, poll_s: float = 1.0) -> None:
    """Return once other processes use at most :data:`~harness.measure.quiet.BUSY_CORES`; after ``limit_s`` seconds
    of a busy machine, stop the run (exit 1): its timings would not be trustworthy."""
    waited = 0.0
    while (load := other_load(poll_s)) is not None and load > BUSY_CORES:
        waited += poll_s
        if waited >= limit_s:
            raise RunFailed(f"--require-quiet: other processes still use {load:.2f} cores after {limit_s:g} s of "
                            "waiting; stop them or raise --quiet-timeout (the cells measured so far are stored)")
