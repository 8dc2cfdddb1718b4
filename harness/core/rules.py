"""The checks a suite's fields are validated with: what one field admits (a :data:`Rule`), and the bounds that keep a
mistyped number from holding a sweep for hours or overflowing torch (re-exported by :mod:`harness.core.suite`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attentions

#: The largest integer a suite may give (an axis value, a model size, a seed): torch and numpy take shapes and seeds as
#: C integers, so a larger one overflows or asks for an impossible allocation instead of failing cleanly.
INT_MAX = 2**31 - 1

#: What one field of a suite section admits: its check, and what a valid value is (for the error message).
Rule = tuple[Callable[[Any], bool], str]


def is_positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def is_nonneg_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def is_finite_number(v: Any) -> bool:
    """A real number other than nan and ±inf (a bool is not a number here)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _is_text_or_null(v: Any) -> bool:
    return v is None or (isinstance(v, str) and v != "")


POSITIVE_INT: Rule = (lambda v: is_positive_int(v) and v <= INT_MAX, f"a positive integer (at most {INT_MAX})")
NONNEG_INT: Rule = (lambda v: is_nonneg_int(v) and v <= INT_MAX, f"a non-negative integer (at most {INT_MAX})")
# finite: nan slips through `v < 0` and inf through `v > 0`, and either makes a timing loop that never ends
POSITIVE_NUMBER: Rule = (lambda v: is_finite_number(v) and v > 0,
                         "a finite positive number (write 1.0e-2, not 1e-2, which YAML reads as text)")
#: The most a ``timing`` setting may ask of one cell (:func:`validate_numbers`): a timing budget above an hour per cell,
#: or more than ten thousand repeats or warm-up calls, is a mistake (a median and its spread are settled after a few
#: hundred samples) that would hold a sweep for hours, or overflow the timer (1.0e+300 s).
MAX_DURATION_S = 3600.0
MAX_COUNT = 10_000
DURATION: Rule = (lambda v: POSITIVE_NUMBER[0](v) and v <= MAX_DURATION_S,
                  f"a finite positive number of seconds, at most {MAX_DURATION_S:g} (write 1.0e-2, not 1e-2, which "
                  f"YAML reads as text)")
COUNT: Rule = (lambda v: is_nonneg_int(v) and v <= MAX_COUNT, f"a non-negative integer, at most {MAX_COUNT}")
BOOL: Rule = (lambda v: isinstance(v, bool), "true or false")
TEXT: Rule = (lambda v: isinstance(v, str) and v != "", "a non-empty string")
#: ``report``: the reports read these after the whole sweep, so a wrong type must fail before the first cell.
#: ``tables`` and ``row_names`` depend on the suite's kind: :func:`validate_tables` checks them.
REPORT_RULES: dict[str, Rule] = {"baseline": TEXT, "rows": (lambda v: v is None or isinstance(v, list) and all(
    isinstance(r, str) and attentions.list_attentions(r) for r in v) and v, "null or registered names or patterns")}
#: A report key naming an attention, or null (``compare_reference``).
ATTENTION_OR_NULL: Rule = (_is_text_or_null, "a registered attention's name, or null")
