"""``run --set AXIS=...`` checked before torch is imported: an axis the suite's kind does not have is bad input (exit
2) answered at once, as an unknown flag is, instead of after the seconds it takes to import torch and the registry.

This module imports neither torch nor a suite kind. It reads the suite file's ``kind`` and that kind's axis names
from the kind's own declaration (``AXES`` and ``OPTIONAL_AXES``, dict literals of ``harness/kinds/<kind>/kind.py``)
without importing it; where either cannot be read this way, the check is left to :func:`harness.run.suitefile.
load_suite`, which makes the same one with the kind imported (:func:`unknown_axis` words both).
"""

from __future__ import annotations

import ast
import difflib
import functools
from collections.abc import Sequence
from pathlib import Path

import yaml

from ..core.errors import SuiteError

#: ``--set config.FIELD=VALUE`` sets one attention config field for every attention (as the file's ``config``).
CONFIG_PREFIX = "config."
#: The kind of a suite file without a ``kind`` key (:data:`harness.kinds.DEFAULT_KIND`, which a test keeps equal).
DEFAULT_KIND = "speed"
#: Where the kinds' packages are, one per kind, named as the kind (:mod:`harness.kinds`).
KINDS_DIR = Path(__file__).resolve().parents[1] / "kinds"


def is_config_field(key: str) -> bool:
    """Whether a ``--set`` key names an attention config field (``config.dropout``) rather than an axis."""
    return key.startswith(CONFIG_PREFIX) and len(key) > len(CONFIG_PREFIX)


def unknown_axis(axis: str, kind: str, axes: Sequence[str]) -> SuiteError:
    """The error of ``--set AXIS=...`` naming an axis that a suite of ``kind`` does not have, in the words of a suite
    file's unknown axis: its kind's own axes only (a speed suite's error listed the accuracy kind's ``task`` and
    ``noise`` as valid), and the closest one."""
    close = difflib.get_close_matches(axis, axes, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return SuiteError("--set", axis, f"unknown axis for a {kind} suite; valid axes: {', '.join(axes)} (or "
                                     f"config.FIELD for an attention config field, e.g. --set config.dropout=0.1)"
                                     f"{hint}")


@functools.cache
def declared_axes(kind: str) -> tuple[str, ...] | None:
    """The axes of suites of ``kind`` (``attention`` first, then ``AXES`` and ``OPTIONAL_AXES`` in their order), read
    from its ``kind.py`` without importing it; None where they are not dict literals of string keys there."""
    path = KINDS_DIR / kind / "kind.py"
    if not kind.isidentifier() or not path.is_file():
        return None
    found: dict[str, list[str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(
            node, "target", None)
        if not isinstance(target, ast.Name) or target.id not in ("AXES", "OPTIONAL_AXES"):
            continue
        value = getattr(node, "value", None)
        keys = value.keys if isinstance(value, ast.Dict) else []
        names = [k.value for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        if not isinstance(value, ast.Dict) or len(names) != len(keys):
            return None
        found[target.id] = names
    return ("attention", *found["AXES"], *found.get("OPTIONAL_AXES", ())) if "AXES" in found else None


def suite_kind(path: str | Path, profile: str) -> str | None:
    """The ``kind`` a suite file gives (a profile may set it), the default kind without one; None where the file
    cannot be read as a mapping here (the loader then says what is wrong)."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    chosen = doc.get("profiles", {}).get(profile) if isinstance(doc.get("profiles"), dict) else None
    kind = chosen.get("kind") if isinstance(chosen, dict) and "kind" in chosen else doc.get("kind", DEFAULT_KIND)
    return kind if isinstance(kind, str) else None


def check_set_axes(path: str | Path, profile: str, items: Sequence[str]) -> None:
    """Refuse (exit 2) a ``--set`` item naming an axis that the suite's kind does not have, without torch."""
    kind = suite_kind(path, profile)
    axes = declared_axes(kind) if kind is not None else None
    if axes is None:
        return
    for item in items:
        axis = item.partition("=")[0]
        if axis and not is_config_field(axis) and axis not in axes:
            raise unknown_axis(axis, kind, axes)
