"""The ``approximation`` suite kind: how far each attention that stands in for softmax attention is from it, and what
closing the gap costs (:mod:`harness.kinds.approximation.cells`); reported as an error table and a Pareto figure of
error against time per length (:mod:`harness.kinds.approximation.report`).

Keys of an approximation suite file, besides the common ones::

    axes: {attention: [vanilla_sdpa, performer, nystromformer], seq_len: [1024, 4096], input: [gaussian, listops]}
    budgets:                    # per attention (name or fnmatch pattern): fields swept, every combination a cell
      performer: {nb_features: [16, 64, 256]}
      reformer: {n_hashes: [1, 4], bucket_size: [32, 64]}
    inputs:                     # the `input` axis (default: every input, in file order)
      gaussian: {kind: gaussian}
      listops: {kind: trained, attention: vanilla, task: listops, seed: 0}   # a probe of an accuracy run
    data: {dir: results/accuracy/quick}   # where trained inputs' probes are (--data-dir overrides)
    fixed: {batch_size: 2, dim: 64, heads: 2, seed: 0, matrix_max_seq_len: 1024}
    timing: {min_run_time_s: 0.5, min_repeats: 5, warmup: 1}

An attention without a ``budgets`` entry runs once, at its configured defaults (budget ``default``). Attentions
that are not approximations (S3Attention, FNet, the controls: registry capability ``approximates_softmax`` False
and not ``exact``) are listed with that reason, not measured. A trained input whose probe is missing (no accuracy
run with ``probes`` under ``data.dir``) makes its cells ``unsupported`` with the command that creates it; a
probe's content hash is part of each cell's key, so retraining re-measures.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attentions

from ...core.cell import Cell
from ...core.errors import SuiteError, first_line
from ...core.store import Store
from ...core.suite import (
    ATTENTION_OR_NULL,
    Axis,
    RankedQuantity,
    Suite,
    SuiteKind,
    apply_patterns,
    attention_config,
    capability_reason,
    check_keys,
    expand_patterns,
    identity,
    is_nonneg_int,
    is_positive_int,
    mapping,
    resolve_or_fail,
    validate_numbers,
)
from ...measure.group import is_time_cell, timing_env
from ...measure.timing import TIMING_DEFAULTS
from ...models.probe import PROBE_DIR, load_probe
from ...models.tasks import TASKS
from ...report.claims import write_claims
from ...report.format import shown_env
from .cells import describe, measure_cell, measure_group
from .claims import NO_PAPER_CLAIMS

FIXED_DEFAULTS: dict[str, Any] = {"batch_size": 2, "dim": 64, "heads": 2, "seed": 0, "matrix_max_seq_len": 1024}
DEFAULT_BUDGET = "default"
INPUT_KINDS = ("gaussian", "trained")
TRAINED_KEYS = {"kind", "attention", "task", "seed"}

AXES = {"seq_len": Axis(is_positive_int, "positive integers")}
OPTIONAL_AXES = {
    "input": Axis(lambda v: isinstance(v, str) and v != "", "labels defined under `inputs`"),
    "budget": Axis(lambda v: isinstance(v, str) and v != "", "budget labels such as nb_features=64, or default"),
}


def budget_label(fields: Mapping[str, Any]) -> str:
    """``nb_features=64``; several fields joined by a space: ``n_hashes=1 bucket_size=32``."""
    return " ".join(f"{k}={v}" for k, v in fields.items()) or DEFAULT_BUDGET


def _budgets(path: Path, value: Any) -> dict[str, dict[str, list[Any]]]:
    budgets = mapping(path, "budgets", value)
    for pattern, fields in budgets.items():
        fields = mapping(path, f"budgets.{pattern}", fields)
        for name, values in fields.items():
            if not isinstance(values, list) or not values or len(set(map(str, values))) != len(values):
                raise SuiteError(path, f"budgets.{pattern}.{name}", "must be a list of distinct values, e.g. [16, 64]")
        budgets[pattern] = fields
    return budgets


def attention_budgets(budgets: Mapping[str, Mapping[str, list[Any]]], name: str) -> dict[str, dict[str, Any]]:
    """Label -> config overrides of every budget of attention ``name`` (the product of its matching fields)."""
    fields = apply_patterns({}, budgets, name)
    if not fields:
        return {DEFAULT_BUDGET: {}}
    combos = (dict(zip(fields, values, strict=True)) for values in itertools.product(*fields.values()))
    return {budget_label(c): c for c in combos}


def _probe_for(path: Path, directory: Path, spec: Mapping[str, Any]) -> Path | None:
    """The newest probe under ``directory/probes`` of the model trained with exactly the axis values ``spec`` names
    (a study cell with noise or a variant is another model), or None. Several: the accuracy run was redone after a
    code change, and the newest is the current code's."""
    want = {"attention": spec["attention"], "task": spec["task"], "seed": spec["seed"]}
    found = []
    for file in (directory / PROBE_DIR).glob("*.pt"):
        try:
            probe = load_probe(file)
        except Exception as exc:  # noqa: BLE001  (a truncated, foreign or hand-made file: name it, stop here)
            raise SuiteError(path, "data.dir", f"{file} is not a readable probe ({type(exc).__name__}: "
                                               f"{first_line(exc)}); delete it or rerun the accuracy suite") from None
        if probe.params == want:
            found.append(file)
    return max(found, key=lambda f: f.stat().st_mtime, default=None)


def _inputs(path: Path, value: Any, data_dir: str | None, fixed: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``inputs`` as label -> resolved spec: a trained input carries its probe's path and content hash, or the reason
    it has none (``missing``)."""
    inputs = mapping(path, "inputs", value if value is not None else {"gaussian": {"kind": "gaussian"}})
    if not inputs:
        raise SuiteError(path, "inputs", "define at least one input, e.g. {gaussian: {kind: gaussian}}")
    out: dict[str, dict[str, Any]] = {}
    for label, spec in inputs.items():
        where = f"inputs.{label}"
        spec = mapping(path, where, spec)
        if spec.get("kind") not in INPUT_KINDS:
            raise SuiteError(path, f"{where}.kind",
                             f"must be one of {', '.join(INPUT_KINDS)}, got {spec.get('kind')!r}")
        if spec["kind"] == "gaussian":
            check_keys(path, where, spec, {"kind"})
            out[label] = {"kind": "gaussian", "desc": "Gaussian N(0, 1), own weights"}
            continue
        check_keys(path, where, spec, TRAINED_KEYS)
        if set(spec) != TRAINED_KEYS:
            raise SuiteError(path, where, f"a trained input needs {', '.join(sorted(TRAINED_KEYS - {'kind'}))}")
        known = attentions.list_attentions()
        if spec["task"] not in TASKS or not is_nonneg_int(spec["seed"]) or spec["attention"] not in known:
            raise SuiteError(path, where, "needs a registered attention, a task of " + ", ".join(TASKS)
                             + " and a non-negative integer seed")
        out[label] = _resolve_trained(path, spec, data_dir, fixed)
    return out


def _resolve_trained(path: Path, spec: Mapping[str, Any], data_dir: str | None,
                     fixed: Mapping[str, Any]) -> dict[str, Any]:
    what = f"{spec['attention']} trained on {spec['task']} (seed {spec['seed']})"
    resolved = {**spec, "desc": f"{what}: its first layer's inputs"}
    make = ("run an accuracy suite with `probes` that trains it (`make accuracy`), then pass its results directory "
            "as --data-dir")
    probe_file = _probe_for(path, Path(data_dir), spec) if data_dir else None
    if probe_file is None:
        where = f"{data_dir}/{PROBE_DIR}" if data_dir else "no probe directory (data.dir is null)"
        return {**resolved, "missing": f"no probe of {what} in {where}: {make}"}
    probe = load_probe(probe_file)
    dim, heads = probe.inputs.shape[-1], probe.heads
    if (dim, heads) != (fixed["dim"], fixed["heads"]):
        return {**resolved, "missing": f"the probe of {what} has dim {dim} and {heads} heads, the suite's fixed "
                                       f"dim {fixed['dim']} and heads {fixed['heads']}; make them agree"}
    digest = hashlib.sha256(probe_file.read_bytes()).hexdigest()[:16]
    return {**resolved, "probe": str(probe_file.resolve()), "sha": digest, "length": int(probe.inputs.shape[1]),
            "examples": int(probe.inputs.shape[0])}


@dataclass(frozen=True)
class ApproximationSettings:
    """An approximation suite's own settings: the layer (``fixed``), the inputs, the budgets, where its probes are
    read and the timing."""

    fixed: dict[str, Any]
    inputs: dict[str, dict[str, Any]]
    budgets: dict[str, dict[str, Any]]
    data: dict[str, Any]
    timing: dict[str, Any]


def parse(path: Path, doc: dict[str, Any]) -> ApproximationSettings:
    """The approximation fields of a suite, validated; every input and budget become axes unless given."""
    fixed = {**FIXED_DEFAULTS, **mapping(path, "fixed", doc.get("fixed"))}
    check_keys(path, "fixed", fixed, FIXED_DEFAULTS)
    for key in FIXED_DEFAULTS:
        ok = is_nonneg_int(fixed[key]) if key == "seed" else is_positive_int(fixed[key])
        if not ok:
            raise SuiteError(path, f"fixed.{key}", f"must be a {'non-negative' if key == 'seed' else 'positive'} "
                                                   f"integer, got {fixed[key]!r}")
    data = mapping(path, "data", doc.get("data"))
    check_keys(path, "data", data, {"dir"})
    data_dir = data.get("dir")
    if data_dir is not None and not Path(str(data_dir)).is_dir():
        raise SuiteError(path, "data.dir", f"{data_dir} is not a directory; give the results directory of an accuracy "
                                           f"run with probes (e.g. results/accuracy/quick), or null")
    inputs = _inputs(path, doc.get("inputs"), None if data_dir is None else str(data_dir), fixed)
    budgets = _budgets(path, doc.get("budgets"))
    axes = doc.setdefault("axes", {})
    if isinstance(axes, dict):
        axes.setdefault("input", list(inputs))
        labels = {label: None for name in _attention_names(axes) for label in attention_budgets(budgets, name)}
        axes.setdefault("budget", list(labels))
    return ApproximationSettings(fixed=fixed, inputs=inputs, budgets=budgets, data={"dir": data_dir},
            timing=validate_numbers(path, "timing", doc.get("timing"), TIMING_DEFAULTS))


def _attention_names(axes: Mapping[str, Any]) -> list[str]:
    """The attention axis with patterns expanded, ignoring entries the axis check will reject later."""
    names = axes.get("attention") or []
    return expand_patterns(n for n in (names if isinstance(names, list) else [names]) if isinstance(n, str))


def validate(suite: Suite) -> None:
    """Every input label is defined; every (attention, budget) config resolves before the first cell runs."""
    unknown = [v for v in suite.axes["input"] if v not in suite.settings.inputs]
    if unknown:
        raise SuiteError(suite.path, "axes.input", f"unknown input {unknown[0]!r}; defined under `inputs`: "
                                                    f"{', '.join(suite.settings.inputs)}")
    for name in suite.attentions():
        for label, overrides in attention_budgets(suite.settings.budgets, name).items():
            resolve_or_fail(suite.path, f"budgets ({label})", name, lambda name=name, overrides=overrides: (
                attention_config(name, {**suite.config_for(name), **overrides}, dim=suite.settings.fixed["dim"],
                                 heads=suite.settings.fixed["heads"], seq_len=max(suite.axes["seq_len"]))))


def label(params: Mapping[str, Any]) -> str:
    return f"{params['attention']} [{params['budget']}] n={params['seq_len']} {params['input']}"


def _not_measured(name: str) -> str | None:
    caps = attentions.spec(name).caps
    if caps.approximates_softmax or caps.exact:
        return None
    return f"not an approximation of softmax attention: {name} computes another function by design"


def make_cell(suite: Suite, params: dict[str, Any], device: str) -> Cell | None:
    name, n = params["attention"], params["seq_len"]
    budgets = attention_budgets(suite.settings.budgets, name)
    if params["budget"] not in budgets:
        return None  # another attention's budget
    spec = suite.settings.inputs[params["input"]]
    reason = suite.skip_reason(params) or _not_measured(name) or spec.get("missing")
    if reason is None and spec["kind"] == "trained" and n > spec["length"]:
        reason = f"the trained input has {spec['length']} positions, fewer than seq_len {n}"
    padded = spec["kind"] == "trained"  # probes of LRA tasks carry a padding mask
    fixed = {**suite.settings.fixed, "input": {k: v for k, v in spec.items() if k != "missing"}}
    return Cell(
        suite=suite.name, params=params, fixed=fixed, metrics=("error", "time"), timing=suite.settings.timing,
        config=attention_config(name, {**suite.config_for(name), **budgets[params["budget"]]},
                                dim=suite.settings.fixed["dim"], heads=suite.settings.fixed["heads"], seq_len=n),
        device=device, kind=suite.kind.name, label=label(params), **identity(suite, name),
        skip_reason=reason or capability_reason(name, n, padded=padded),
    )


def group_key(cell: Cell) -> tuple[Any, ...]:
    """Cells of one length and input are timed together (interleaved), so their time ratios are paired."""
    return (cell.device, cell.params["seq_len"], cell.params["input"])


def _nothing(*_: Any) -> None:
    """Approximation cells need no preparation (probes were resolved with the suite) and leave nothing behind."""


def write_reports(store: Store, name: str, options: Mapping[str, Any], keys: list[str] | None) -> list:
    """The reports; speed-ups are against ``report.baseline``, the attention a re-timed group runs beside."""
    df = store.dataframe(keys)
    groups = set(df["timing_group"].dropna()) if "timing_group" in df.columns else set()
    # here, not at the top: the reports load matplotlib, which a cell's worker process never needs
    from .report import write_approximation_reports

    written = write_approximation_reports(df, store.path.parent, env=shown_env(store.runs(set(df["run_id"]))),
                                          suite=name, reference=options.get("baseline", "vanilla_sdpa"),
                                          samples=store.samples(timing_groups=groups))
    return written + write_claims(store.path.parent, [], suite=name, without=NO_PAPER_CLAIMS)


KIND = SuiteKind(
    name="approximation", axes=AXES, optional_axes=OPTIONAL_AXES,
    keys=frozenset({"fixed", "budgets", "inputs", "data", "timing"}), tables=("approximation",), reads_data=True,
    parse=parse, validate=validate, make_cell=make_cell, run=measure_cell, prepare=_nothing, finished=_nothing,
    describe=describe, write_reports=write_reports,
    group_key=group_key, run_group=measure_group, timed=is_time_cell, run_env=timing_env,
    report_keys={"compare_reference": (None, ATTENTION_OR_NULL)},
    ranked=(RankedQuantity("time_ms_median", "time", higher_is_better=False),
            RankedQuantity("rel_fro", "error against softmax", higher_is_better=False)),
    shown_axes=("budget", "input", "seq_len"),
    outputs=lambda suite: ("results.csv", "env.json", "approximation.md", "approximation.tex", "approximation.csv",
                           "pareto_*.png", "pareto_*.pdf", "claims.md"),
    result_columns=lambda suite: ("key", "attention", "budget", "input", "seq_len", "device", "status", "message",
                                  "rel_fro", "max_abs", "cos_mean", "cos_min", "time_ms_median"),
)
