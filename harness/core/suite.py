"""What a suite is, for every kind of suite: the :class:`Suite` record, the :class:`SuiteKind` interface each kind
implements once, and the checks of suite-file sections that every kind shares.

Reading a file into a :class:`Suite` is :mod:`harness.run.suitefile`; the kinds are :mod:`harness.kinds`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import math
import os
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import attentions
from attentions import RegistryError

from .cell import Cell, CellResult, Context
from .errors import SuiteError, first_line, has_control
from .provenance import code_identity, software
from .rules import (  # noqa: F401  (re-exported: the kinds validate their sections with them)
    ATTENTION_OR_NULL,
    BOOL,
    COUNT,
    DURATION,
    INT_MAX,
    MAX_COUNT,
    MAX_DURATION_S,
    NONNEG_INT,
    POSITIVE_INT,
    POSITIVE_NUMBER,
    REPORT_RULES,
    TEXT,
    Rule,
    is_finite_number,
    is_nonneg_int,
    is_positive_int,
)
from .skip import (
    SKIPPED_BY_RULE,  # noqa: F401  (re-exported: the reports leave such cells out)
    skip_reason,
)
from .store import Store

#: Fields of an attention's config that a cell's shape sets (see :attr:`harness.core.cell.Cell.config`).
SHAPE_FIELDS = ("dim", "heads", "max_seq_len")
PROFILES_REQUIRED = ("smoke", "quick", "paper")
#: Top-level keys of every suite file; each kind adds its own (:attr:`SuiteKind.keys`).
COMMON_KEYS = frozenset({"name", "description", "kind", "axes", "config", "attention_config", "skip", "report",
                         "profiles"})
#: ``report`` keys of every suite (``rows``: what a paper's LaTeX table prints, null: the paper's); kinds add their own.
REPORT_DEFAULTS: dict[str, Any] = {"baseline": "vanilla", "tables": None, "row_names": None, "rows": None}


@dataclass(frozen=True)
class RankedQuantity:
    """A stored metric column that enters ``report --rank``'s index, and which way is better."""

    column: str
    name: str
    higher_is_better: bool


@dataclass(frozen=True)
class Axis:
    """A sweep axis: the check of one value and what a valid value looks like (for the error message)."""

    check: Callable[[Any], bool]
    expected: str


#: The axis every kind has.
ATTENTION_AXIS = Axis(lambda v: isinstance(v, str) and v != "", "registered attention names or fnmatch patterns")


@dataclass(frozen=True)
class SuiteKind:
    """Everything the harness does differently for one kind of suite, declared once (see :mod:`harness.kinds`).

    Attributes:
        name: the value of a suite file's ``kind`` key.
        axes: axes a suite of this kind must declare, besides ``attention``.
        optional_axes: axes it may add.
        keys: top-level suite keys only this kind reads.
        tables: the ``report.tables`` it can write; the first is the default.
        reads_data: whether ``--data-dir`` applies.
        parse: (path, merged document) -> this kind's settings object (:attr:`Suite.settings`), validated (may add
            default axes).
        validate: cross-checks of a built suite (every attention's config resolves, tables have their axes).
        make_cell: (suite, axis values, device) -> the cell, or None for a combination that is not one (the
            approximation kind's budget of another attention).
        run: runs one cell in this process; every failure becomes the result's status.
        prepare: before the first cell of a run (load the data once, fail early on a bad data path).
        check_inputs: before anything is written under ``--out``: read the files the user named (real datasets),
            so that a malformed one is refused as bad input (exit 2) rather than found after the store exists.
        finished: after a cell's row is stored (drop its checkpoint).
        describe: the progress line of a finished cell.
        write_reports: (store, the suite's name, report options, keys or None) -> the files written beside the store.
        code: modules whose source determines this kind's numbers besides those of ``run`` and ``run_group``; the
            import closure of all of them is in every cell's key (:func:`measuring_modules`).
        data_identity: after ``check_inputs`` has read the user's files, the SHA-256 of the data one cell reads ("" for
            generated data), so that a cell measured on other contents of the same files is measured again.
        group_key: cells with equal group keys are run together by ``run_group`` (None: one cell at a time).
        run_group: runs a group of cells in this process (the speed kind times them interleaved).
        timed: whether a cell's figures are times (None: no cell's are): such a cell waits for a quiet machine under
            ``--require-quiet``, and a group of them is timed beside its baseline, so that every speed-up is paired.
        run_env: measurements of the machine that a run of these cells needs once, before its first cell, stored
            with the run (the timed kinds: the GEMM peak and bandwidth of the roofline, the noise check's reference
            kernel).
        value_order: for an axis, the order of its values in cross-suite views (``report --rank``): e.g. the LRA
            tasks in the paper's order rather than alphabetically.
        normalise: a results frame of this kind with its optional axes filled (cells without a study axis group
            with the default ones), for the cross-suite views.
        value_text: how an axis value reads inside a label of a cross-suite view (``a=2``, ``Text``).
        rank_subset: the cells a ranking reads of a results frame of this kind, and whether that is a part of them
            (the robustness study is ranked on its noisy cells).
        report_keys: the kind's own ``report`` keys beside :data:`REPORT_DEFAULTS`: key -> (default, rule); a key of
            another kind is refused.
        ranked: what ``report --rank`` ranks a suite of this kind on (its metric columns, and which way is better).
        shown_axes: the axes ``compare`` shows of its cells (besides the suite, the attention and the device).
        outputs: the report files a run of a suite of this kind writes (glob patterns under its directory), which the
            smoke tests check for every suite.
        result_columns: the ``results.csv`` columns every ok cell of a suite has (the smoke tests check them).
    """

    name: str
    axes: dict[str, Axis]
    optional_axes: dict[str, Axis]
    keys: frozenset[str]
    tables: tuple[str, ...]
    reads_data: bool
    parse: Callable[[Path, dict[str, Any]], Any]
    validate: Callable[[Suite], None]
    make_cell: Callable[[Suite, dict[str, Any], str], Cell | None]
    run: Callable[[Cell, Context], CellResult]
    prepare: Callable[[list[Cell], Context], None]
    finished: Callable[[Cell, Context], None]
    describe: Callable[[CellResult], str]
    write_reports: Callable[[Store, str, Mapping[str, Any], list[str] | None], list[Path]]
    code: tuple[str, ...] = ()
    group_key: Callable[[Cell], Hashable] | None = None
    run_group: Callable[[list[Cell], Context], list[CellResult]] | None = None
    check_inputs: Callable[[list[Cell]], None] | None = None
    data_identity: Callable[[Cell], str] | None = None
    timed: Callable[[Cell], bool] | None = None
    run_env: Callable[[list[Cell], torch.device], dict[str, Any]] | None = None
    value_order: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    normalise: Callable[[Any], Any] | None = None
    value_text: Callable[[str, Any], str] | None = None
    rank_subset: Callable[[Any], tuple[Any, bool]] | None = None
    report_keys: Mapping[str, tuple[Any, Rule]] = field(default_factory=dict)
    ranked: tuple[RankedQuantity, ...] = ()
    shown_axes: tuple[str, ...] = ()
    outputs: Callable[[Suite], tuple[str, ...]] = lambda suite: ("results.csv", "env.json")
    result_columns: Callable[[Suite], tuple[str, ...]] = lambda suite: ()

    def all_axes(self) -> dict[str, Axis]:
        return {"attention": ATTENTION_AXIS, **self.axes, **self.optional_axes}


@dataclass
class Suite:
    """A validated suite with one profile applied: what every kind has, and its kind's own ``settings``."""

    name: str
    path: Path
    profile: str
    description: str
    kind: SuiteKind
    axes: dict[str, list[Any]]
    config: dict[str, Any]
    attention_config: dict[str, dict[str, Any]]
    skip: list[dict[str, Any]]
    report: dict[str, Any]
    #: The kind's own settings (:attr:`SuiteKind.parse`'s object: a speed suite's timing, an accuracy suite's tasks).
    settings: Any = None

    def report_options(self) -> dict[str, Any]:
        """What the reports need to know besides the cells (stored with each run for ``attnbench report``)."""
        tables = self.report["tables"] or [self.kind.tables[0]]
        extra = self.settings.report_options() if hasattr(self.settings, "report_options") else {}
        return {**self.report, "tables": tables, **extra}

    def config_for(self, name: str) -> dict[str, Any]:
        """Config overrides of one attention: ``config``, then every matching ``attention_config`` pattern. A
        ``backend`` in ``config`` that the attention does not have is left out (its cells are unsupported:
        :meth:`backend_reason`)."""
        config = dict(self.config)
        if self.backend_reason(name):
            del config["backend"]
        return apply_patterns(config, self.attention_config, name)

    def backend_reason(self, name: str) -> str | None:
        """Why attention ``name`` cannot take the suite-wide ``config.backend`` (``--set config.backend=flex``: the
        pattern variants have a FlexAttention backend, the others no block mask to give it), or None.

        Set for every attention at once, a backend only some have is not bad input: the others' cells are
        ``unsupported``, with this reason. Set for one pattern (``attention_config``), a wrong backend stays bad input.
        """
        if "backend" not in self.config:
            return None
        try:
            attentions.make_config(name, backend=self.config["backend"])
        except (ValueError, TypeError) as exc:
            return f"unsupported by {name}: no backend {self.config['backend']!r} ({first_line(exc)})"
        return None

    def attentions(self) -> list[str]:
        """The attention axis with patterns expanded, in the order given, without repeats."""
        return expand_patterns(self.axes["attention"])

    def expand(self, device: str) -> list[Cell]:
        """Every cell of the suite (the cartesian product of the axes), skip rules and capabilities applied."""
        names = list(self.axes)
        values = [self.attentions() if n == "attention" else self.axes[n] for n in names]
        cells: dict[str, Cell] = {}  # by key: two combinations may be one cell (a clean cell under both noise modes)
        for combo in itertools.product(*values):
            cell = self.kind.make_cell(self, dict(zip(names, combo, strict=True)), device)
            if cell is not None:  # None: a combination the kind does not define (another attention's budget)
                cells.setdefault(cell.key, cell)
        return list(cells.values())

    def skip_reason(self, params: dict[str, Any]) -> str | None:
        """The reason of the first skip rule that matches ``params`` (:mod:`harness.core.skip`), or of a suite-wide
        backend the attention does not have (:meth:`backend_reason`), or None."""
        reason = skip_reason(self.skip, params)
        return reason or (self.backend_reason(params["attention"]) if "attention" in params else None)


def apply_patterns(out: dict[str, Any], by_pattern: Mapping[str, Mapping[str, Any]], name: str) -> dict[str, Any]:
    """``out`` updated with the overrides of every fnmatch pattern in ``by_pattern`` that matches ``name``."""
    for pattern, overrides in by_pattern.items():
        if fnmatch.fnmatchcase(name, pattern):
            out.update(overrides)
    return out


def attention_config(name: str, overrides: Mapping[str, Any], *, dim: int, heads: int, seq_len: int) -> dict[str, Any]:
    """The resolved config of attention ``name`` for a cell, without the shape fields the cell itself holds.

    The shape is applied so that the config's own checks (``dim`` divisible by ``heads``, ...) run now.
    """
    cfg = attentions.make_config(name, **{**overrides, "dim": dim, "heads": heads, "max_seq_len": seq_len})
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in SHAPE_FIELDS}


def axis_label(params: Mapping[str, Any]) -> str:
    """A cell's progress label from its axis values: the attention, then ``axis=value`` for the others."""
    return " ".join(f"{k}={v}" if k != "attention" else str(v) for k, v in params.items())


def measuring_modules(kind: SuiteKind) -> tuple[str, ...]:
    """The modules whose import closure is behind a number of ``kind``: those of its cell runners and its ``code``."""
    runners = (f.__module__ for f in (kind.run, kind.run_group) if f is not None)
    return tuple(sorted({*runners, *kind.code}))


def identity(suite: Suite, name: str) -> dict[str, Any]:
    """The Cell fields that say what code, how many threads and what software measure attention ``name`` in this
    suite (:mod:`harness.core.provenance`)."""
    modules = measuring_modules(suite.kind)
    return {"code": code_identity(name, modules), "threads": torch.get_num_threads(),
            "setting": software(name, modules)}


def capability_reason(name: str, seq_len: int, *, padded: bool, causal: bool = False) -> str | None:
    """Why attention ``name`` cannot run a cell of ``seq_len`` tokens (``padded``: with a padding mask; ``causal``: in
    its causal form), or None.

    The harness builds every layer for the cell's own length (``max_seq_len = seq_len``), so a fixed-length variant
    always fits; a padding mask and a length multiple are the variant's to honour.
    """
    reason = attentions.spec(name).cannot_run(seq_len, padded=padded, max_seq_len=seq_len, causal=causal)
    return None if reason is None else f"unsupported by {name}: {reason}"


def is_pattern(item: str) -> bool:
    """An fnmatch pattern or the default benchmark set (``@benchmark``), not one name."""
    return item == attentions.BENCHMARK_SET or any(c in item for c in "*?[")


def expand_patterns(items: Iterable[str]) -> list[str]:
    """Names and patterns (fnmatch, or ``@benchmark``: every variant in the registry's default benchmark set) as
    names, in the order given, each once."""
    out: list[str] = []
    for item in items:
        for name in attentions.list_attentions(item) if is_pattern(item) else [item]:
            if name not in out:
                out.append(name)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Checks of suite-file sections (each raises SuiteError naming the file, the key and the fix)


def check_keys(path: Path, where: str, doc: Mapping[str, Any], allowed: Iterable[str]) -> None:
    allowed = set(allowed)
    unknown = sorted(set(doc) - allowed, key=str)
    if unknown:
        key = f"{where}.{unknown[0]}" if where else str(unknown[0])
        raise SuiteError(path, key, f"unknown key; valid keys here: {', '.join(sorted(allowed))}")


def mapping(path: Path, key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SuiteError(path, key, f"must be a mapping, got {type(value).__name__}")
    return dict(value)


def validate_numbers(path: Path, key: str, value: Any, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping of settings over ``defaults``, each checked by the type of its default.

    A bool default makes its key true or false, an int default a non-negative integer up to :data:`MAX_COUNT` (a
    count: repeats, warm-up calls), a float default a finite positive number up to :data:`MAX_DURATION_S` (a
    duration): what ``timing`` sections hold.
    """
    rules = {k: BOOL if isinstance(d, bool) else COUNT if isinstance(d, int) else DURATION for k, d in defaults.items()}
    return validate_fields(path, key, value, defaults, rules)


def validate_fields(path: Path, key: str, value: Any, defaults: Mapping[str, Any],
                    rules: Mapping[str, Rule]) -> dict[str, Any]:
    """The mapping ``value`` over ``defaults``: every key known, every value (given or default) passing its rule."""
    out = {**defaults, **mapping(path, key, value)}
    check_keys(path, key, out, defaults)
    for k, (check, expected) in rules.items():
        if not check(out[k]):
            raise SuiteError(path, f"{key}.{k}", f"must be {expected}, got {out[k]!r}")
    return out


def validate_axes(path: Path, axes: Any, kind: SuiteKind, from_flag: Collection[str] = ()) -> dict[str, list[Any]]:
    """The axes, each a non-empty list of valid, distinct values; every attention name or pattern resolves.

    Args:
        from_flag: axes whose values the command line gave (``--set``): their errors name the flag, which is what
            the user typed, not the file.
    """
    axes = mapping(path, "axes", axes)
    valid = kind.all_axes()
    for name in ("attention", *kind.axes):
        if name not in axes:
            raise SuiteError(path, f"axes.{name}", f"missing axis; give a list of {valid[name].expected}")
    out: dict[str, list[Any]] = {}
    for name, values in axes.items():
        where, key = ("--set", str(name)) if name in from_flag else (path, f"axes.{name}")
        if name not in valid:
            raise SuiteError(where, key, f"unknown axis for a {kind.name} suite; valid axes: {', '.join(valid)}")
        values = values if isinstance(values, list) else [values]
        if not values:
            raise SuiteError(where, key, f"empty axis; give at least one of {valid[name].expected}")
        for v in values:
            if not valid[name].check(v):
                raise SuiteError(where, key, f"bad value {v!r}; expected {valid[name].expected}")
            _check_bounded(where, key, v)
        if len(set(map(str, values))) != len(values):
            raise SuiteError(where, key, f"repeated value in {values}; list each value once")
        out[name] = values
    where, key = ("--set", "attention") if "attention" in from_flag else (path, "axes.attention")
    for item in out["attention"]:
        if is_pattern(item):
            if not attentions.list_attentions(item):
                raise SuiteError(where, key, f"pattern {item!r} matches no registered attention; see `attnbench list`")
        else:
            try:
                attentions.spec(item)
            except RegistryError as exc:
                raise SuiteError(where, key, str(exc)) from None
    return out


def _check_bounded(where: Path | str, key: str, value: Any) -> None:
    """Any kind's numeric axis value is finite and at most :data:`INT_MAX` in size (a shape, a seed, an amplitude)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise SuiteError(where, key, f"bad value {value!r}; give a finite number")
    if abs(value) > INT_MAX:
        raise SuiteError(where, key, f"bad value {value!r}: too large; give at most {INT_MAX} (2**31 - 1)")


def machine_memory() -> int:
    """Bytes of physical memory on this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(where: Path | str, key: str, nbytes: float, what: str) -> None:
    """Refuse (exit 2) a setting whose data would need more than half of this machine's memory: generating it would
    run for minutes and then fail (or be killed), where one line now says which setting to shrink."""
    total = machine_memory()
    if nbytes > total / 2:
        raise SuiteError(where, key, f"{what} would need about {nbytes / 2**30:,.0f} GiB of memory, more than half of "
                                     f"this machine's {total / 2**30:,.0f} GiB; make it smaller")


def validate_attention_config(path: Path, value: Any, where: str = "attention_config") -> dict[str, dict[str, Any]]:
    value = mapping(path, where, value)
    for pattern, overrides in value.items():
        if not isinstance(overrides, dict):
            raise SuiteError(path, f"{where}.{pattern}", "must map config fields to values")
        if not attentions.list_attentions(str(pattern)):
            raise SuiteError(path, f"{where}.{pattern}", "matches no registered attention (`attnbench list`)")
    return value


def validate_tables(suite: Suite) -> None:
    """``report.tables`` names tables of the suite's kind; ``report.row_names`` maps attention names to one-line
    labels; ``report.baseline`` and ``report.compare_reference`` are registered attentions."""
    tables, valid = suite.report["tables"], suite.kind.tables
    if tables is not None and (not isinstance(tables, list) or not tables or any(t not in valid for t in tables)):
        raise SuiteError(suite.path, "report.tables", f"must be a list of {', '.join(valid)}; got {tables!r}")
    names = suite.report["row_names"]
    if names is not None and (not isinstance(names, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in names.items())):
        raise SuiteError(suite.path, "report.row_names",
                         f"must map attention names to row names, e.g. {{vanilla: Transformer}}; got {names!r}")
    for name, row in (names or {}).items():  # a newline would break a Markdown table, an escape the terminal
        if has_control(row):
            raise SuiteError(suite.path, f"report.row_names.{name}", f"{row!r} holds a control character; a row name "
                                                                     f"is one line of plain text")
    for key in ("baseline", "compare_reference"):  # the tables' ratios divide by it: a typo would show none
        if suite.report.get(key) is not None:
            name = suite.report[key]
            resolve_or_fail(suite.path, f"report.{key}", name, lambda name=name: attentions.spec(name))


def resolve_or_fail(path: Path, where: str, name: str, build: Callable[[], object]) -> None:
    """Run ``build`` (a config resolution); a registry or value error becomes a SuiteError at ``where``."""
    try:
        build()
    except RegistryError as exc:  # already names the attention
        raise SuiteError(path, where, str(exc)) from None
    except (ValueError, TypeError) as exc:
        raise SuiteError(path, where, f"{name}: {exc}") from None
