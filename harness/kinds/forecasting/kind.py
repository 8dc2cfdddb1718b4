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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.cell import Cell
from ...core.errors import SuiteError
from ...core.store import Store
from ...core.suite import (
    Axis,
    RankedQuantity,
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
from ...models.checkpoints import drop_checkpoint
from ...report.claims import is_smoke
from ...report.format import shown_env, with_data
from .blocks import ForecastConfig
from .cells import check_inputs, data_identity, describe, prepare, run
from .data import DATASETS, REAL_DATA, DatasetSpec, Synthetic
from .training import ForecastTrain

TABLES = ("table2",)
MODEL_FIELDS = {f.name for f in dataclasses.fields(ForecastConfig)} - {"input_len", "horizon", "variables", "marks",
                                                                       "attention"}
TRAIN_FIELDS = {f.name for f in dataclasses.fields(ForecastTrain)}
DATASET_KEYS = {"input_len", "horizons", "generate"}
GENERATE_KEYS = {f.name for f in dataclasses.fields(Synthetic)}

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
    data_identity=data_identity, finished=drop_checkpoint, describe=describe, write_reports=write_reports,
    ranked=(RankedQuantity("test_mse", "forecast MSE", higher_is_better=False),),
    shown_axes=("dataset", "horizon", "seed"),
    outputs=lambda suite: ("results.csv", "env.json", "curves.csv", "table2.md", "table2.tex", "table2.csv",
                           "claims.md",
                           *(f"forecast_{d}.{ext}" for d in suite.axes["dataset"] for ext in ("png", "pdf"))),
    result_columns=lambda suite: ("key", "attention", "dataset", "horizon", "seed", "device", "status", "message",
                                  "test_mse", "test_mae", "best_val_mse", "best_step", "steps", "steps_per_s",
                                  "data_source"),
)
