"""The ``speed`` suite kind: each cell times and measures one attention layer (fwd, fwd+bwd) or one training step of
the encoder classifier, at one shape, mode and dtype (see :mod:`harness.kinds.speed.cells`); reported as the paper's
Table 4, fitted slopes and scaling plots (:mod:`harness.kinds.speed.report`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attentions

from ...core.cell import Cell
from ...core.errors import SuiteError
from ...core.store import Store
from ...core.suite import (
    ATTENTION_OR_NULL,
    NONNEG_INT,
    POSITIVE_INT,
    Axis,
    RankedQuantity,
    Rule,
    Suite,
    SuiteKind,
    attention_config,
    capability_reason,
    identity,
    is_positive_int,
    resolve_or_fail,
    validate_fields,
    validate_numbers,
)
from ...measure.compile import MODES as COMPILE_MODES
from ...measure.compile import compiles
from ...measure.gpu import SDPA_BACKENDS
from ...measure.group import is_time_cell, timing_env
from ...measure.timing import TIMING_DEFAULTS
from ...report.claims import is_smoke
from ...report.format import shown_env
from .cells import describe, measure_cell, measure_group

MODES = ("fwd", "fwd+bwd", "train_step")
DTYPES = ("float32", "bfloat16", "float16", "amp_bf16", "amp_fp16")  # amp_*: float32 weights, forward autocast
METRICS = ("time", "memory", "flops")
#: Opt-in GPU measurements (:mod:`harness.measure.gpu`), CUDA only: ``timing.cuda_graph: true`` also times each call
#: captured as a CUDA graph (``graph_time_ms_median``: the call without its host launch cost); ``timing.gpu_profile:
#: true`` runs each call under the profiler for ``gpu_busy_fraction``, ``cuda_kernels_per_call`` and the SDPA backend
#: that ran (a profiler session per cell: seconds across a large sweep). Kept out of the timing block unless true,
#: so the cells of suites that do not ask for them keep their keys.
OPT_IN_TIMING = ("cuda_graph", "gpu_profile")
#: The train_step model (encoder depth, MLP width, vocabulary, classes) and its seed.
FIXED_DEFAULTS: dict[str, Any] = {"layers": 2, "mlp_dim": 128, "vocab_size": 256, "num_classes": 2, "seed": 0}
# A zero or negative size builds a wrong model (or fails in every train_step cell) instead of refusing the suite.
FIXED_RULES: dict[str, Rule] = {"layers": POSITIVE_INT, "mlp_dim": POSITIVE_INT, "vocab_size": POSITIVE_INT,
                                "num_classes": POSITIVE_INT, "seed": NONNEG_INT}

AXES = {
    "seq_len": Axis(is_positive_int, "positive integers"),
    "batch_size": Axis(is_positive_int, "positive integers"),
    "heads": Axis(is_positive_int, "positive integers"),
    "dim": Axis(is_positive_int, "positive integers"),
    "mode": Axis(lambda v: v in MODES, f"one of {', '.join(MODES)}"),
    "dtype": Axis(lambda v: v in DTYPES, f"one of {', '.join(DTYPES)}"),
    # eager, or the layer (the encoder in train_step cells) under torch.compile (harness.measure.compile); [eager] when
    # a suite does not give it
    "compile": Axis(lambda v: v in COMPILE_MODES, f"one of {', '.join(COMPILE_MODES)}"),
}


#: Axes a speed suite may add: ``sdpa_backend`` pins torch's SDPA to one backend (``auto``: torch's choice, as a cell
#: without the axis); a backend that cannot run a cell's shape or device is that cell's error.
SDPA_CHOICES = ("auto", *SDPA_BACKENDS)
#: ``causal``: the variant's causal form (``true``) beside its bidirectional one (``false``, as a cell without the
#: axis); a variant without one gives ``unsupported`` causal cells with its reason.
OPTIONAL_AXES = {"sdpa_backend": Axis(lambda v: v in SDPA_CHOICES, f"one of {', '.join(SDPA_CHOICES)}"),
                 "causal": Axis(lambda v: isinstance(v, bool), "true or false")}


def _metrics(path: Path, metrics: Any) -> tuple[str, ...]:
    metrics = metrics if isinstance(metrics, list) else [metrics]
    bad = [m for m in metrics if m not in METRICS]
    if bad or not metrics:
        raise SuiteError(path, "metrics", f"bad metric(s) {bad or metrics}; choose from {', '.join(METRICS)}")
    if len(set(metrics)) != len(metrics):
        raise SuiteError(path, "metrics", f"repeated metric in {metrics}; list each once")
    return tuple(metrics)


@dataclass(frozen=True)
class SpeedSettings:
    """A speed suite's own settings: the train_step model (``fixed``), the metrics measured and the timing."""

    fixed: dict[str, Any]
    metrics: tuple[str, ...]
    timing: dict[str, Any]


def parse(path: Path, doc: dict[str, Any]) -> SpeedSettings:
    """The speed fields of a suite: ``fixed``, ``metrics`` and ``timing``, defaults filled in, every value checked;
    the ``compile`` axis is ``[eager]`` unless the suite gives it."""
    axes = doc.setdefault("axes", {})
    if isinstance(axes, dict):
        axes.setdefault("compile", ["eager"])
    timing_doc = doc.get("timing")
    chosen = {}
    if isinstance(timing_doc, dict):
        timing_doc = dict(timing_doc)
        for key in OPT_IN_TIMING:
            if key in timing_doc:
                chosen[key] = timing_doc.pop(key)
                if not isinstance(chosen[key], bool):
                    raise SuiteError(path, f"timing.{key}", f"must be true or false, got {chosen[key]!r}")
    timing = validate_numbers(path, "timing", timing_doc, TIMING_DEFAULTS)
    return SpeedSettings(fixed=validate_fields(path, "fixed", doc.get("fixed"), FIXED_DEFAULTS, FIXED_RULES),
            metrics=_metrics(path, doc.get("metrics", list(METRICS))),
            timing={**timing, **{k: True for k, on in chosen.items() if on}})


def validate(suite: Suite) -> None:
    """Build every attention's config once, so a bad override fails now rather than in cell 57."""
    for name in suite.attentions():
        for dim, heads in itertools.product(suite.axes["dim"], suite.axes["heads"]):
            resolve_or_fail(suite.path, "config", name, lambda name=name, dim=dim, heads=heads: attention_config(
                name, suite.config_for(name), dim=dim, heads=heads, seq_len=max(suite.axes["seq_len"])))


def label(params: Mapping[str, Any]) -> str:
    compiled = f" {params['compile']}" if compiles(params) else ""
    sdpa = f" sdpa={params['sdpa_backend']}" if params.get("sdpa_backend", "auto") != "auto" else ""
    causal = " causal" if params.get("causal") else ""
    return (f"{params['attention']} n={params['seq_len']} b={params['batch_size']} {params['mode']} "
            f"{params['dtype']}{causal}{compiled}{sdpa}")


def make_cell(suite: Suite, params: dict[str, Any], device: str) -> Cell:
    name, n, settings = params["attention"], params["seq_len"], suite.settings
    causal = bool(params.get("causal", False))
    overrides = suite.config_for(name)
    if causal and attentions.spec(name).caps.causal:
        overrides = {**overrides, "causal": True}
    return Cell(
        suite=suite.name, params=params, fixed=settings.fixed, metrics=settings.metrics, timing=settings.timing,
        config=attention_config(name, overrides, dim=params["dim"], heads=params["heads"], seq_len=n),
        device=device, kind=suite.kind.name, label=label(params), **identity(suite, name),
        # layer cells have no padding; train_step cells feed every token too
        skip_reason=suite.skip_reason(params) or capability_reason(name, n, padded=False, causal=causal),
    )


def group_key(cell: Cell) -> tuple[Any, ...]:
    """Cells that differ only by attention are timed together (interleaved), so their ratios are paired."""
    return (cell.device, *sorted((k, v) for k, v in cell.params.items() if k != "attention"))


def _nothing(*_: Any) -> None:
    """Speed cells need no preparation and leave nothing behind."""


def write_reports(store: Store, name: str, options: Mapping[str, Any], keys: list[str] | None) -> list:
    df = store.dataframe(keys)
    groups = set(df["timing_group"].dropna()) if "timing_group" in df.columns else set()
    runs = store.runs(set(df["run_id"]))
    roofs = {r.run_id: (r.env.get("gemm_peak_gflops"), r.env.get("memory_bandwidth_gbs")) for r in runs.itertuples()}
    # here, not at the top: the reports load matplotlib, which a cell's worker process never needs
    from .report import write_speed_reports

    return write_speed_reports(df, store.path.parent, env=shown_env(runs), suite=name,
                               baseline=options.get("baseline", "vanilla"),
                               slope_min_seq_len=int(options.get("slope_min_seq_len", 1024)),
                               samples=store.group_samples(groups), roofs=roofs, row_names=options.get("row_names"),
                               smoke=is_smoke(runs["profile"]), rows=options.get("rows"))


#: The results.csv columns of every cell, then those each metric adds.
RESULT_COLUMNS = ("key", "attention", "backend", "seq_len", "batch_size", "heads", "dim", "mode", "dtype", "device",
                  "status", "message")
METRIC_COLUMNS = {"time": ("time_ms_median", "time_ms_iqr"), "memory": ("peak_mem_bytes",), "flops": ("gflops",)}


def outputs(suite: Suite) -> tuple[str, ...]:
    """What a speed run writes: the raw results, Table 4 in both formats, the scaling figures of what it measures."""
    figures = tuple(f"{m}_*.{ext}" for m in ("time", "memory") if m in suite.settings.metrics for ext in ("png", "pdf"))
    return ("results.csv", "env.json", "table4_*.md", "table4_*.tex", "slopes.md", "claims.md", *figures)


def result_columns(suite: Suite) -> tuple[str, ...]:
    metrics = suite.settings.metrics
    extra = ("gflops_per_s",) if {"time", "flops"} <= set(metrics) else ()
    return (*RESULT_COLUMNS, *(c for m in metrics for c in METRIC_COLUMNS[m]), *extra)


KIND = SuiteKind(
    name="speed", axes=AXES, optional_axes=OPTIONAL_AXES, keys=frozenset({"fixed", "metrics", "timing"}),
    tables=("table4",),
    reads_data=False, parse=parse, validate=validate, make_cell=make_cell, run=measure_cell, prepare=_nothing,
    finished=_nothing, describe=describe, write_reports=write_reports,
    group_key=group_key, run_group=measure_group, timed=is_time_cell, run_env=timing_env,
    report_keys={"slope_min_seq_len": (1024, POSITIVE_INT), "compare_reference": (None, ATTENTION_OR_NULL)},
    ranked=(RankedQuantity("time_ms_median", "time", higher_is_better=False),
            RankedQuantity("peak_mem_bytes", "memory", higher_is_better=False)),
    shown_axes=("seq_len", "batch_size", "heads", "dim", "mode", "dtype", "compile", "sdpa_backend"),
    outputs=outputs, result_columns=result_columns,
)


