"""Accuracy cells: train and test one (attention, task, seed[, noise, variant]) with checkpoints; failures become
statuses.

A cell's optional study axes: ``noise``/``noise_on`` add U(-a, a) pixel noise to the splits named
(:func:`harness.data.noisy_task`, seeded by the data seed and the cell's seed, so each replicate sees its own
draw and a rerun the same one); a ``variant``'s config overrides are already in the cell's config; an
``incoherence`` setting in the cell measures μ-incoherence on the dev split after the last training step
(:mod:`harness.incoherence`).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from . import faults
from .data import TaskData, load_task, noisy_task
from .incoherence import measure_incoherence
from .measure import CellResult, classify_exception, time_limit
from .models import Classifier
from .suite import Cell
from .training import TrainConfig, train_and_evaluate

_LOADED: dict[str, TaskData] = {}


def task_data(data: dict[str, Any], cache_dir: Path | None) -> TaskData:
    """The task's splits for a cell's data settings; loaded (or generated) once per process."""
    key = json.dumps(data, sort_keys=True, default=str)
    if key not in _LOADED:
        _LOADED[key] = load_task(
            data["task"], data_dir=data["dir"], seq_len=data["seq_len"], seed=data["seed"],
            sizes=tuple(data["sizes"]), cache_dir=cache_dir, **data["gen"],
        )
    return _LOADED[key]


def cell_data(cell: Cell, cache_dir: Path | None) -> TaskData:
    """The cell's dataset: its task's splits, with the cell's pixel noise if it has any."""
    data = task_data(cell.fixed["data"], cache_dir)
    a = float(cell.params.get("noise", 0))
    if a == 0:
        return data
    # One noise stream per (data seed, replicate): replicates differ, a rerun is identical.
    seed = int(cell.fixed["data"]["seed"]) * 1_000_003 + int(cell.params["seed"])
    return noisy_task(data, a, str(cell.params.get("noise_on", "train+test")), seed)


def checkpoint_path(workdir: Path, cell: Cell) -> Path:
    return workdir / "checkpoints" / f"{cell.key}.pt"


def _incoherence(settings: dict[str, Any], batch_size: int, device: str,
                 model: Classifier, data: TaskData) -> dict[str, float]:
    return measure_incoherence(model, data.dev, settings["ranks"], batch_size=batch_size, device=device,
                               layer=settings["layer"], max_examples=settings["max_examples"])


def run_accuracy_cell(
    cell: Cell, *, workdir: Path, cache_dir: Path | None, timeout_s: float | None = None
) -> CellResult:
    """Train on the cell's task with its attention and seed, resuming from the cell's checkpoint if any."""
    faults.point("accuracy.cell", cell.label)
    if cell.skip_reason:
        return CellResult("unsupported", cell.skip_reason)
    train = TrainConfig(**cell.fixed["train"])
    settings = cell.fixed.get("incoherence")
    analyse = functools.partial(_incoherence, settings, train.batch_size, cell.device) if settings else None
    try:
        with time_limit(timeout_s):
            result = train_and_evaluate(
                cell.params["attention"], cell_data(cell, cache_dir), train, seed=cell.params["seed"],
                device=cell.device, attention_overrides=cell.config, checkpoint_path=checkpoint_path(workdir, cell),
                analyse=analyse,
            )
    except Exception as exc:  # a failed training run is a result, never the end of the sweep
        return classify_exception(exc)
    return CellResult("ok", "", result.metrics(), curve=result.curve)
