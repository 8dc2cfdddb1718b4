"""The ``accuracy`` suite kind: each cell trains and tests the encoder classifier on one LRA task with one attention
and seed (:mod:`harness.kinds.accuracy.cells`); reported as the paper's Table 1 and learning curves, and the study
tables 5, 6, 7 and S7 (:mod:`harness.kinds.accuracy.table1`, :mod:`harness.kinds.accuracy.studies`).

Keys of an accuracy suite file, besides the common ones: ``data`` (generated split sizes and seed, or a real data
directory), ``train`` (:class:`~harness.kinds.accuracy.training.TrainConfig` fields), ``tasks`` (per task: sequence
length, training settings, attention config, generator parameters), ``variants`` (named config overrides, or the
one-at-a-time grid of Table 6), ``incoherence`` (Table S7) and ``probes`` (keep each trained model's first attention
layer and its inputs, for the approximation suite). See :mod:`harness.run.suitefile` for the file format.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.cell import Cell
from ...core.errors import SuiteError, UserError, first_line, has_control
from ...core.store import Store
from ...core.suite import (
    TEXT,
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
    validate_attention_config,
)
from ...models.checkpoints import drop_checkpoint
from ...models.probe import PROBE_DEFAULTS
from ...report.claims import is_smoke
from ...report.format import shown_env, with_data
from .cells import data_identity, describe, prepare_data, read_user_data, run_accuracy_cell
from .data import generate_task, resolve_gen_params
from .noise import NOISE_ON, cell_noise, noise_problem
from .options import DATA_OPTIONS, check_options, task_options
from .summary import axis_text, only_noisy, with_axis_defaults
from .tasks import TASK_NAMES, TASK_TABLE
from .training import TrainConfig, TrainConfigError

TABLES = ("table1", "table5", "table6", "table7", "tableS7")
INCOHERENCE_DEFAULTS: dict[str, Any] = {"ranks": [16, 32], "layer": 0, "max_examples": 0}
DATA_DEFAULTS: dict[str, Any] = {"dir": None, "seed": 0, "sizes": [2000, 200, 200],
                                 **{name: option.default for name, option in DATA_OPTIONS.items()}}
TASK_KEYS = {"seq_len", "train", "config", "attention_config", "gen", "sizes"}
TRAIN_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}

AXES = {
    "task": Axis(lambda v: v in TASK_NAMES, f"one of {', '.join(TASK_NAMES)}"),
    "seed": Axis(is_nonneg_int, "non-negative integers"),
}
OPTIONAL_AXES = {
    "noise": Axis(lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < float("inf"),
                  "non-negative numbers (amplitude a of U(-a, a) pixel noise)"),
    "noise_on": Axis(lambda v: v in NOISE_ON, f"one of {', '.join(NOISE_ON)}"),
    "variant": Axis(lambda v: isinstance(v, str) and v != "", "labels defined under `variants`"),
}


# ---------------------------------------------------------------------------------------------------------------------
# Parsing the accuracy keys


@dataclass(frozen=True)
class AccuracySettings:
    """An accuracy suite's own settings: data, training, per-task settings, the named variants, incoherence and
    probes."""

    data: dict[str, Any]
    train: dict[str, Any]
    tasks: dict[str, dict[str, Any]]
    variants: dict[str, dict[str, Any]]
    incoherence: dict[str, Any] | None
    probes: dict[str, Any] | None

    def report_options(self) -> dict[str, Any]:
        """What the study tables need besides the cells: the named variants (stored with each run)."""
        return {"variants": self.variants}


def parse(path: Path, doc: dict[str, Any]) -> AccuracySettings:
    """The accuracy fields of a suite, validated; every variant becomes the ``variant`` axis unless one is given."""
    variants = _variants(path, doc.get("variants"))
    if variants and "variant" not in mapping(path, "axes", doc.get("axes")):
        doc.setdefault("axes", {})["variant"] = list(variants)  # every variant unless the axis picks some
    data, tasks = _data(path, doc.get("data")), _tasks(path, doc.get("tasks"))
    axis = (doc.get("axes") or {}).get("task") if isinstance(doc.get("axes"), dict) else None
    for task in [t for t in axis if t in TASK_NAMES] if isinstance(axis, list) else TASK_NAMES:
        tdoc = tasks.get(task, {})
        sizes, seq_len = tdoc.get("sizes", data["sizes"]), tdoc.get("seq_len") or TASK_TABLE[task].seq_len
        # int64 ids, two documents a row for Retrieval, and the generators' intermediates about as large again
        check_fits(path, f"tasks.{task}.sizes" if "sizes" in tdoc else "data.sizes", sum(sizes) * seq_len * 8 * 2 * 2,
                   f"{sum(sizes):,} {task} examples of {seq_len:,} tokens")
        if data["dir"] is None:
            _check_generator(path, task, tdoc, seq_len, sum(sizes), data["seed"])
    return AccuracySettings(data=data, train=_train(path, "train", doc.get("train")), tasks=tasks, variants=variants,
                            incoherence=_incoherence(path, doc.get("incoherence")),
                            probes=_probes(path, doc.get("probes")))


#: The examples per split the generator makes when a suite loads, so that every check of its parameters runs before
#: anything is written (the data itself is generated once the run's store exists); three take milliseconds.
DRY_RUN_SIZES = (1, 1, 1)


def _check_generator(path: Path, task: str, tdoc: dict[str, Any], seq_len: int, n: int, seed: int) -> None:
    """A task's generator parameters (``tasks.T.gen`` over those ``seq_len`` implies), checked by a dry run of the
    generator and the task's budget for ``n`` examples where it has one (ListOps' expressions): one line naming the
    file and the key."""
    where = f"tasks.{task}" + next((f".{k}" for k in ("gen", "seq_len") if k in tdoc), "")
    try:
        params = resolve_gen_params(task, seq_len, tdoc.get("gen") or {})
        if (budget := TASK_TABLE[task].budget) is not None:
            budget(n, **params)
        generate_task(task, seq_len=seq_len, seed=seed, sizes=DRY_RUN_SIZES, params=params)
    except UserError as exc:
        raise SuiteError(path, where, str(exc)) from None
    except (TypeError, ValueError) as exc:  # a text where a number belongs, ...
        raise SuiteError(path, where, f"{task}: a generator parameter of the wrong type ({first_line(exc)}); give "
                                      f"numbers as numbers (1.0e-2, not 1e-2, which YAML reads as text)") from None


def _data(path: Path, value: Any) -> dict[str, Any]:
    data = {**DATA_DEFAULTS, **mapping(path, "data", value)}
    check_keys(path, "data", data, DATA_DEFAULTS)
    _check_sizes(path, "data.sizes", data["sizes"])
    if not is_nonneg_int(data["seed"]):
        raise SuiteError(path, "data.seed", f"must be a non-negative integer, got {data['seed']!r}")
    if data["dir"] is not None and not Path(str(data["dir"])).is_dir():
        raise SuiteError(path, "data.dir", f"{data['dir']} is not a directory; give the LRA data directory")
    if bad := check_options(data):
        raise SuiteError(path, f"data.{bad[0]}", bad[1])
    return data


def _check_sizes(path: Path, where: str, sizes: Any) -> None:
    if not (isinstance(sizes, list) and len(sizes) == 3 and all(is_positive_int(s) for s in sizes)):
        raise SuiteError(path, where, f"must be three positive integers [train, dev, test], got {sizes!r}")


def _train(path: Path, where: str, value: Any) -> dict[str, Any]:
    """The training settings as given (a task's are merged over the suite's); each checked as TrainConfig does."""
    train = mapping(path, where, value)
    check_keys(path, where, train, TRAIN_FIELDS)
    try:
        TrainConfig(**train)
    except TrainConfigError as exc:
        raise SuiteError(path, f"{where}.{exc.field}", str(exc)) from None
    return train


def _tasks(path: Path, value: Any) -> dict[str, dict[str, Any]]:
    tasks = mapping(path, "tasks", value)
    for task, tdoc in tasks.items():
        where = f"tasks.{task}"
        if task not in TASK_NAMES:
            raise SuiteError(path, where, f"unknown task; valid tasks: {', '.join(TASK_NAMES)}")
        tdoc = mapping(path, where, tdoc)
        check_keys(path, where, tdoc, TASK_KEYS)
        if "seq_len" in tdoc and not is_positive_int(tdoc["seq_len"]):
            raise SuiteError(path, f"{where}.seq_len", f"must be a positive integer, got {tdoc['seq_len']!r}")
        _check_sizes(path, f"{where}.sizes", tdoc.get("sizes", [1, 1, 1]))
        _train(path, f"{where}.train", tdoc.get("train"))
        mapping(path, f"{where}.config", tdoc.get("config"))
        mapping(path, f"{where}.gen", tdoc.get("gen"))
        validate_attention_config(path, tdoc.get("attention_config"), f"{where}.attention_config")
        tasks[task] = tdoc
    return tasks


def _variants(path: Path, value: Any) -> dict[str, dict[str, Any]]:
    """``variants`` as label -> overrides (the one-at-a-time form expanded)."""
    doc = mapping(path, "variants", value)
    if "one_at_a_time" in doc:
        if len(doc) != 1:
            raise SuiteError(path, "variants", "one_at_a_time cannot be mixed with named variants; use one form")
        grid = mapping(path, "variants.one_at_a_time", doc["one_at_a_time"])
        check_keys(path, "variants.one_at_a_time", grid, {"base", "vary"})
        return one_at_a_time(mapping(path, "variants.one_at_a_time.base", grid.get("base")),
                             _vary(path, grid.get("vary")))
    for label, overrides in doc.items():
        if not isinstance(label, str) or not label or "," in label or has_control(label):  # a label names table rows
            raise SuiteError(path, f"variants.{label}", "a variant label is a non-empty line of text without commas")
        doc[label] = mapping(path, f"variants.{label}", overrides)
    return doc


def _vary(path: Path, value: Any) -> dict[str, list[Any]]:
    vary = mapping(path, "variants.one_at_a_time.vary", value)
    if not vary:
        raise SuiteError(path, "variants.one_at_a_time.vary", "give at least one field: [values]")
    for name, values in vary.items():
        if not isinstance(values, list) or not values or len(set(map(str, values))) != len(values):
            raise SuiteError(path, f"variants.one_at_a_time.vary.{name}", "must be a list of distinct values")
    return vary


def one_at_a_time(base: dict[str, Any], vary: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    """Variants that change one field of ``base`` at a time: ``{"base": base, "r=1": {**base, "r": 1}, ...}``.

    A value equal to the base's own is the ``base`` variant (trained once, shown in every sub-table).
    """
    out = {"base": dict(base)}
    for name, values in vary.items():
        for v in values:
            if base.get(name) != v:
                out[f"{name}={v}"] = {**base, name: v}
    return out


def _probes(path: Path, value: Any) -> dict[str, Any] | None:
    """``probes: {examples: K}``: keep each trained model's first attention layer and its inputs on K dev examples
    (:mod:`harness.models.probe`), for the approximation suite."""
    if value is None:
        return None
    doc = {**PROBE_DEFAULTS, **mapping(path, "probes", value)}
    check_keys(path, "probes", doc, PROBE_DEFAULTS)
    if not is_positive_int(doc["examples"]):
        raise SuiteError(path, "probes.examples", f"must be a positive integer, got {doc['examples']!r}")
    return doc


def _incoherence(path: Path, value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    doc = {**INCOHERENCE_DEFAULTS, **mapping(path, "incoherence", value)}
    check_keys(path, "incoherence", doc, INCOHERENCE_DEFAULTS)
    ranks = doc["ranks"] if isinstance(doc["ranks"], list) else [doc["ranks"]]
    if not ranks or not all(is_positive_int(r) for r in ranks) or len(set(ranks)) != len(ranks):
        raise SuiteError(path, "incoherence.ranks", f"must be distinct positive integers, got {doc['ranks']!r}")
    for key in ("layer", "max_examples"):
        if not is_nonneg_int(doc[key]):
            raise SuiteError(path, f"incoherence.{key}", f"must be a non-negative integer, got {doc[key]!r}")
    return {**doc, "ranks": ranks}


# ---------------------------------------------------------------------------------------------------------------------
# Checks of a built suite, and its cells


def validate(suite: Suite) -> None:
    """Resolve every (attention, task, variant) once, so a bad setting fails before the first training step; check
    the variants, the noise and the tables against the axes."""
    path = suite.path
    unknown = [v for v in suite.axes.get("variant", []) if v not in suite.settings.variants]
    if unknown:
        defined = ", ".join(suite.settings.variants) or "none"
        raise SuiteError(path, "axes.variant", f"unknown variant {unknown[0]!r}; defined under `variants`: {defined}")
    if any(a > 0 for a in suite.axes.get("noise", [])) and (problem := noise_problem(suite.axes["task"])):
        raise SuiteError(path, "axes.noise", problem)
    _check_tables(suite)
    for name in suite.attentions():
        for task, variant in itertools.product(suite.axes["task"], suite.axes.get("variant", [None])):
            params = {"attention": name, "task": task, "seed": 0, **({} if variant is None else {"variant": variant})}
            where = f"variants.{variant}" if variant is not None else f"tasks.{task}"
            resolve_or_fail(path, where, f"{name} on {task}", lambda params=params: make_cell(suite, params, "cpu"))


def _check_tables(suite: Suite) -> None:
    """Each study table has the axes or keys it reads."""
    has_base = suite.report["baseline_variant"] in suite.settings.variants
    needs = {"table5": ("noise" in suite.axes, "a `noise` axis"),
             "table6": (has_base, "variants with the baseline_variant"),
             "table7": (has_base, "variants with the baseline_variant"),
             "tableS7": (suite.settings.incoherence is not None, "an `incoherence` key")}
    for table in suite.report["tables"] or []:
        ok, what = needs.get(table, (True, ""))
        if not ok:
            raise SuiteError(suite.path, "report.tables", f"{table} needs {what}; add it or drop {table}")


def task_settings(suite: Suite, task: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(resolved TrainConfig fields, data settings incl. the sequence length) of one task of an accuracy suite."""
    tdoc = suite.settings.tasks.get(task, {})
    train = dataclasses.asdict(TrainConfig(**{**suite.settings.train, **tdoc.get("train", {})}))
    seq_len = int(tdoc.get("seq_len") or TASK_TABLE[task].seq_len)
    given = suite.settings.data
    # Only the options that apply to this task (and to its data, generated or real) are part of its cells' keys.
    options = task_options(TASK_TABLE[task], given["dir"] is not None, given)
    data = {**{k: v for k, v in given.items() if k not in DATA_OPTIONS}, "task": task, "seq_len": seq_len,
            "gen": tdoc.get("gen", {}), "sizes": list(tdoc.get("sizes", given["sizes"])),
            **({"options": options} if options else {})}
    return train, data


def attention_overrides(suite: Suite, name: str, task: str, variant: str | None = None) -> dict[str, Any]:
    """Config overrides of one attention on one task: suite-wide, then the task's own, then the variant's."""
    tdoc = suite.settings.tasks.get(task, {})
    out = apply_patterns({**suite.config_for(name), **tdoc.get("config", {})}, tdoc.get("attention_config", {}), name)
    return {**out, **(suite.settings.variants[variant] if variant is not None else {})}


def make_cell(suite: Suite, params: dict[str, Any], device: str) -> Cell:
    train, data = task_settings(suite, params["task"])
    if "noise_on" in params:
        params = {**params, "noise_on": cell_noise(params)[1]}  # a clean cell is one cell under both modes
    name = params["attention"]
    overrides = attention_overrides(suite, name, params["task"], params.get("variant"))
    settings = suite.settings
    fixed = {"train": train, "data": data,
             **({} if settings.incoherence is None else {"incoherence": settings.incoherence}),
             **({} if settings.probes is None else {"probes": settings.probes})}
    return Cell(
        suite=suite.name, params=params, fixed=fixed, metrics=("accuracy",), timing={}, device=device,
        config=attention_config(name, overrides, dim=train["dim"], heads=train["heads"], seq_len=data["seq_len"]),
        kind=suite.kind.name, label=axis_label(params), **identity(suite, name),
        # LRA sequences are right-padded to the task's length and masked
        skip_reason=suite.skip_reason(params) or capability_reason(name, data["seq_len"], padded=True),
    )


def write_reports(store: Store, name: str, options: Mapping[str, Any], keys: list[str] | None) -> list:
    df = store.dataframe(keys)
    # here, not at the top: the reports load matplotlib, which a cell's worker process never needs
    from .table1 import write_accuracy_reports

    runs = store.runs(set(df["run_id"]))
    return write_accuracy_reports(df, store.curves(keys), store.path.parent, env=with_data(shown_env(runs), df, "LRA"),
                                  suite=name, options={**options, "smoke": is_smoke(runs["profile"])})


def outputs(suite: Suite) -> tuple[str, ...]:
    """What an accuracy run writes: the raw results and curves, each of its tables in three formats and a
    learning-curve figure per task."""
    tables = suite.report["tables"] or [TABLES[0]]
    return ("results.csv", "env.json", "curves.csv", "claims.md",
            *(f"{t}.{ext}" for t in tables for ext in ("md", "tex", "csv")),
            *(f"curves_{task}.{ext}" for task in suite.axes["task"] for ext in ("png", "pdf")))


def result_columns(suite: Suite) -> tuple[str, ...]:
    """The results.csv columns of every ok cell (accuracies in percent), the study's axes and measurements too."""
    study = [axis for axis in ("noise", "noise_on", "variant") if axis in suite.axes]
    ranks = suite.settings.incoherence["ranks"] if suite.settings.incoherence else []
    measured = [f"mu_{m}_r{r}_{s}" for r in ranks for m in ("x", "smooth") for s in ("mean", "std")]
    return ("key", "attention", "task", "seed", "device", "status", "message", "test_acc_pct", "best_dev_acc_pct",
            "steps_per_s", "best_step", "steps", "data_source", *study, *measured)


KIND = SuiteKind(
    name="accuracy", axes=AXES, optional_axes=OPTIONAL_AXES,
    keys=frozenset({"data", "train", "tasks", "variants", "incoherence", "probes"}), tables=TABLES, reads_data=True,
    parse=parse, validate=validate, make_cell=make_cell, run=run_accuracy_cell, prepare=prepare_data,
    check_inputs=read_user_data, data_identity=data_identity, finished=drop_checkpoint, describe=describe,
    write_reports=write_reports,
    value_order={"task": TASK_NAMES}, normalise=with_axis_defaults, value_text=axis_text, rank_subset=only_noisy,
    report_keys={"baseline_variant": ("base", TEXT)},
    ranked=(RankedQuantity("test_acc", "accuracy", higher_is_better=True),),
    shown_axes=("task", "seed", "noise", "noise_on", "variant"),
    outputs=outputs, result_columns=result_columns,
)
