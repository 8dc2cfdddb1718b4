"""The ``forecasting`` suite kind (the paper's Table 2): each cell trains and tests one attention's forecaster
(:mod:`harness.kinds.forecasting.models`: S3Attention's own, or the baseline built around that attention) on one
dataset and horizon with one seed, resumably; reported as Table 2 with forecast figures and ``claims.md``
(:mod:`harness.kinds.forecasting.table2`).

Keys of a forecasting suite file, besides the common ones:
- ``data``: ``dir`` (the directory holding the distributed CSV files; ``--data-dir`` sets it) — when null, every
  dataset is generated from its ``generate`` settings (offline, cached).
- ``model``: :class:`~harness.kinds.forecasting.blocks.ForecastConfig` sizes for every model; ``model_config``: per
  attention pattern, overrides of them (e.g. S3Attention's d_model 32 from the released script).
- ``train``: :class:`~harness.kinds.forecasting.training.ForecastTrain` settings.
- ``datasets``: per dataset of :data:`~harness.kinds.forecasting.data.DATASETS`: ``input_len`` and ``horizons`` (the
paper's
  unless given) and ``generate`` (a :class:`~harness.kinds.forecasting.data.Synthetic` spec: kind, rows, variables,
  periods).

The ``horizon`` axis lists horizons; a dataset is trained at those of its own ``horizons`` (ILI's 24–60, the others'
96–720), other combinations are not cells.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core import datasource, faults
from ...core.cell import Cell, CellResult, Context, classify_exception, memory_cap, time_limit
from ...core.errors import SuiteError
from ...core.files import atomic_write_text
from ...core.store import Store
from ...core.suite import (
    Axis,
    Suite,
    SuiteKind,
    apply_patterns,
    attention_config,
    axis_label,
    capability_reason,
    check_fits,
    check_keys,
    identity,
    is_nonneg_int,
    is_positive_int,
    mapping,
    resolve_or_fail,
)
from ...models.checkpoints import checkpoint_path, drop_checkpoint
from ...report.claims import is_smoke
from ...report.format import shown_env, with_data
from .blocks import ForecastConfig
from .data import (
    DATASETS,
    REAL_DATA,
    SYNTHETIC_VERSION,
    DatasetSpec,
    Split,
    Synthetic,
    check_windows,
    load_dataset,
    read_series,
    split_series,
    synthetic_csv,
)
from .training import ForecastTrain, train_forecaster

TABLES = ("table2",)
MODEL_FIELDS = {f.name for f in dataclasses.fields(ForecastConfig)} - {"input_len", "horizon", "variables", "marks",
                                                                       "attention"}
TRAIN_FIELDS = {f.name for f in dataclasses.fields(ForecastTrain)}
DATASET_KEYS = {"input_len", "horizons", "generate"}
GENERATE_KEYS = {f.name for f in dataclasses.fields(Synthetic)}
EXAMPLE_DIR = "forecasts"

AXES = {
    "dataset": Axis(lambda v: v in DATASETS, f"one of {', '.join(DATASETS)}"),
    "horizon": Axis(is_positive_int, "positive integers (steps forecast)"),
    "seed": Axis(is_nonneg_int, "non-negative integers"),
}


@dataclass(frozen=True)
class ForecastingSettings:
    """A forecasting suite's own settings: data, model sizes and per-attention overrides, training and the datasets."""

    data: dict[str, Any]
    model: dict[str, Any]
    model_config: dict[str, dict[str, Any]]
    train: dict[str, Any]
    datasets: dict[str, dict[str, Any]]


def parse(path: Path, doc: dict[str, Any]) -> ForecastingSettings:
    """The forecasting fields of a suite, validated."""
    data = {"dir": None, **mapping(path, "data", doc.get("data"))}
    check_keys(path, "data", data, {"dir"})
    if data["dir"] is not None and not Path(str(data["dir"])).is_dir():
        raise SuiteError(path, "data.dir", f"{data['dir']} is not a directory; give the directory of the CSV files")
    model = _model(path, "model", doc.get("model"), {})
    model_config = mapping(path, "model_config", doc.get("model_config"))
    for pattern, overrides in model_config.items():
        model_config[pattern] = _model(path, f"model_config.{pattern}", overrides, model)
    train = mapping(path, "train", doc.get("train"))
    check_keys(path, "train", train, TRAIN_FIELDS)
    try:
        ForecastTrain(**train)
    except ValueError as exc:
        raise SuiteError(path, "train", str(exc)) from None
    return ForecastingSettings(data=data, model=model, model_config=model_config, train=train,
            datasets=_datasets(path, doc.get("datasets")))


def _model(path: Path, where: str, value: Any, base: dict[str, Any]) -> dict[str, Any]:
    """Model settings (over ``base``), each checked as ForecastConfig checks it."""
    model = mapping(path, where, value)
    check_keys(path, where, model, MODEL_FIELDS)
    try:
        ForecastConfig(input_len=10_000, horizon=1, variables=1, **{**base, **model})
    except ValueError as exc:
        field_name = str(exc).split(" ", 1)[0]
        raise SuiteError(path, f"{where}.{field_name}" if field_name in MODEL_FIELDS else where, str(exc)) from None
    return model


def _datasets(path: Path, value: Any) -> dict[str, dict[str, Any]]:
    out = {}
    for name, ddoc in mapping(path, "datasets", value).items():
        where = f"datasets.{name}"
        if name not in DATASETS:
            raise SuiteError(path, where, f"unknown dataset; valid: {', '.join(DATASETS)}")
        ddoc = mapping(path, where, ddoc)
        check_keys(path, where, ddoc, DATASET_KEYS)
        if "input_len" in ddoc and not is_positive_int(ddoc["input_len"]):
            raise SuiteError(path, f"{where}.input_len", f"must be a positive integer, got {ddoc['input_len']!r}")
        horizons = ddoc.get("horizons", [])
        if not isinstance(horizons, list) or not all(is_positive_int(h) for h in horizons):
            raise SuiteError(path, f"{where}.horizons", f"must be a list of positive integers, got {horizons!r}")
        gen = mapping(path, f"{where}.generate", ddoc.get("generate"))
        check_keys(path, f"{where}.generate", gen, GENERATE_KEYS)
        if gen:
            try:
                spec = Synthetic(**{**gen, "periods": tuple(gen.get("periods", (24, 168)))})
                if not (is_positive_int(spec.rows) and is_positive_int(spec.variables)):
                    raise ValueError(f"rows and variables must be positive integers, got {spec.rows!r}, "
                                     f"{spec.variables!r}")
                dataclasses.replace(spec, rows=min(spec.rows, 64)).frame()  # its settings, checked on a few rows
            except (TypeError, ValueError) as exc:
                raise SuiteError(path, f"{where}.generate", str(exc)) from None
            # float64 values, the CSV's text (about 12 bytes a number) and the frame read back, time features too
            check_fits(path, f"{where}.generate.rows", spec.rows * (spec.variables + 8) * 8 * 4,
                       f"{spec.rows:,} rows of {spec.variables:,} variables")
        out[name] = ddoc
    return out


def dataset_spec(suite: Suite, name: str) -> DatasetSpec:
    """The dataset's spec with the suite's input length and horizons."""
    ddoc, spec = suite.settings.datasets.get(name, {}), DATASETS[name]
    return dataclasses.replace(spec, input_len=int(ddoc.get("input_len", spec.input_len)),
                               horizons=tuple(ddoc.get("horizons", spec.horizons)))


def validate(suite: Suite) -> None:
    """Every dataset has a horizon on the axis and data (a directory or a generator); every cell's attention config
    resolves."""
    trained = {}  # dataset -> its horizons on the axis (the first one stands for all in the config check)
    for dataset in suite.axes["dataset"]:
        horizons = dataset_spec(suite, dataset).horizons
        trained[dataset] = [h for h in horizons if h in suite.axes["horizon"]]
        if not trained[dataset]:
            raise SuiteError(suite.path, "axes.horizon", f"none of {dataset}'s horizons {list(horizons)} is on the "
                             "axis, so it would have no cells; add one or drop the dataset")
    for dataset in suite.axes["dataset"]:
        if suite.settings.data["dir"] is None and not suite.settings.datasets.get(dataset, {}).get("generate"):
            raise SuiteError(suite.path, f"datasets.{dataset}.generate",
                             "no data: give --data-dir (the CSV files' directory) or a generator for this dataset")
    for name in suite.attentions():
        for dataset in suite.axes["dataset"]:
            params = {"attention": name, "dataset": dataset, "horizon": trained[dataset][0], "seed": 0}
            resolve_or_fail(suite.path, "model_config", f"{name} on {dataset}",
                            lambda params=params: make_cell(suite, params, "cpu"))


def make_cell(suite: Suite, params: dict[str, Any], device: str) -> Cell | None:
    spec = dataset_spec(suite, params["dataset"])
    if params["horizon"] not in spec.horizons:
        return None  # not one of this dataset's horizons (ILI's are 24-60, the others' 96-720)
    name = params["attention"]
    settings = suite.settings
    model = {**settings.model, **apply_patterns({}, settings.model_config, name), "input_len": spec.input_len,
             "horizon": params["horizon"]}
    cfg = ForecastConfig(variables=1, **model)
    overrides = suite.config_for(name)
    generate = None if settings.data["dir"] is not None else settings.datasets.get(spec.name, {}).get("generate")
    # what the data is, not which horizons the suite trains on it: a cell's key does not change with the axis
    data = {"dataset": spec.name, "dir": suite.settings.data["dir"], "generate": generate, "input_len": spec.input_len}
    reason = next(filter(None, (capability_reason(name, n, padded=False) for n in (cfg.input_len, cfg.decoder_len))),
                  None)
    return Cell(
        suite=suite.name, params=params, metrics=("test_mse", "test_mae"), timing={}, device=device,
        fixed={"model": model, "train": dataclasses.asdict(ForecastTrain(**suite.settings.train)), "data": data,
               "attention": overrides},
        config=attention_config(name, overrides, dim=cfg.d_model, heads=cfg.heads, seq_len=cfg.input_len),
        kind=suite.kind.name, label=axis_label(params),
        skip_reason=suite.skip_reason(params) or reason, **identity(suite, name),
    )


# ---------------------------------------------------------------------------------------------------------------------
# Running cells

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
    """Read or generate every dataset before the first cell: a bad file is an exit-2 error up front."""
    _load_each(cells, ctx.cache_dir)


def check_inputs(cells: list[Cell]) -> None:
    """Read every real dataset the cells name before anything is written under ``--out``."""
    _load_each([c for c in cells if c.fixed["data"]["dir"] is not None], None)


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


def write_reports(store: Store, name: str, options: Mapping[str, Any], keys: list[str] | None) -> list:
    df = store.dataframe(keys)
    # here, not at the top: the reports load matplotlib, which a cell's worker process never needs
    from .table2 import write_forecast_reports

    runs = store.runs(set(df["run_id"]))
    return write_forecast_reports(df, store.curves(keys), store.path.parent,
                                  env=with_data(shown_env(runs), df, REAL_DATA), suite=name,
                                  options={**options, "smoke": is_smoke(runs["profile"])})


KIND = SuiteKind(
    name="forecasting", axes=AXES, optional_axes={},
    keys=frozenset({"data", "model", "model_config", "train", "datasets"}), tables=TABLES, reads_data=True,
    parse=parse, validate=validate, make_cell=make_cell, run=run, prepare=prepare, check_inputs=check_inputs,
    finished=drop_checkpoint, describe=describe, write_reports=write_reports,
    code=("harness.core.cell", "harness.models.checkpoints", "harness.kinds.forecasting.kind",
          "harness.kinds.forecasting.training", "harness.kinds.forecasting.data", "harness.kinds.forecasting.blocks",
          "harness.kinds.forecasting.models", "harness.kinds.forecasting.embed", "harness.kinds.forecasting.fourier",
          "harness.kinds.forecasting.s3_forecaster", "harness.kinds.forecasting.fedformer",
          "harness.kinds.forecasting.autoformer", "harness.kinds.forecasting.informer",
          "harness.kinds.forecasting.logtrans", "harness.kinds.forecasting.reformer"),
)
