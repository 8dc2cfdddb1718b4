"""Suites as data: load a YAML file, validate it completely before anything runs, expand it into cells.

Two kinds of suite: ``speed`` (the default; each cell times and measures one layer or training step) and
``accuracy`` (each cell trains and tests an encoder on one task with one seed; see the end of this docstring).

A speed suite file::

    name: speed
    description: time, peak memory and FLOPs of each variant against sequence length
    axes:                       # every combination is one cell
      attention: [vanilla, vanilla_sdpa, "s3attention*"]   # names or fnmatch patterns
      seq_len: [256, 1024]
      batch_size: [4]
      heads: [2]
      dim: [64]
      mode: [fwd, fwd+bwd]      # fwd | fwd+bwd | train_step
      dtype: [float32]          # float32 | bfloat16 | float16
    config: {dropout: 0.1}      # config overrides for every attention (validated per attention)
    attention_config:           # overrides for the attentions matching a pattern (applied after `config`)
      "s3attention*": {r: 8}
    fixed: {layers: 2}          # task settings (train_step encoder depth, MLP width, vocab, classes, seed)
    metrics: [time, memory, flops]
    timing: {min_run_time_s: 1.0, min_repeats: 5, warmup: 2}
    skip:                       # cells recorded as `unsupported` without running
      - {when: {attention: "vanilla*", seq_len: {gt: 8192}}, reason: "n^2 memory exceeds 24 GiB"}
    report: {baseline: vanilla, slope_min_seq_len: 1024}
    profiles:                   # each profile overrides top-level keys; axes, config, fixed, timing and report
                                # are merged key by key
      smoke: {axes: {seq_len: [64, 128]}, timing: {min_run_time_s: 0.01, min_repeats: 2, warmup: 1}}
      quick: {}
      paper: {...}

An accuracy suite file::

    name: accuracy
    kind: accuracy
    axes: {attention: [vanilla, s3attention], task: [listops, text, retrieval, image, pathfinder], seed: [0, 1]}
    data: {dir: null, seed: 0, sizes: [2000, 200, 200]}   # dir null = offline generators; --data-dir overrides
    train: {steps: 300, batch_size: 32, lr: 1.0e-4, eval_every: 50, checkpoint_every: 50}   # TrainConfig fields
    tasks:                      # per task: sequence length, training settings, attention config, generator params
      listops: {seq_len: 2000, train: {lr: 1.0e-4}, config: {dropout: 0.0}, gen: {max_depth: 10}}
    profiles: {smoke: {...}, quick: {...}, paper: {...}}

Optional axes and keys of accuracy suites (the paper's studies):

- ``noise: [0, 2, 4, 8]`` and ``noise_on: [train+test, test]``: U(-a, a) pixel noise (Table 5; see
  :func:`harness.data.add_pixel_noise`). A clean cell (a = 0) is the same whatever ``noise_on`` says, so it is
  stored once, as ``noise_on: train+test``, and both modes' tables read it.
- ``variants``: named config overrides applied last (after ``config``, ``attention_config`` and the task's), and a
  ``variant`` axis choosing among them (default: all, in file order). Either a mapping ``label: {field: value}``
  or the one-at-a-time grid of Table 6::

      variants:
        one_at_a_time:
          base: {r: 8, s1: 8, s2: 8}
          vary: {r: [1, 8, 16, 32, 64], s1: [8, 32, 64, 128, 256], s2: [1, 4, 8, 16, 32]}

  which expands to ``base`` and one variant per other value, labelled ``r=1``, ``s1=32``, ... (13 models; the base
  value of each parameter is the ``base`` model itself).
- ``incoherence: {ranks: [16, 32], layer: 0, max_examples: 0}``: after training, measure μ-incoherence before and
  after the Fourier convolution on the dev split (Table S7; :mod:`harness.incoherence`).
- ``report.tables``: which of table1, table5, table6, table7, tableS7 to write (default: table1);
  ``report.baseline_variant``: the variant the ablation and sweep tables compare against (default ``base``).
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import hashlib
import itertools
import json
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import attentions
from attentions import RegistryError

from .data import LRA_SEQ_LEN, NOISE_ON, PIXEL_TASKS, TASKS
from .errors import SuiteError
from .training import TrainConfig

MODES = ("fwd", "fwd+bwd", "train_step")
DTYPES = ("float32", "bfloat16", "float16")
METRICS = ("time", "memory", "flops")
PROFILES_REQUIRED = ("smoke", "quick", "paper")

KINDS = ("speed", "accuracy")
TOP_KEYS = {
    "name", "description", "kind", "axes", "config", "attention_config", "fixed", "metrics", "timing", "skip",
    "report", "data", "train", "tasks", "variants", "incoherence", "profiles",
}
PROFILE_KEYS = TOP_KEYS - {"name", "profiles"}
TIMING_DEFAULTS: dict[str, Any] = {"min_run_time_s": 1.0, "min_repeats": 5, "warmup": 2}
FIXED_DEFAULTS: dict[str, Any] = {"layers": 2, "mlp_dim": 128, "vocab_size": 256, "num_classes": 2, "seed": 0}
REPORT_DEFAULTS: dict[str, Any] = {"baseline": "vanilla", "slope_min_seq_len": 1024, "tables": None,
                                   "baseline_variant": "base"}
#: The tables each kind of suite can write (``report.tables``), and the default.
REPORT_TABLES: dict[str, tuple[str, ...]] = {"speed": ("table4",),
                                             "accuracy": ("table1", "table5", "table6", "table7", "tableS7")}
INCOHERENCE_DEFAULTS: dict[str, Any] = {"ranks": [16, 32], "layer": 0, "max_examples": 0}
DATA_DEFAULTS: dict[str, Any] = {"dir": None, "seed": 0, "sizes": [2000, 200, 200]}
TASK_KEYS = {"seq_len", "train", "config", "attention_config", "gen", "sizes"}
TRAIN_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


# axis name -> (check of one value, what a valid value looks like)
AXES: dict[str, tuple[Any, str]] = {
    "attention": (lambda v: isinstance(v, str) and v != "", "registered attention names or fnmatch patterns"),
    "seq_len": (_positive_int, "positive integers"),
    "batch_size": (_positive_int, "positive integers"),
    "heads": (_positive_int, "positive integers"),
    "dim": (_positive_int, "positive integers"),
    "mode": (lambda v: v in MODES, f"one of {', '.join(MODES)}"),
    "dtype": (lambda v: v in DTYPES, f"one of {', '.join(DTYPES)}"),
    "task": (lambda v: v in TASKS, f"one of {', '.join(TASKS)}"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "non-negative integers"),
    "noise": (lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < float("inf"),
              "non-negative numbers (amplitude a of U(-a, a) pixel noise)"),
    "noise_on": (lambda v: v in NOISE_ON, f"one of {', '.join(NOISE_ON)}"),
    "variant": (lambda v: isinstance(v, str) and v != "", "labels defined under `variants`"),
}
# The axes each kind of suite must declare.
KIND_AXES: dict[str, tuple[str, ...]] = {
    "speed": ("attention", "seq_len", "batch_size", "heads", "dim", "mode", "dtype"),
    "accuracy": ("attention", "task", "seed"),
}
#: Axes a kind of suite may add (the paper's studies).
OPTIONAL_AXES: dict[str, tuple[str, ...]] = {"speed": (), "accuracy": ("noise", "noise_on", "variant")}


@dataclass(frozen=True)
class Cell:
    """One measurement: every input that determines the result, and its stable key."""

    suite: str
    params: dict[str, Any]  # axis values, e.g. {"attention": "vanilla", "seq_len": 1024, ...}
    config: dict[str, Any]  # the attention's fully resolved config (dataclass fields)
    fixed: dict[str, Any]
    metrics: tuple[str, ...]
    timing: dict[str, Any]
    device: str
    skip_reason: str | None = None
    kind: str = "speed"
    key: str = field(init=False)

    def __post_init__(self) -> None:
        payload = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        payload.pop("skip_reason")  # a skip rule decides whether to run a cell, not what it measures
        blob = json.dumps(payload, sort_keys=True, default=str)
        object.__setattr__(self, "key", hashlib.sha256(blob.encode()).hexdigest()[:20])

    @property
    def label(self) -> str:
        p = self.params
        if self.kind == "accuracy":
            return " ".join(f"{k}={v}" if k != "attention" else str(v) for k, v in p.items())
        return f"{p['attention']} n={p['seq_len']} b={p['batch_size']} {p['mode']} {p['dtype']}"

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cell:
        data = dict(data)
        data["metrics"] = tuple(data["metrics"])
        return cls(**data)


@dataclass
class Suite:
    """A validated suite with one profile applied."""

    name: str
    path: Path
    profile: str
    description: str
    kind: str
    axes: dict[str, list[Any]]
    config: dict[str, Any]
    attention_config: dict[str, dict[str, Any]]
    fixed: dict[str, Any]
    metrics: tuple[str, ...]
    timing: dict[str, Any]
    skip: list[dict[str, Any]]
    report: dict[str, Any]
    data: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    incoherence: dict[str, Any] | None = None

    def report_options(self) -> dict[str, Any]:
        """What the reports need to know besides the cells (stored with each run for ``attnbench report``)."""
        tables = self.report["tables"] or [REPORT_TABLES[self.kind][0]]
        return {**self.report, "tables": tables, "variants": self.variants}

    def config_for(self, name: str) -> dict[str, Any]:
        """Config overrides of one attention: ``config``, then every matching ``attention_config`` pattern."""
        out = dict(self.config)
        for pattern, overrides in self.attention_config.items():
            if fnmatch.fnmatchcase(name, pattern):
                out.update(overrides)
        return out

    def attentions(self) -> list[str]:
        """The attention axis with patterns expanded, in the order given, without repeats."""
        return expand_patterns(self.axes["attention"])

    def expand(self, device: str) -> list[Cell]:
        """Every cell of the suite (the cartesian product of the axes), skip rules applied."""
        names = list(self.axes)
        values = [self.attentions() if n == "attention" else self.axes[n] for n in names]
        cells: dict[str, Cell] = {}  # by key: a clean cell under both noise_on modes is one cell
        for combo in itertools.product(*values):
            params = dict(zip(names, combo, strict=True))
            if self.kind == "accuracy":
                cell = self._accuracy_cell(params, device)
                cells.setdefault(cell.key, cell)
                continue
            cfg = attentions.make_config(
                params["attention"],
                **{**self.config_for(params["attention"]), "dim": params["dim"], "heads": params["heads"],
                   "max_seq_len": params["seq_len"]},
            )
            cell = Cell(
                suite=self.name,
                params=params,
                config=dataclasses.asdict(cfg),
                fixed=self.fixed,
                metrics=self.metrics,
                timing=self.timing,
                device=device,
                skip_reason=self._skip_reason(params),
            )
            cells.setdefault(cell.key, cell)
        return list(cells.values())

    def task_settings(self, task: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """(sequence length, resolved TrainConfig fields, data settings) of one task of an accuracy suite."""
        tdoc = self.tasks.get(task, {})
        train = dataclasses.asdict(TrainConfig(**{**self.train, **tdoc.get("train", {})}))
        seq_len = int(tdoc.get("seq_len") or LRA_SEQ_LEN[task])
        data = {**self.data, "task": task, "seq_len": seq_len, "gen": tdoc.get("gen", {}),
                "sizes": list(tdoc.get("sizes", self.data["sizes"]))}
        return seq_len, train, data

    def attention_overrides(self, name: str, task: str, variant: str | None = None) -> dict[str, Any]:
        """Config overrides of one attention on one task: suite-wide, then the task's own, then the variant's."""
        tdoc = self.tasks.get(task, {})
        out = {**self.config_for(name), **tdoc.get("config", {})}
        for pattern, overrides in tdoc.get("attention_config", {}).items():
            if fnmatch.fnmatchcase(name, pattern):
                out.update(overrides)
        return {**out, **(self.variants[variant] if variant is not None else {})}

    def _accuracy_cell(self, params: dict[str, Any], device: str) -> Cell:
        seq_len, train, data = self.task_settings(params["task"])
        if params.get("noise", None) == 0 and "noise_on" in params:
            params = {**params, "noise_on": NOISE_ON[0]}  # clean data is the same under either mode
        cfg = attentions.make_config(
            params["attention"],
            **{**self.attention_overrides(params["attention"], params["task"], params.get("variant")),
               "dim": train["dim"], "heads": train["heads"], "max_seq_len": seq_len},
        )
        fixed = {"train": train, "data": data}
        if self.incoherence is not None:
            fixed["incoherence"] = self.incoherence
        return Cell(suite=self.name, params=params, config=dataclasses.asdict(cfg), fixed=fixed,
                    metrics=("accuracy",), timing={}, device=device, skip_reason=self._skip_reason(params),
                    kind="accuracy")

    def _skip_reason(self, params: dict[str, Any]) -> str | None:
        for rule in self.skip:
            if all(_matches(params[k], cond) for k, cond in rule["when"].items()):
                return f"skipped by suite rule: {rule['reason']}"
        return None


def expand_patterns(items: Iterable[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        for name in attentions.list_attentions(item) if any(c in item for c in "*?[") else [item]:
            if name not in out:
                out.append(name)
    return out


_COMPARE = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}


def _matches(value: Any, cond: Any) -> bool:
    if isinstance(cond, dict):
        return all(_COMPARE[op](value, bound) for op, bound in cond.items())
    if isinstance(cond, list):
        return any(_matches(value, c) for c in cond)
    if isinstance(value, str) and isinstance(cond, str):
        return fnmatch.fnmatchcase(value, cond)
    return value == cond


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (never constructs Python objects) that refuses a key given twice in one mapping.

    Plain PyYAML keeps the last of duplicate keys silently, so ``axes: {seq_len: [1024], seq_len: [2048]}`` would
    sweep one of them without a word.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (each key once per mapping)", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_suite(
    path: str | Path,
    profile: str = "quick",
    overrides: dict[str, list[Any]] | None = None,
    data_dir: str | Path | None = None,
) -> Suite:
    """Read, validate and resolve a suite file for one profile; every problem is a SuiteError (exit 2).

    Args:
        path: the YAML file.
        profile: name of a profile in the file.
        overrides: axis -> values from the command line (``--set seq_len=1024,2048``); replace the profile's.
        data_dir: real data directory for an accuracy suite (``--data-dir``); replaces ``data.dir``.
    """
    path = Path(path)
    if not path.is_file():
        raise SuiteError(path, "", "no such suite file; give a path such as suites/speed.yaml")
    try:
        # Safe loading only: a suite file must never construct Python objects.
        doc = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        fix = ("suite files are plain YAML: remove the tag" if "constructor for the tag" in problem
               else "fix the syntax")
        raise SuiteError(path, where, f"not valid YAML ({problem}); {fix}") from None
    if not isinstance(doc, dict):
        raise SuiteError(path, "", f"the document must be a mapping of keys, got {type(doc).__name__}")
    _check_keys(path, "", doc, TOP_KEYS)
    name = doc.get("name", path.stem)
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise SuiteError(path, "name", f"{name!r} must be letters, digits, '-' or '_' (it names the output folder)")
    profiles = doc.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise SuiteError(path, "profiles", "must be a mapping of profile name -> overrides")
    missing = [p for p in PROFILES_REQUIRED if p not in profiles]
    if missing:
        raise SuiteError(
            path, "profiles", f"missing profile(s) {', '.join(missing)}; every suite needs smoke, quick, paper"
        )
    for pname, pdoc in profiles.items():
        if not isinstance(pdoc, dict | type(None)):
            raise SuiteError(path, f"profiles.{pname}", "must be a mapping (or empty)")
        _check_keys(path, f"profiles.{pname}", pdoc or {}, PROFILE_KEYS)
    if profile not in profiles:
        raise SuiteError(path, "profiles", f"unknown profile {profile!r}; choose one of {', '.join(profiles)}")

    merged = _merge(doc, profiles[profile] or {})
    kind = merged.get("kind", "speed")
    if kind not in KINDS:
        raise SuiteError(path, "kind", f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    variants = _validate_variants(path, merged.get("variants"), kind)
    if variants and "variant" not in _mapping(path, "axes", merged.get("axes")):
        merged.setdefault("axes", {})["variant"] = list(variants)  # every variant unless the axis picks some
    if overrides:
        merged["axes"] = {**_mapping(path, "axes", merged.get("axes")), **overrides}
    if data_dir is not None:
        if kind != "accuracy":
            raise SuiteError("--data-dir", str(data_dir), f"only accuracy suites read data; {path} is a {kind} suite")
        merged["data"] = {**_mapping(path, "data", merged.get("data")), "dir": str(Path(data_dir).resolve())}
    suite = Suite(
        name=name,
        path=path,
        profile=profile,
        description=str(doc.get("description", "")),
        kind=kind,
        axes=_validate_axes(path, merged.get("axes"), kind),
        config=_mapping(path, "config", merged.get("config")),
        attention_config=_validate_attention_config(path, merged.get("attention_config")),
        fixed={**FIXED_DEFAULTS, **_mapping(path, "fixed", merged.get("fixed"))},
        metrics=_validate_metrics(path, merged.get("metrics", list(METRICS))),
        timing=_validate_numbers(path, "timing", merged.get("timing"), TIMING_DEFAULTS),
        skip=_validate_skip(path, merged.get("skip"), kind),
        report={**REPORT_DEFAULTS, **_mapping(path, "report", merged.get("report"))},
        data={**DATA_DEFAULTS, **_mapping(path, "data", merged.get("data"))},
        train=_mapping(path, "train", merged.get("train")),
        tasks=_validate_tasks(path, merged.get("tasks")),
        variants=variants,
        incoherence=_validate_incoherence(path, merged.get("incoherence"), kind),
    )
    _check_keys(path, "report", suite.report, set(REPORT_DEFAULTS))
    _check_keys(path, "fixed", suite.fixed, set(FIXED_DEFAULTS))
    _check_keys(path, "data", suite.data, set(DATA_DEFAULTS))
    _check_train(path, "train", suite.train)
    _validate_report(path, suite)
    if kind == "accuracy":
        _validate_accuracy(path, suite)
    else:
        _validate_attention_configs(path, suite)
    return suite


def _merge(base: dict[str, Any], prof: dict[str, Any]) -> dict[str, Any]:
    """A profile over the top level: mappings merge key by key (recursively), anything else is replaced."""
    out = copy.deepcopy({k: v for k, v in base.items() if k != "profiles"})
    for k, v in prof.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _check_keys(path: Path, where: str, doc: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(doc) - allowed)
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise SuiteError(path, key, f"unknown key; valid keys here: {', '.join(sorted(allowed))}")


def _mapping(path: Path, key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SuiteError(path, key, f"must be a mapping, got {type(value).__name__}")
    return dict(value)


def _validate_axes(path: Path, axes: Any, kind: str) -> dict[str, list[Any]]:
    axes = _mapping(path, "axes", axes)
    valid = KIND_AXES[kind] + OPTIONAL_AXES[kind]
    for name in KIND_AXES[kind]:
        if name not in axes:
            raise SuiteError(path, f"axes.{name}", f"missing axis; give a list of {AXES[name][1]}")
    out: dict[str, list[Any]] = {}
    for name, values in axes.items():
        if name not in valid:
            raise SuiteError(path, f"axes.{name}", f"unknown axis for a {kind} suite; valid axes: {', '.join(valid)}")
        values = values if isinstance(values, list) else [values]
        if not values:
            raise SuiteError(path, f"axes.{name}", f"empty axis; give at least one of {AXES[name][1]}")
        check, expected = AXES[name]
        for v in values:
            if not check(v):
                raise SuiteError(path, f"axes.{name}", f"bad value {v!r}; expected {expected}")
        if len(set(map(str, values))) != len(values):
            raise SuiteError(path, f"axes.{name}", f"repeated value in {values}; list each value once")
        out[name] = values
    for item in out["attention"]:
        if any(c in item for c in "*?["):
            if not attentions.list_attentions(item):
                raise SuiteError(
                    path, "axes.attention", f"pattern {item!r} matches no registered attention; see `attnbench list`"
                )
        else:
            try:
                attentions.spec(item)
            except RegistryError as exc:
                raise SuiteError(path, "axes.attention", str(exc)) from None
    return out


def _validate_metrics(path: Path, metrics: Any) -> tuple[str, ...]:
    metrics = metrics if isinstance(metrics, list) else [metrics]
    bad = [m for m in metrics if m not in METRICS]
    if bad or not metrics:
        raise SuiteError(path, "metrics", f"bad metric(s) {bad or metrics}; choose from {', '.join(METRICS)}")
    if len(set(metrics)) != len(metrics):
        raise SuiteError(path, "metrics", f"repeated metric in {metrics}; list each once")
    return tuple(metrics)


def _validate_numbers(path: Path, key: str, value: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    value = {**defaults, **_mapping(path, key, value)}
    _check_keys(path, key, value, set(defaults))
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise SuiteError(path, f"{key}.{k}", f"must be a non-negative number, got {v!r}")
    return value


def _validate_skip(path: Path, rules: Any, kind: str) -> list[dict[str, Any]]:
    rules = rules or []
    if not isinstance(rules, list):
        raise SuiteError(path, "skip", "must be a list of {when: {axis: condition}, reason: text}")
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or set(rule) != {"when", "reason"} or not isinstance(rule["when"], dict):
            raise SuiteError(path, f"skip[{i}]", "each rule is {when: {axis: condition, ...}, reason: text}")
        for axis, cond in rule["when"].items():
            if axis not in KIND_AXES[kind] + OPTIONAL_AXES[kind]:
                valid = ", ".join(KIND_AXES[kind] + OPTIONAL_AXES[kind])
                raise SuiteError(path, f"skip[{i}].when.{axis}", f"unknown axis; valid axes: {valid}")
            if isinstance(cond, dict) and (
                not cond
                or set(cond) - set(_COMPARE)
                or any(isinstance(b, bool) or not isinstance(b, int | float) for b in cond.values())
            ):
                raise SuiteError(path, f"skip[{i}].when.{axis}", "comparisons are {gt|ge|lt|le: number}")
    return rules


def _validate_attention_config(path: Path, value: Any, where: str = "attention_config") -> dict[str, dict[str, Any]]:
    value = _mapping(path, where, value)
    for pattern, overrides in value.items():
        if not isinstance(overrides, dict):
            raise SuiteError(path, f"{where}.{pattern}", "must map config fields to values")
        if not attentions.list_attentions(str(pattern)):
            raise SuiteError(path, f"{where}.{pattern}", "matches no registered attention (`attnbench list`)")
    return value


def _check_train(path: Path, where: str, train: dict[str, Any]) -> None:
    _check_keys(path, where, train, TRAIN_FIELDS)
    try:
        TrainConfig(**train)
    except TypeError as exc:
        raise SuiteError(path, where, str(exc)) from None


def _validate_tasks(path: Path, value: Any) -> dict[str, dict[str, Any]]:
    tasks = _mapping(path, "tasks", value)
    for task, tdoc in tasks.items():
        where = f"tasks.{task}"
        if task not in TASKS:
            raise SuiteError(path, where, f"unknown task; valid tasks: {', '.join(TASKS)}")
        tdoc = _mapping(path, where, tdoc)
        _check_keys(path, where, tdoc, TASK_KEYS)
        if "seq_len" in tdoc and not _positive_int(tdoc["seq_len"]):
            raise SuiteError(path, f"{where}.seq_len", f"must be a positive integer, got {tdoc['seq_len']!r}")
        _check_train(path, f"{where}.train", _mapping(path, f"{where}.train", tdoc.get("train")))
        _mapping(path, f"{where}.config", tdoc.get("config"))
        _mapping(path, f"{where}.gen", tdoc.get("gen"))
        _validate_attention_config(path, tdoc.get("attention_config"), f"{where}.attention_config")
        tasks[task] = tdoc
    return tasks


def _validate_accuracy(path: Path, suite: Suite) -> None:
    """Resolve every (attention, task) once, so a bad setting fails before the first training step."""
    sizes = suite.data["sizes"]
    if not (isinstance(sizes, list) and len(sizes) == 3 and all(_positive_int(s) for s in sizes)):
        raise SuiteError(path, "data.sizes", f"must be three positive integers [train, dev, test], got {sizes!r}")
    if suite.data["dir"] is not None and not Path(str(suite.data["dir"])).is_dir():
        raise SuiteError(path, "data.dir", f"{suite.data['dir']} is not a directory; give the LRA data directory")
    unknown = [v for v in suite.axes.get("variant", []) if v not in suite.variants]
    if unknown:
        defined = ", ".join(suite.variants) or "none"
        raise SuiteError(path, "axes.variant", f"unknown variant {unknown[0]!r}; defined under `variants`: {defined}")
    if any(a > 0 for a in suite.axes.get("noise", [])):
        other = [t for t in suite.axes["task"] if t not in PIXEL_TASKS]
        if other:
            raise SuiteError(path, "axes.noise", f"pixel noise applies to {', '.join(PIXEL_TASKS)} only, not "
                             f"{', '.join(other)}; drop those tasks or use noise 0")
    for name in suite.attentions():
        for task, variant in itertools.product(suite.axes["task"], suite.axes.get("variant", [None])):
            params = {"attention": name, "task": task, "seed": 0}
            if variant is not None:
                params["variant"] = variant
            where = f"variants.{variant}" if variant is not None else f"tasks.{task}"
            try:
                suite._accuracy_cell(params, "cpu")
            except RegistryError as exc:
                raise SuiteError(path, where, str(exc)) from None
            except (ValueError, TypeError) as exc:
                raise SuiteError(path, where, f"{name} on {task}: {exc}") from None


def _validate_variants(path: Path, value: Any, kind: str) -> dict[str, dict[str, Any]]:
    """``variants`` as label -> overrides (the one-at-a-time form expanded; see the module docstring)."""
    doc = _mapping(path, "variants", value)
    if doc and kind != "accuracy":
        raise SuiteError(path, "variants", "only accuracy suites have variants; remove the key")
    if "one_at_a_time" in doc:
        if len(doc) != 1:
            raise SuiteError(path, "variants", "one_at_a_time cannot be mixed with named variants; use one form")
        grid = _mapping(path, "variants.one_at_a_time", doc["one_at_a_time"])
        _check_keys(path, "variants.one_at_a_time", grid, {"base", "vary"})
        return one_at_a_time(_mapping(path, "variants.one_at_a_time.base", grid.get("base")),
                             _validate_vary(path, grid.get("vary")))
    for label, overrides in doc.items():
        if not isinstance(label, str) or not label or "," in label:
            raise SuiteError(path, f"variants.{label}", "a variant label is a non-empty string without commas")
        doc[label] = _mapping(path, f"variants.{label}", overrides)
    return doc


def _validate_vary(path: Path, value: Any) -> dict[str, list[Any]]:
    vary = _mapping(path, "variants.one_at_a_time.vary", value)
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


def _validate_incoherence(path: Path, value: Any, kind: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if kind != "accuracy":
        raise SuiteError(path, "incoherence", "only accuracy suites measure incoherence; remove the key")
    doc = {**INCOHERENCE_DEFAULTS, **_mapping(path, "incoherence", value)}
    _check_keys(path, "incoherence", doc, set(INCOHERENCE_DEFAULTS))
    ranks = doc["ranks"] if isinstance(doc["ranks"], list) else [doc["ranks"]]
    if not ranks or not all(_positive_int(r) for r in ranks) or len(set(ranks)) != len(ranks):
        raise SuiteError(path, "incoherence.ranks", f"must be distinct positive integers, got {doc['ranks']!r}")
    for key in ("layer", "max_examples"):
        if isinstance(doc[key], bool) or not isinstance(doc[key], int) or doc[key] < 0:
            raise SuiteError(path, f"incoherence.{key}", f"must be a non-negative integer, got {doc[key]!r}")
    return {**doc, "ranks": ranks}


def _validate_report(path: Path, suite: Suite) -> None:
    """``report.tables`` names tables of this kind, and each study table has the axes or keys it reads."""
    tables = suite.report["tables"]
    if tables is None:
        return
    valid = REPORT_TABLES[suite.kind]
    if not isinstance(tables, list) or not tables or any(t not in valid for t in tables):
        raise SuiteError(path, "report.tables", f"must be a list of {', '.join(valid)}; got {tables!r}")
    needs = {"table5": ("noise" in suite.axes, "a `noise` axis"),
             "table6": (suite.report["baseline_variant"] in suite.variants, "variants with the baseline_variant"),
             "table7": (suite.report["baseline_variant"] in suite.variants, "variants with the baseline_variant"),
             "tableS7": (suite.incoherence is not None, "an `incoherence` key")}
    for table in tables:
        ok, what = needs.get(table, (True, ""))
        if not ok:
            raise SuiteError(path, "report.tables", f"{table} needs {what}; add it or drop {table}")


def _validate_attention_configs(path: Path, suite: Suite) -> None:
    """Build every attention's config once, so a bad override fails now rather than in cell 57."""
    for name in suite.attentions():
        for dim, heads in itertools.product(suite.axes["dim"], suite.axes["heads"]):
            try:
                attentions.make_config(
                    name,
                    **{**suite.config_for(name), "dim": dim, "heads": heads, "max_seq_len": max(suite.axes["seq_len"])},
                )
            except RegistryError as exc:  # already names the attention
                raise SuiteError(path, "config", str(exc)) from None
            except (ValueError, TypeError) as exc:
                raise SuiteError(path, "config", f"{name}: {exc}") from None


def parse_set(items: list[str]) -> dict[str, list[Any]]:
    """``["seq_len=1024,2048", "mode=fwd"]`` -> {"seq_len": [1024, 2048], "mode": ["fwd"]} (YAML scalars)."""
    out: dict[str, list[Any]] = {}
    for item in items:
        axis, sep, raw = item.partition("=")
        if not sep or not axis or not raw:
            raise SuiteError("--set", item, "expected AXIS=V1,V2,... e.g. --set seq_len=1024,2048")
        if axis not in AXES:
            raise SuiteError("--set", axis, f"unknown axis; valid axes: {', '.join(AXES)}")
        try:
            out[axis] = [yaml.safe_load(v) for v in raw.split(",")]
        except yaml.YAMLError:
            raise SuiteError("--set", item, "values must be plain scalars, e.g. --set seq_len=1024,2048") from None
    return out
