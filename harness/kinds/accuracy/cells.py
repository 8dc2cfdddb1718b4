"""One accuracy cell: train and test one (attention, task, seed[, noise, variant]) with checkpoints; failures become
statuses.

A cell's optional study axes: ``noise``/``noise_on`` add U(-a, a) pixel noise to the splits named
(:func:`harness.kinds.accuracy.noise.noisy_task`, seeded by the data seed and the cell's seed, so each replicate sees
its own draw and a rerun the same one); a ``variant``'s config overrides are already in the cell's config; an
``incoherence`` setting in the cell measures μ-incoherence on the dev split after the last training step
(:mod:`harness.kinds.accuracy.incoherence`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from ...core import faults
from ...core.cell import Cell, CellResult, Context, classify_exception, memory_cap, time_limit
from ...core.errors import first_line
from ...models.checkpoints import checkpoint_path, clear_checkpoints
from ...models.classifier import Classifier
from ...models.probe import probe_path, save_probe
from ...models.tasks import TaskData
from .data import load_task
from .incoherence import measure_incoherence
from .noise import cell_noise, noisy_task
from .training import TrainConfig, train_and_evaluate

_LOADED: dict[str, TaskData] = {}


def task_data(data: dict[str, Any], cache_dir: Path | None) -> TaskData:
    """The task's splits for a cell's data settings; loaded (or generated) once per process."""
    key = json.dumps(data, sort_keys=True, default=str)
    if key not in _LOADED:
        _LOADED[key] = load_task(
            data["task"], data_dir=data["dir"], seq_len=data["seq_len"], seed=data["seed"],
            sizes=tuple(data["sizes"]), cache_dir=cache_dir, options=data.get("options"), **data["gen"],
        )
    return _LOADED[key]


def cell_data(cell: Cell, cache_dir: Path | None) -> TaskData:
    """The cell's dataset: its task's splits, with the cell's pixel noise if it has any."""
    a, noise_on = cell_noise(cell.params)
    # One noise stream per (data seed, replicate): replicates differ, a rerun is identical.
    seed = int(cell.fixed["data"]["seed"]) * 1_000_003 + int(cell.params["seed"])
    return noisy_task(task_data(cell.fixed["data"], cache_dir), a, noise_on, seed)


def _load_each(cells: list[Cell], cache_dir: Path | None) -> None:
    for data in {json.dumps(c.fixed["data"], sort_keys=True, default=str): c.fixed["data"] for c in cells}.values():
        task_data(data, cache_dir)


def prepare_data(cells: list[Cell], ctx: Context) -> None:
    """Load or generate every dataset the cells need before the first one runs.

    A missing or malformed data file is then an exit-2 error up front, not a failed cell an hour in, and
    generated datasets land in the cache once rather than in each isolated worker. Checkpoints of these cells under
    other keys go (:func:`~harness.models.checkpoints.clear_checkpoints`).
    """
    clear_checkpoints(cells, ctx)
    _load_each(cells, ctx.cache_dir)


def read_user_data(cells: list[Cell]) -> None:
    """Read every real dataset the cells name (``data.dir``) before anything is written: a malformed file is bad
    input, refused before the run's store exists. The splits stay loaded for :func:`prepare_data` and the cells
    (real data is never cached on disk, so nothing is written here)."""
    _load_each([c for c in cells if c.fixed["data"]["dir"] is not None], None)


def data_identity(cell: Cell) -> str:
    """The SHA-256 of what the cell's real data is (its files' names and checksums, as its ``data_source`` says), ""
    for a generated stand-in, whose identity is its generator settings (in the cell) and the generator's code (in the
    cell's code identity). Reads nothing again: :func:`read_user_data` loaded it."""
    data = cell.fixed["data"]
    return "" if data["dir"] is None else hashlib.sha256(task_data(data, None).source.encode()).hexdigest()


def _incoherence(settings: dict[str, Any], batch_size: int, device: str,
                 model: Classifier, data: TaskData) -> dict[str, float]:
    return measure_incoherence(model, data.dev, settings["ranks"], batch_size=batch_size, device=device,
                               layer=settings["layer"], max_examples=settings["max_examples"])


def run_accuracy_cell(cell: Cell, ctx: Context) -> CellResult:
    """Train on the cell's task with its attention and seed, resuming from the cell's checkpoint if any."""
    faults.point("accuracy.cell", cell.label)
    if cell.skip_reason:
        return CellResult("unsupported", cell.skip_reason)
    train = TrainConfig(**cell.fixed["train"])
    settings = cell.fixed.get("incoherence")
    incoherence = functools.partial(_incoherence, settings, train.batch_size, cell.device) if settings else None
    probes = cell.fixed.get("probes")

    def analyse(model: Classifier, data: TaskData) -> dict[str, float]:
        """After the last step: the incoherence study's figures, and the attention probe (a file, no metric)."""
        if probes:
            try:
                save_probe(probe_path(ctx.workdir, cell.key), model, data, examples=int(probes["examples"]),
                           params=cell.params)
            except (OSError, RuntimeError) as exc:  # a missing probe must not cost the trained result
                print(f"attnbench: warning: {cell.label}: probe not written ({first_line(exc)})", file=sys.stderr)
        return incoherence(model, data) if incoherence is not None else {}

    try:
        # the speed cells' address-space cap: an allocation that cannot fit is this cell's `oom`, not the kernel's
        # OOM killer ending the sweep
        with time_limit(ctx.timeout_s), memory_cap(cell.device):
            result = train_and_evaluate(
                cell.params["attention"], cell_data(cell, ctx.cache_dir), train, seed=cell.params["seed"],
                device=cell.device, attention_overrides=cell.config,
                checkpoint_path=checkpoint_path(ctx.workdir, cell), analyse=analyse,
            )
    except Exception as exc:  # a failed training run is a result, never the end of the sweep
        return classify_exception(exc)
    # what the numbers were measured on, in every row of results.csv and in every table's footer
    source = task_data(cell.fixed["data"], ctx.cache_dir).source
    return CellResult("ok", "", {**result.metrics(), "data_source": source}, curve=result.curve)


def describe(result: CellResult) -> str:
    """The progress line of a finished training cell."""
    if result.status != "ok":
        return f"{result.status} {result.message}".strip()
    m = result.metrics
    # in percent, as every table shows accuracy (the store keeps fractions)
    return (f"ok test acc {100 * m['test_acc']:.2f}% (best dev {100 * m['best_dev_acc']:.2f}%), "
            f"{m['steps_per_s']:.3g} steps/s")
