"""One forecasting cell: read or generate its dataset, train and test the forecaster of its attention, resumably;
failures become statuses. This module and what it imports are the code behind a forecasting number (their sources are
in every cell's key, :mod:`harness.core.provenance`); the tables and figures (:mod:`.table2`) are not."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...core import datasource, faults
from ...core.cell import Cell, CellResult, Context, classify_exception, memory_cap, time_limit
from ...core.files import atomic_write_text
from ...models.checkpoints import checkpoint_path, clear_checkpoints
from .blocks import ForecastConfig
from .data import (
    DATASETS,
    SYNTHETIC_VERSION,
    Split,
    Synthetic,
    check_windows,
    load_dataset,
    read_series,
    split_series,
    synthetic_csv,
)
from .training import ForecastTrain, train_forecaster

#: Where each cell writes the window its forecast figure draws (beside the store).
EXAMPLE_DIR = "forecasts"

_LOADED: dict[str, dict[str, Split]] = {}


def splits_of(data: Mapping[str, Any], cache_dir: Path | None) -> dict[str, Split]:
    """The dataset's scaled splits (read, or generated into ``cache_dir``), once per process."""
    key = json.dumps(data, sort_keys=True, default=str)
    if key not in _LOADED:
        # one-step windows checked here; the cells' longest horizon by _load_each
        spec = dataclasses.replace(DATASETS[data["dataset"]], input_len=data["input_len"], horizons=(1,))
        if data["dir"] is not None:
            _LOADED[key] = load_dataset(spec, data["dir"])
        else:
            gen = Synthetic(**{**data["generate"], "periods": tuple(data["generate"].get("periods", (24, 168)))})
            path = synthetic_csv(gen, cache_dir if cache_dir is not None else Path(".data_cache"))
            # generated stand-ins are cut 70/10/20 whatever the real file's split (ETT's 12/4/4 months need 20
            # months of rows)
            _LOADED[key] = split_series(read_series(path, spec.freq), dataclasses.replace(spec, split="ratio"))
    return _LOADED[key]


_SOURCES: dict[str, str] = {}


def data_source(data: Mapping[str, Any]) -> str:
    """What a cell's numbers were measured on (:mod:`harness.core.datasource`): the user's CSV file and its sha256,
    or the generator and its settings; once per process."""
    key = json.dumps(data, sort_keys=True, default=str)
    if key not in _SOURCES:
        if data["dir"] is not None:
            root = Path(data["dir"])
            _SOURCES[key] = datasource.files(root, [root / DATASETS[data["dataset"]].file])
        else:
            _SOURCES[key] = datasource.generated(f"attnbench {data['dataset']} stand-in", SYNTHETIC_VERSION,
                                                 {**data["generate"], "split": "70/10/20"})
    return _SOURCES[key]


def _load_each(cells: list[Cell], cache_dir: Path | None) -> None:
    """Load every dataset the cells name and check that each of its splits holds a window of the longest horizon
    trained on it (a UserError, exit 2, naming the file or the generator)."""
    longest: dict[str, tuple[Mapping[str, Any], int]] = {}  # data key -> (the data, its longest horizon)
    for cell in cells:
        data, horizon = cell.fixed["data"], int(cell.params["horizon"])
        key = json.dumps(data, sort_keys=True, default=str)
        longest[key] = (data, max(longest.get(key, (data, 0))[1], horizon))
    for data, horizon in longest.values():
        source = (str(Path(data["dir"]) / DATASETS[data["dataset"]].file) if data["dir"] is not None
                  else f"the generated {data['dataset']} stand-in (datasets.{data['dataset']}.generate)")
        check_windows(splits_of(data, cache_dir), data["input_len"], horizon, source)


def prepare(cells: list[Cell], ctx: Context) -> None:
    """Read or generate every dataset before the first cell: a bad file is an exit-2 error up front. Checkpoints of
    these cells under other keys go (:func:`~harness.models.checkpoints.clear_checkpoints`)."""
    clear_checkpoints(cells, ctx)
    _load_each(cells, ctx.cache_dir)


def check_inputs(cells: list[Cell]) -> None:
    """Read every real dataset the cells name before anything is written under ``--out``."""
    _load_each([c for c in cells if c.fixed["data"]["dir"] is not None], None)


def data_identity(cell: Cell) -> str:
    """The SHA-256 of what the cell's real data is (its file's name and checksum), "" for a generated stand-in, whose
    identity is its generator settings (in the cell) and the generator's code (in the cell's code identity)."""
    data = cell.fixed["data"]
    return "" if data["dir"] is None else hashlib.sha256(data_source(data).encode()).hexdigest()


def run(cell: Cell, ctx: Context) -> CellResult:
    """Train and test the cell's forecaster, resuming from its checkpoint if any."""
    faults.point("forecasting.cell", cell.label)
    if cell.skip_reason:
        return CellResult("unsupported", cell.skip_reason)
    try:
        splits = splits_of(cell.fixed["data"], ctx.cache_dir)
        cfg = ForecastConfig(variables=splits["train"].values.shape[1], marks=splits["train"].marks.shape[1],
                             attention=cell.fixed["attention"], **cell.fixed["model"])
        with time_limit(ctx.timeout_s), memory_cap(cell.device):
            result = train_forecaster(cell.params["attention"], splits, cfg, ForecastTrain(**cell.fixed["train"]),
                                      seed=cell.params["seed"], device=cell.device,
                                      checkpoint_path=checkpoint_path(ctx.workdir, cell))
    except Exception as exc:  # a failed training run is a result, never the end of the sweep
        return classify_exception(exc)
    try:  # the figure's window; losing it must not cost the result
        atomic_write_text(ctx.workdir / EXAMPLE_DIR / f"{cell.key}.json", json.dumps(result.example))
    except OSError as exc:
        print(f"attnbench: warning: {cell.label}: forecast example not written ({exc})", file=sys.stderr)
    return CellResult("ok", "", {**result.metrics(), "data_source": data_source(cell.fixed["data"])},
                      curve=result.curve)


def describe(result: CellResult) -> str:
    if result.status != "ok":
        return f"{result.status} {result.message}".strip()
    m = result.metrics
    return (f"ok test MSE {m['test_mse']:.4f} MAE {m['test_mae']:.4f} (best val {m['best_val_mse']:.4f} at step "
            f"{m['best_step']}), {m['steps_per_s']:.3g} steps/s")


