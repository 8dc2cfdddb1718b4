"""The ``decode`` suite kind: each cell prefills one causal layer with a prompt of ``context`` tokens and times one
decoding step against its state (a KV cache, a window, recurrent sums: :mod:`attentions._decode`), for every variant
that decodes; reported as ms per token and state bytes against the KV cache (:mod:`harness.kinds.decode.report`).

A decode suite file::

    name: decode
    kind: decode
    axes:
      attention: [vanilla_sdpa, performer, linear_transformer, local]
      context: [1024, 4096, 16384]     # tokens in the state when a step runs
      batch_size: [1, 8]
      heads: [4]
      head_dim: [64]
      dtype: [float32]
      kv_heads: [4, 1]                 # optional: key/value heads of a KV cache (grouped-query attention)
    fixed: {seed: 0}
    timing: {min_run_time_s: 1.0, min_repeats: 5, warmup: 2}

A variant without a causal form, or one that does not decode, gives ``unsupported`` cells with its reason; so does
``kv_heads`` other than ``heads`` for a variant whose state is not a KV cache of its own heads. ``kv_heads`` must divide
every ``heads`` value (exit 2 before anything runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import attentions

from ...core.cell import Cell
from ...core.errors import SuiteError
from ...core.store import Store
from ...core.suite import (
    NONNEG_INT,
    Axis,
    RankedQuantity,
    Rule,
    Suite,
    SuiteKind,
    attention_config,
    identity,
    is_positive_int,
    resolve_or_fail,
    validate_fields,
    validate_numbers,
)
from ...measure.group import is_time_cell
from ...measure.quiet import calibrate
from ...measure.timing import TIMING_DEFAULTS
from ...measure.traffic import measure_memory_bandwidth_gbs
from ...report.claims import write_claims
from ...report.format import shown_env
from .cells import TORCH_DTYPES, describe, measure_cell, measure_group
from .claims import NO_PAPER_CLAIMS

AXES = {
    "context": Axis(is_positive_int, "positive integers (tokens in the state when a step runs)"),
    "batch_size": Axis(is_positive_int, "positive integers"),
    "heads": Axis(is_positive_int, "positive integers"),
    "head_dim": Axis(is_positive_int, "positive integers"),
    "dtype": Axis(lambda v: v in TORCH_DTYPES, f"one of {', '.join(TORCH_DTYPES)}"),
}
OPTIONAL_AXES = {"kv_heads": Axis(is_positive_int, "positive integers dividing every heads value")}
FIXED_DEFAULTS: dict[str, Any] = {"seed": 0}
FIXED_RULES: dict[str, Rule] = {"seed": NONNEG_INT}


@dataclass(frozen=True)
class DecodeSettings:
    """A decode suite's own settings: the seed of the layers and inputs, and the timing."""

    fixed: dict[str, Any]
    timing: dict[str, Any]


def parse(path: Path, doc: dict[str, Any]) -> DecodeSettings:
    return DecodeSettings(fixed=validate_fields(path, "fixed", doc.get("fixed"), FIXED_DEFAULTS, FIXED_RULES),
                          timing=validate_numbers(path, "timing", doc.get("timing"), TIMING_DEFAULTS))


def validate(suite: Suite) -> None:
    """``kv_heads`` divides every ``heads``; every attention's causal config resolves at the longest context."""
    for kv in suite.axes.get("kv_heads", []):
        bad = [h for h in suite.axes["heads"] if h % kv]
        if bad:
            raise SuiteError(suite.path, "axes.kv_heads", f"{kv} does not divide heads {bad[0]}: grouped-query "
                                                          f"attention shares each key/value head among heads/kv_heads "
                                                          f"query heads; give divisors of every heads value")
    longest = max(suite.axes["context"]) + 1
    for name in suite.attentions():
        for heads in suite.axes["heads"]:
            resolve_or_fail(suite.path, "config", name, lambda name=name, heads=heads: attention_config(
                name, _overrides(suite, name, heads, None), dim=heads * suite.axes["head_dim"][0], heads=heads,
                seq_len=longest))


def _overrides(suite: Suite, name: str, heads: int, kv_heads: int | None) -> dict[str, Any]:
    """The suite's config of ``name``, its causal form where it has one, and its key/value heads where asked."""
    out = dict(suite.config_for(name))
    if attentions.spec(name).caps.causal:
        out["causal"] = True
    if kv_heads is not None and kv_heads != heads and _has_kv_heads(name):
        out["kv_heads"] = kv_heads
    return out


def _has_kv_heads(name: str) -> bool:
    return any(f.name == "kv_heads" for f in dataclasses.fields(attentions.spec(name).config))


def label(params: Mapping[str, Any]) -> str:
    kv = f" kv={params['kv_heads']}" if "kv_heads" in params else ""
    return (f"{params['attention']} ctx={params['context']} b={params['batch_size']} h={params['heads']}{kv} "
            f"{params['dtype']}")


def make_cell(suite: Suite, params: dict[str, Any], device: str) -> Cell:
    name, n, heads = params["attention"], params["context"], params["heads"]
    kv = params.get("kv_heads")
    spec = attentions.spec(name)
    cannot = spec.cannot_run(n, padded=False, max_seq_len=n + 1, causal=True, decode=True)
    if cannot is None and kv is not None and kv != heads and not _has_kv_heads(name):
        cannot = (f"{name} keeps no key/value heads to share (grouped-query attention applies to KV caches); its "
                  f"cells with kv_heads equal to heads measure it")
    reason = suite.skip_reason(params) or (None if cannot is None else f"unsupported by {name}: {cannot}")
    return Cell(
        suite=suite.name, params=params, fixed=suite.settings.fixed, metrics=("time", "memory"),
        timing=suite.settings.timing, device=device, kind=suite.kind.name, label=label(params),
        config=attention_config(name, _overrides(suite, name, heads, kv) if spec.caps.causal else suite.config_for(
            name), dim=heads * params["head_dim"], heads=heads, seq_len=n + 1),
        skip_reason=reason, **identity(suite, name),
    )


def group_key(cell: Cell) -> tuple[Any, ...]:
    """Cells that differ only by attention are timed together (interleaved), so their ratios are paired."""
    return (cell.device, *sorted((k, v) for k, v in cell.params.items() if k != "attention"))


def run_env(cells: list[Cell], device: torch.device) -> dict[str, Any]:
    """Measured once per run: the copy bandwidth (a step's bound) and the reference kernel of the noise check."""
    return {"memory_bandwidth_gbs": measure_memory_bandwidth_gbs(device), "calibration_ms": calibrate(device)}


def _nothing(*_: Any) -> None:
    """Decode cells need no preparation and leave nothing behind."""


def write_reports(store: Store, name: str, options: Mapping[str, Any], keys: list[str] | None) -> list:
    df = store.dataframe(keys)
    runs = store.runs(set(df["run_id"]))
    bandwidth = {r.run_id: r.env.get("memory_bandwidth_gbs") for r in runs.itertuples()}
    groups = set(df["timing_group"].dropna()) if "timing_group" in df.columns else set()
    # here, not at the top: the reports load matplotlib, which a cell's worker process never needs
    from .report import write_decode_reports

    written = write_decode_reports(df, store.path.parent, env=shown_env(runs), suite=name,
                                   baseline=options.get("baseline", "vanilla_sdpa"), bandwidth=bandwidth,
                                   samples=store.group_samples(groups), row_names=options.get("row_names"))
    return written + write_claims(store.path.parent, [], suite=name, without=NO_PAPER_CLAIMS)


KIND = SuiteKind(
    name="decode", axes=AXES, optional_axes=OPTIONAL_AXES, keys=frozenset({"fixed", "timing"}), tables=("decode",),
    reads_data=False, parse=parse, validate=validate, make_cell=make_cell, run=measure_cell, prepare=_nothing,
    finished=_nothing, describe=describe, write_reports=write_reports,
    group_key=group_key, run_group=measure_group, timed=is_time_cell, run_env=run_env,
    ranked=(RankedQuantity("ms_per_token", "decoding time per token", higher_is_better=False),
            RankedQuantity("state_bytes", "decoding state", higher_is_better=False)),
    shown_axes=("context", "batch_size", "heads", "head_dim", "kv_heads", "dtype"),
    outputs=lambda suite: ("results.csv", "env.json", "decode_*.md", "decode_*.tex", "decode_*.png", "decode_*.pdf",
                           "slopes.md", "slopes.csv", "claims.md"),
    result_columns=lambda suite: ("key", "attention", "context", "batch_size", "heads", "head_dim", "dtype", "device",
                                  "status", "message", "ms_per_token", "time_ms_median", "time_ms_iqr", "tokens_per_s",
                                  "prefill_ms", "state_bytes", "bandwidth_bound_ms"),
)
