"""A suite's ``skip`` rules: checked when the suite loads, so that every condition fits the axis it names, and matched
against a cell's axis values when the suite expands. A cell a rule leaves out is ``unsupported``, its message the
rule's reason after :data:`SKIPPED_BY_RULE`.

A rule is ``{when: {axis: condition, ...}, reason: text}`` and matches a cell when every condition does. A condition is
a value (equal, or an fnmatch pattern on a text axis), a comparison ``{gt|ge|lt|le: number}`` on a numeric axis, or a
list of conditions, any of which may match. A rule naming an optional axis the suite does not have matches no cell.
"""

from __future__ import annotations

import fnmatch
import operator
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import SuiteError

# How a cell a suite's `skip` rule left out begins its message (status `unsupported`): reports leave such cells out.
SKIPPED_BY_RULE = "skipped by suite rule: "

_COMPARE = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}
_SHAPE = "each rule is {when: {axis: condition, ...}, reason: text}"


def skip_reason(rules: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str | None:
    """The reason of the first rule that matches the axis values ``params``, or None."""
    for rule in rules:
        if all(axis in params and _matches(params[axis], cond) for axis, cond in rule["when"].items()):
            return f"{SKIPPED_BY_RULE}{rule['reason']}"
    return None


def _matches(value: Any, cond: Any) -> bool:
    if isinstance(cond, dict):
        return all(_COMPARE[op](value, bound) for op, bound in cond.items())
    if isinstance(cond, list):
        return any(_matches(value, c) for c in cond)
    if isinstance(value, str) and isinstance(cond, str):
        return fnmatch.fnmatchcase(value, cond)
    return value == cond


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def validate_skip(path: Path, rules: Any, valid: Collection[str],
                  axes: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """The rules, each of the shape above, naming axes of ``valid`` (the kind's), its comparisons on axes whose
    values (``axes``, the suite's) are all numbers: a number compared with text would fail in every cell."""
    rules = rules or []
    if not isinstance(rules, list):
        raise SuiteError(path, "skip", f"must be a list of rules; {_SHAPE}")
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or set(rule) != {"when", "reason"} or not isinstance(rule["when"], dict):
            raise SuiteError(path, f"skip[{i}]", _SHAPE)
        for axis, cond in rule["when"].items():
            where = f"skip[{i}].when.{axis}"
            if axis not in valid:
                raise SuiteError(path, where, f"unknown axis; valid axes: {', '.join(valid)}")
            _check_condition(path, where, cond, axes.get(axis, []))
    return rules


def _check_condition(path: Path, where: str, cond: Any, values: Sequence[Any]) -> None:
    if isinstance(cond, list):
        for c in cond:
            _check_condition(path, where, c, values)
        return
    if not isinstance(cond, dict):
        return
    if not cond or set(cond) - set(_COMPARE) or not all(_is_number(b) for b in cond.values()):
        raise SuiteError(path, where, "comparisons are {gt|ge|lt|le: number}")
    text = next((v for v in values if not _is_number(v)), None)
    if text is not None:
        raise SuiteError(path, where, f"a comparison needs a numeric axis, and this one holds {text!r}; name the "
                                      f"values to skip instead, e.g. {where.rsplit('.', 1)[-1]}: [{text}]")
