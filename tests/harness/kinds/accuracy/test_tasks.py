"""The table of tasks (harness.kinds.accuracy.tasks): each entry consistent with itself, and no branch on a task's
name anywhere else in the accuracy kind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from harness.core.errors import UserError
from harness.kinds.accuracy.data import resolve_gen_params
from harness.kinds.accuracy.options import DATA_OPTIONS, pixel_offset, task_options
from harness.kinds.accuracy.tasks import TASK_NAMES, TASK_TABLE, task_named
from harness.models.tasks import TASKS, Task
from tests.conftest import REPO_ROOT

ENTRIES = [pytest.param(task, id=name) for name, task in TASK_TABLE.items()]
N = 6  # examples drawn per entry: a few, at LRA's length, take well under a second each


@pytest.mark.parametrize("task", ENTRIES)
def test_an_entry_generates_what_it_declares(task: Task) -> None:
    """The generator, fitted to the entry's own length, gives N sequences of that length (pairs where the entry is
    dual), token ids within the vocabulary it reports and labels among its classes."""
    params = resolve_gen_params(task.name, task.seq_len, {})
    if task.budget is not None:
        task.budget(N, **params)
    offset = pixel_offset(task, task_options(task, False, {}))
    x0, x1, y, vocab_size = task.tokens(task.generator(N, seed=0, **params), task.seq_len, offset)
    y = torch.as_tensor(y)
    assert x0.shape == (N, task.seq_len) and x0.dtype == torch.int64
    assert (x1 is not None) == task.dual
    for x in (x0, x1) if x1 is not None else (x0,):
        assert x.shape == (N, task.seq_len) and 0 <= int(x.min()) and int(x.max()) < vocab_size
    assert y.shape == (N,) and 0 <= int(y.min()) and int(y.max()) < task.num_classes
    assert vocab_size >= (256 if task.pixels else 2)


@pytest.mark.parametrize("task", ENTRIES)
def test_an_entry_describes_its_real_data(tmp_path: Path, task: Task) -> None:
    """Its pickles have a prefix, its own layouts a reader (which finds nothing in an empty folder) and a text for
    error messages; its data options exist, pixel ids among them exactly where its tokens are pixels."""
    assert task.pickle_prefix({}) and isinstance(task.layout(task.seq_len, {}), str)
    found = task.read(task, tmp_path, seq_len=task.seq_len, seed=0, offset=1, options={}, note=lambda *_: "")
    assert found is None
    assert set(task.options) <= set(DATA_OPTIONS)
    assert ("pixel_ids" in task.options) == task.pixels


def test_the_table_is_keyed_by_name_in_the_order_kind_free_code_uses() -> None:
    assert all(name == task.name for name, task in TASK_TABLE.items())
    assert TASK_NAMES == TASKS  # harness.models.tasks.TASKS: the names for code outside the accuracy kind
    assert len({task.label for task in TASK_TABLE.values()}) == len(TASK_TABLE)
    assert len({task.pickle_prefix({}) for task in TASK_TABLE.values()}) == len(TASK_TABLE)


def test_an_unknown_task_names_the_valid_ones() -> None:
    assert task_named("text") is TASK_TABLE["text"]
    with pytest.raises(UserError, match=r"^unknown task 'listop' \(did you mean listops\?\); valid tasks: listops, "
                                        r"text, retrieval, image, pathfinder$"):
        task_named("listop")


# ---------------------------------------------------------------------------------------------------------------------
# No branch on a task's name: each task is one entry of the table, so a comparison of a task with a name is a second
# declaration of what the entry says.

#: A literal task name: one of the table's, or any text compared with a variable named ``task``.
_NAMES = "|".join(TASK_NAMES)
BRANCH = re.compile(
    rf"""[!=]=\s*["']({_NAMES})["']"""  # x == "listops"
    rf"""|["']({_NAMES})["']\s*(?:[!=]=|(?:not\s+)?in\b)"""  # "image" in columns
    rf"""|\bin\s*[(\[{{]\s*["']({_NAMES})["']"""  # task in ("text", "retrieval")
    rf"""|\bcase\s+["']({_NAMES})["']"""  # match task: case "listops"
    r"""|\btask(\.name)?\s*(?:[!=]=|(?:not\s+)?in\s*[(\[{])\s*["']"""  # task == "mqar"
)
#: Modules that may name a task in a comparison, with why. harness.kinds.accuracy.tasks declares the entries; the
#: figure modules (plots, study_figures, incoherence_report) have no such branch either.
ALLOWED: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    folders = (REPO_ROOT / "harness" / "kinds" / "accuracy", REPO_ROOT / "harness" / "models")
    return {f"{p.parent.name}/{p.name}": p for folder in folders for p in sorted(folder.glob("*.py"))}


def _branches(text: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1) if BRANCH.search(line)]


def test_the_branch_finder_finds_branches() -> None:
    planted = ('if task == "listops":\n', 'if task in ("text", "retrieval"):\n', 'if "image" in wide.columns:\n',
               "x = 'pathfinder' != name\n", 'if task.name == "mqar":\n', '    case "text":\n')
    assert _branches("".join(planted)) == [1, 2, 3, 4, 5, 6]
    assert not _branches('load_task("text", data_dir=None)\nif task.pixels:\nname="listops", label="ListOps"\n')


def test_no_module_branches_on_a_task_name() -> None:
    offenders = [f"{name}:{line}" for name, path in _modules().items() if name not in ALLOWED
                 for line in _branches(path.read_text(encoding="utf-8"))]
    assert not offenders, f"branches on a task's name (read an attribute of its TASK_TABLE entry) at {offenders}"
