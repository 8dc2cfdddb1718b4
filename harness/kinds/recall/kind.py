"""The ``recall`` suite kind: multi-query associative recall (MQAR, Zoology's Figure 2) for every variant with a causal
form. Each cell trains a two-layer causal LM of one attention (:class:`harness.models.lm.CausalLM`) at one width,
learning rate and seed on one task (sequence length, key-value pairs), resumably, and records its recall beside the
decoding state it recalls from and its training time per step; reported as the recall table, the Zoology and Based
figures and ``claims.md`` (:mod:`harness.kinds.recall.report`).

Keys of a recall suite file, besides the common ones:
- ``data``: the task's generator (:mod:`harness.kinds.recall.mqar`): ``vocab_size`` (8192), ``power_a`` (0.01),
  ``random_non_queries`` (false), ``train_examples`` and ``test_examples`` (100,000 and 3,000 in Figure 2), and
  ``pairs_every``: without a ``num_kv_pairs`` axis a task has ``seq_len / pairs_every`` pairs (Figure 2's 64/4,
  128/8, 256/16: 16).
- ``model``: ``heads`` (1), ``layers`` (2), ``dropout`` (0.1) and ``embed_dropout`` (0.1) of the LM.
- ``train``: :class:`~harness.kinds.recall.training.RecallTrain` settings; ``train_by_seq_len``: per sequence length,
  overrides of them (Figure 2's batch of 256 at length 256).

Axes: ``seq_len``, ``d_model``, ``lr`` and ``seed``; ``num_kv_pairs`` optionally.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attentions

from ...core.cell import Cell
from ...core.errors import SuiteError, UserError
from ...core.store import Store
from ...core.suite import (
    BOOL,
    POSITIVE_INT,
    Axis,
    RankedQuantity,
    Suite,
    SuiteKind,
    attention_config,
    axis_label,
    capability_reason,
    check_fits,
    check_keys,
    identity,
    is_finite_number,
    is_nonneg_int,
    is_positive_int,
    mapping,
    validate_fields,
)
from ...models.checkpoints import drop_checkpoint
from ...report.claims import is_smoke
from ...report.format import shown_env
from .cells import describe, prepare, run
from .mqar import POWER_A, ROWS_PER_DRAW, VOCAB_SIZE, check_mqar
from .training import RecallTrain

TABLES = ("recall",)
DATA_DEFAULTS: dict[str, Any] = {"vocab_size": VOCAB_SIZE, "power_a": POWER_A, "random_non_queries": False,
                                 "train_examples": 100_000, "test_examples": 3_000, "pairs_every": 16}
#: The largest vocabulary a suite may ask for: the generator draws rows x V/2 uniform numbers per batch of keys.
MAX_VOCAB = 2**20
DATA_RULES = {"vocab_size": (lambda v: POSITIVE_INT[0](v) and v <= MAX_VOCAB,
                             f"a positive integer up to {MAX_VOCAB}"),
              "power_a": (lambda v: is_finite_number(v) and 0 < v <= 1, "a number in (0, 1] (Zoology: 0.01)"),
              "random_non_queries": BOOL,
              "train_examples": POSITIVE_INT, "test_examples": POSITIVE_INT, "pairs_every": POSITIVE_INT}
MODEL_DEFAULTS: dict[str, Any] = {"heads": 1, "layers": 2, "dropout": 0.1, "embed_dropout": 0.1}
_PROBABILITY = (lambda v: is_finite_number(v) and 0 <= v < 1, "a number in [0, 1)")
MODEL_RULES = {"heads": POSITIVE_INT, "layers": POSITIVE_INT, "dropout": _PROBABILITY, "embed_dropout": _PROBABILITY}
TRAIN_FIELDS = {f.name for f in dataclasses.fields(RecallTrain)}

AXES = {
    "seq_len": Axis(lambda v: is_positive_int(v) and v % 2 == 0, "even positive integers (tokens per sequence)"),
    "d_model": Axis(is_positive_int, "positive integers (the model's width)"),
    "lr": Axis(lambda v: is_finite_number(v) and v > 0, "positive numbers (AdamW learning rates)"),
    "seed": Axis(is_nonneg_int, "non-negative integers"),
}
OPTIONAL_AXES = {"num_kv_pairs": Axis(is_positive_int, "positive integers (key-value pairs per sequence)")}


@dataclass(frozen=True)
class RecallSettings:
    """A recall suite's own settings: the task's generator, the model, training and its per-length overrides."""

    data: dict[str, Any]
    model: dict[str, Any]
    train: dict[str, Any]
    train_by_seq_len: dict[int, dict[str, Any]]


def parse(path: Path, doc: dict[str, Any]) -> RecallSettings:
    """The recall fields of a suite, validated."""
    data = validate_fields(path, "data", doc.get("data"), DATA_DEFAULTS, DATA_RULES)
    model = validate_fields(path, "model", doc.get("model"), MODEL_DEFAULTS, MODEL_RULES)
    train = _train(path, "train", doc.get("train"), {})
    by_length = {}
    for length, overrides in mapping(path, "train_by_seq_len", doc.get("train_by_seq_len")).items():
        if not AXES["seq_len"].check(length):
            raise SuiteError(path, f"train_by_seq_len.{length}", "must be keyed by even positive sequence lengths")
        by_length[length] = _train(path, f"train_by_seq_len.{length}", overrides, train)
    return RecallSettings(data=data, model=model, train=train, train_by_seq_len=by_length)


def _train(path: Path, where: str, value: Any, base: dict[str, Any]) -> dict[str, Any]:
    train = mapping(path, where, value)
    check_keys(path, where, train, TRAIN_FIELDS)
    try:
        RecallTrain(**{**base, **train})
    except (TypeError, ValueError) as exc:
        raise SuiteError(path, where, str(exc)) from None
    return {**base, **train}


def pairs_of(suite: Suite, params: Mapping[str, Any]) -> int:
    """The cell's key-value pairs: its ``num_kv_pairs`` axis value, or ``seq_len / data.pairs_every``."""
    return int(params.get("num_kv_pairs") or params["seq_len"] // suite.settings.data["pairs_every"])


def validate(suite: Suite) -> None:
    """Every task can be generated (pairs fit the length, keys and values fit the vocabulary) and held in memory; every
    cell's attention config resolves."""
    data = suite.settings.data
    pairs = suite.axes.get("num_kv_pairs") or [None]
    for seq_len in suite.axes["seq_len"]:
        for n in pairs:
            try:
                check_mqar(seq_len, pairs_of(suite, {"seq_len": seq_len, "num_kv_pairs": n}), data["vocab_size"])
            except UserError as exc:
                key = "axes.num_kv_pairs" if n is not None else "data.pairs_every"
                raise SuiteError(suite.path, key, f"at seq_len {seq_len}: {exc}") from None
    longest = max(suite.axes["seq_len"])
    # the tokens and targets (int64) of both splits, and the uniform draws (float32) of a generator batch
    check_fits(suite.path, "data.train_examples", (data["train_examples"] + data["test_examples"]) * longest * 16
               + ROWS_PER_DRAW * data["vocab_size"] * 4,
               f"{data['train_examples']:,} + {data['test_examples']:,} sequences of {longest} tokens")
    for name in suite.attentions():
        # as the cells build them: each length, the causal form (a variant without one is an unsupported cell)
        causal = {"causal": True} if attentions.spec(name).caps.causal else {}
        for d_model in suite.axes["d_model"]:
            for seq_len in suite.axes["seq_len"]:
                try:
                    attention_config(name, {**suite.config_for(name), **causal}, dim=d_model,
                                     heads=suite.settings.model["heads"], seq_len=seq_len)
                except (TypeError, ValueError) as exc:
                    raise SuiteError(suite.path, "config", f"{name} at d_model {d_model}, seq_len {seq_len}: {exc}"
                                     ) from None


def make_cell(suite: Suite, params: dict[str, Any], device: str) -> Cell | None:
    name, settings = params["attention"], suite.settings
    seq_len, pairs = params["seq_len"], pairs_of(suite, params)
    data = {k: v for k, v in settings.data.items() if k != "pairs_every"} | {"seq_len": seq_len, "num_kv_pairs": pairs}
    train = dataclasses.asdict(RecallTrain(**settings.train_by_seq_len.get(seq_len, settings.train)))
    overrides = suite.config_for(name)
    return Cell(
        suite=suite.name, params={**params, "num_kv_pairs": pairs}, metrics=("recall",), timing={}, device=device,
        fixed={"data": data, "model": settings.model, "train": train, "attention": overrides},
        config=attention_config(name, overrides, dim=params["d_model"], heads=settings.model["heads"],
                                seq_len=seq_len),
        kind=suite.kind.name, label=axis_label({**params, "num_kv_pairs": pairs}),
        skip_reason=suite.skip_reason(params) or capability_reason(name, seq_len, padded=False, causal=True),
        **identity(suite, name),
    )


def write_reports(store: Store, name: str, options: Mapping[str, Any], keys: list[str] | None) -> list[Path]:
    df = store.dataframe(keys)
    # here, not at the top: the reports load matplotlib, which a cell's worker process never needs
    from .report import write_recall_reports

    runs = store.runs(set(df["run_id"]))
    return write_recall_reports(df, store.path.parent, env=shown_env(runs), suite=name,
                                options={**options, "smoke": is_smoke(runs["profile"]),
                                         "reduced_budget": set(runs["profile"]) != {"paper"}})


KIND = SuiteKind(
    name="recall", axes=AXES, optional_axes=OPTIONAL_AXES,
    keys=frozenset({"data", "model", "train", "train_by_seq_len"}), tables=TABLES, reads_data=False,
    parse=parse, validate=validate, make_cell=make_cell, run=run, prepare=prepare, finished=drop_checkpoint,
    describe=describe, write_reports=write_reports,
    ranked=(RankedQuantity("recall", "MQAR recall", higher_is_better=True),),
    shown_axes=("seq_len", "num_kv_pairs", "d_model", "lr", "seed"),
    outputs=lambda suite: ("results.csv", "env.json", "recall.md", "recall.tex", "recall.csv", "claims.md",
                           *(f"recall_{f}.{ext}" for f in ("by_width", "by_state", "by_step_time")
                             for ext in ("png", "pdf"))),
    result_columns=lambda suite: ("key", "attention", "seq_len", "num_kv_pairs", "d_model", "lr", "seed", "device",
                                  "status", "message", "recall", "best_recall", "epochs_run", "steps",
                                  "stopped_early", "step_ms", "wall_s", "state_bytes", "data_source"),
)
