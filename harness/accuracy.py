"""Accuracy cells: train and test one (attention, task, seed) with checkpoints; failures become statuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import faults
from .data import TaskData, load_task
from .measure import CellResult, classify_exception, time_limit
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


def checkpoint_path(workdir: Path, cell: Cell) -> Path:
    return workdir / "checkpoints" / f"{cell.key}.pt"


def run_accuracy_cell(
    cell: Cell, *, workdir: Path, cache_dir: Path | None, timeout_s: float | None = None
) -> CellResult:
    """Train on the cell's task with its attention and seed, resuming from the cell's checkpoint if any."""
    faults.point("accuracy.cell", cell.label)
    if cell.skip_reason:
        return CellResult("unsupported", cell.skip_reason)
    try:
        with time_limit(timeout_s):
            data = task_data(cell.fixed["data"], cache_dir)
            result = train_and_evaluate(
                cell.params["attention"], data, TrainConfig(**cell.fixed["train"]), seed=cell.params["seed"],
                device=cell.device, attention_overrides=cell.config, checkpoint_path=checkpoint_path(workdir, cell),
            )
    except Exception as exc:  # a failed training run is a result, never the end of the sweep
        return classify_exception(exc)
    return CellResult("ok", "", result.metrics(), curve=result.curve)
