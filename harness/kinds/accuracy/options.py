"""How a task's data becomes tokens and splits: the options of an accuracy suite's ``data:`` that choose between LRA's
own preprocessing, the released S3Attention pipeline's (the PyTorch LRA code of Nystromformer, whose pickles it
reads) and the alternatives a user may want. Each applies to the tasks that list it (:attr:`Task.options
<harness.models.tasks.Task.options>`); the real-data ones only with ``data.dir``.
A cell stores the options of its task (they are part of its key), and a real task's data source line names them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...models.tasks import PIXEL_OFFSET, Task


@dataclass(frozen=True)
class DataOption:
    """One option: its default, each choice with what it means, and whether it applies to real data only."""

    default: str
    choices: dict[str, str]
    real_only: bool


DATA_OPTIONS: dict[str, DataOption] = {
    "pixel_ids": DataOption("released", {
        "released": "id = intensity, so a black pixel is id 0 and masked as padding, as the released "
                    "S3Attention/Nystromformer pipeline (mask = input_ids != 0) in which the paper's numbers were "
                    "measured",
        "shifted": "id = intensity + 1: every pixel is a token, black included",
    }, False),
    "listops_tokens": DataOption("lra", {
        "lra": "LRA's tokenizer (tfds Tokenizer: runs of alphanumeric characters), as every published LRA result: "
               "'[MAX' is MAX, and ']', '(' and ')' are dropped",
        "symbols": "every whitespace-separated symbol is a token, brackets and parentheses included",
    }, True),
    "imdb_dev": DataOption("test", {
        "test": "aclImdb's dev split is its test set, as LRA's pipeline and the released pickles have it (the "
                "best-dev checkpoint is then chosen on the test set, as there)",
        "heldout": "dev is a seeded 10% of train (data.seed), disjoint from the test set",
    }, True),
    "pathfinder": DataOption("hard", {
        "easy": "curv_baseline", "intermediate": "curv_contour_length_9",
        "hard": "curv_contour_length_14, LRA's Pathfinder and Path-X",
    }, True),
}


def check_options(data: Mapping[str, Any]) -> tuple[str, str] | None:
    """(key, problem) of the first option in ``data`` whose value is not one of its choices, else None."""
    for name, option in DATA_OPTIONS.items():
        if name in data and data[name] not in option.choices:
            choices = "; ".join(f"{c}: {meaning}" for c, meaning in option.choices.items())
            return name, f"must be one of {', '.join(option.choices)}, got {data[name]!r} ({choices})"
    return None


def task_options(task: Task, real: bool, data: Mapping[str, Any]) -> dict[str, str]:
    """The options that apply to ``task`` (with real data or generated), as ``data`` sets them or by default."""
    return {name: str(data.get(name, option.default)) for name, option in DATA_OPTIONS.items()
            if name in task.options and (real or not option.real_only)}


def option(options: Mapping[str, str], name: str) -> str:
    """Option ``name`` as ``options`` sets it, else its default."""
    return str(options.get(name, DATA_OPTIONS[name].default))


def pixel_offset(task: Task, options: Mapping[str, str]) -> int:
    """The id of intensity 0 in ``task``'s tokens under ``options`` (``data.pixel_ids``); 1 where they are no
    pixels (the id after padding)."""
    return PIXEL_OFFSET[option(options, "pixel_ids")] if task.pixels else 1


def options_text(options: Mapping[str, str]) -> str:
    """``"; options: a=x, b=y"`` for a data source line, or nothing."""
    return "; options: " + ", ".join(f"{k}={v}" for k, v in sorted(options.items())) if options else ""
