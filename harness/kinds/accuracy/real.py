"""Finding a task's real data in the directory the user gives, in any of the layouts the readers know.

``data.dir`` may be the extracted LRA release (``lra_release/``, or the folder holding it: the archive unpacks to
``lra_release/lra_release/``, the path LRA's and the Nystromformer scripts use), with CIFAR-10
(``cifar-10-batches-py/``) and aclImdb (``aclImdb/``) beside it (the release does not ship them: LRA reads them
through tfds), or a folder holding the processed pickles of the PyTorch LRA codebases.
For each task the first layout found is read:

========== ===================================================================================================
listops    ``listops.{train,dev,test}.pickle``; ``listops-1000/basic_{train,val,test}.tsv``
text       ``text.*.pickle``; ``aclImdb/{train,test}/{pos,neg}/*.txt``
retrieval  ``retrieval.*.pickle``; ``tsv_data/new_aan_pairs.{train,eval,test}.tsv``
image      ``image.*.pickle``; ``cifar-10-batches-py/data_batch_1..5, test_batch``
pathfinder ``pathfinder32-<difficulty>.*.pickle``; ``pathfinderR/<difficulty>/{metadata,imgs}`` (R from seq_len)
========== ===================================================================================================

Each layout is looked for in the directory itself, in ``lra_release/`` and in ``lra_release/lra_release/`` under
it, and a layout's own folder (``listops-1000``, ``aclImdb``, ...) may be the directory given.

Nothing outside the directory given is read: every reader gets it as ``within``, and a file whose real path lies
elsewhere (a symlink, a Pathfinder metadata line naming ``../../etc/passwd``) is an error naming it
(:func:`~harness.core.datafiles.open_data_file`); running out of memory while reading is one too
(:func:`~harness.core.datafiles.memory_refusal`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from ...core.datafiles import memory_refusal
from ...core.errors import UserError
from ...models.tasks import Task, TaskData
from . import loaders, release
from .options import option, options_text, pixel_offset

RELEASE_NESTING = ("", "lra_release", "lra_release/lra_release")


def _bases(root: Path) -> list[Path]:
    return [root / sub if sub else root for sub in RELEASE_NESTING]


def _find(root: Path, marker: str, subdir: str) -> Path | None:
    """The first of ``base`` or ``base/subdir`` (``base`` each of :func:`_bases`) that holds ``marker``."""
    return next((d for base in _bases(root) for d in (base, base / subdir) if (d / marker).exists()), None)


def _expected(task: Task, prefix: str, seq_len: int, options: Mapping[str, str]) -> str:
    pickles = f"{prefix}.{{train,dev,test}}.pickle"
    where = " (in it, in lra_release/ or in lra_release/lra_release/)"
    return f"{pickles} {task.layout(seq_len, options)}".strip() + where


def load_real(task: Task, data_dir: str | Path, *, seq_len: int, seed: int = 0,
              options: Mapping[str, str] | None = None) -> TaskData:
    """Read a task's real data, in the first layout found under ``data_dir`` (see the module docstring).

    Args:
        task: the task (its pickles' prefix and its own layouts: :class:`~harness.models.tasks.Task`).
        data_dir: the directory.
        seq_len: every sequence is truncated or padded to this length (per document for Retrieval); Pathfinder's
            resolution is the one whose square it is.
        seed: seed of aclImdb's held-out dev split and of Pathfinder's split.
        options: the task's data options (:mod:`harness.kinds.accuracy.options`); their defaults where absent.

    Raises:
        UserError: the directory, a split file, or a record is missing or malformed; a file lies outside
            ``data_dir`` or is no regular file; the data does not fit in memory.
    """
    options = dict(options or {})
    root = Path(data_dir)
    prefix = task.pickle_prefix(options)
    if not root.is_dir():
        raise UserError(f"{root}: data directory not found; expected a directory with "
                        f"{_expected(task, prefix, seq_len, options)}")
    offset = pixel_offset(task, options)

    def note(*names: str) -> str:  # the options that shaped what was read, for the source line
        return options_text({n: v for n, v in options.items() if n in names})

    with memory_refusal(root, _expected(task, prefix, seq_len, options)):
        return _read(task, root, prefix, seq_len, seed, offset, options, note)


def _read(task: Task, root: Path, prefix: str, seq_len: int, seed: int, offset: int, options: Mapping[str, str],
          note: Callable[..., str]) -> TaskData:
    """The first layout found under ``root`` (see :func:`load_real`), every file read from under ``root``."""
    if found := _find(root, f"{prefix}.train.pickle", ""):
        return loaders.load_lra_pickles(task, found, seq_len=seq_len, prefix=prefix, offset=offset,
                                         note=note("pixel_ids", "pathfinder"), within=root)
    data = task.read(task, root, seq_len=seq_len, seed=seed, offset=offset, options=options, note=note)
    if data is None:
        raise UserError(f"{root}: no {task.name} data found; expected {_expected(task, prefix, seq_len, options)}")
    return data


# ---------------------------------------------------------------------------------------------------------------------
# Each task's own layouts (:attr:`Task.read <harness.models.tasks.Task.read>`): its data from the first found under
# ``root``, else None.


def find_listops(task: Task, root: Path, *, seq_len: int, seed: int, offset: int, options: Mapping[str, str],
                 note: Callable[..., str]) -> TaskData | None:
    """ListOps from the release's ``listops-1000`` tsv files."""
    if not (found := _find(root, release.LISTOPS_FILES["train"], release.LISTOPS_DIR)):
        return None
    splits, vocab_size, files = release.read_listops(task, found, seq_len=seq_len, within=root,
                                                     tokens=option(options, "listops_tokens"))
    data = loaders.task_data(task, splits, seq_len, found, files, note=note("listops_tokens"))
    return dataclasses.replace(data, vocab_size=max(data.vocab_size, vocab_size))  # the unseen token's id too


def find_cifar10(task: Task, root: Path, *, seq_len: int, seed: int, offset: int, options: Mapping[str, str],
                 note: Callable[..., str]) -> TaskData | None:
    """Image from CIFAR-10's python batches."""
    if not (found := _find(root, loaders.CIFAR_TRAIN_BATCHES[0], "cifar-10-batches-py")):
        return None
    return loaders.load_cifar10(task, found, seq_len=seq_len, offset=offset, note=note("pixel_ids"), within=root)


def find_imdb(task: Task, root: Path, *, seq_len: int, seed: int, offset: int, options: Mapping[str, str],
              note: Callable[..., str]) -> TaskData | None:
    """Text from aclImdb."""
    if not (found := _find(root, "train", "aclImdb")):
        return None
    return loaders.load_imdb(task, found, seq_len=seq_len, seed=seed, dev=option(options, "imdb_dev"),
                             note=note("imdb_dev"), within=root)


def find_aan(task: Task, root: Path, *, seq_len: int, seed: int, offset: int, options: Mapping[str, str],
             note: Callable[..., str]) -> TaskData | None:
    """Retrieval from LRA's AAN tsv files."""
    if not (found := _find(root, loaders.AAN_FILES["train"], "tsv_data")):
        return None
    return loaders.load_aan(task, found, seq_len=seq_len, within=root)


def find_pathfinder(task: Task, root: Path, *, seq_len: int, seed: int, offset: int, options: Mapping[str, str],
                    note: Callable[..., str]) -> TaskData | None:
    """Pathfinder from the release's ``pathfinderR/<difficulty>`` folder of the resolution R of ``seq_len``."""
    if not any(s * s == seq_len for s in release.PATHFINDER_RESOLUTIONS):
        return None
    folder = release.pathfinder_folder(Path(), seq_len, option(options, "pathfinder"))
    if not (found := _find(root, "metadata", str(folder))):
        return None
    splits, files, contents = release.read_pathfinder(task, found, seq_len=seq_len, seed=seed, offset=offset,
                                                      within=root)
    return loaders.task_data(task, splits, seq_len, found, files, contents, offset=offset,
                             note=note("pixel_ids", "pathfinder"))


def pathfinder_prefix(options: Mapping[str, str]) -> str:
    """Pathfinder's pickles: the Nystromformer script writes ``pathfinder32-<difficulty folder>.<split>.pickle``."""
    return f"pathfinder32-{release.PATHFINDER_DIFFICULTY[option(options, 'pathfinder')]}"


def pathfinder_layout(seq_len: int, options: Mapping[str, str]) -> str:
    """Pathfinder's own layout as an error message names it: the folder of ``seq_len``'s resolution, if any."""
    side = next((s for s in release.PATHFINDER_RESOLUTIONS if s * s == seq_len), None)
    folder = release.PATHFINDER_DIFFICULTY[option(options, "pathfinder")]
    return (f"or pathfinder{side}/{folder}/metadata/*.npy with its images" if side else
            f"or, at a seq_len of 1,024, 4,096, 16,384 (Path-X) or 65,536 (not {seq_len:,}), the release's "
            f"pathfinderR/{folder}/metadata/*.npy with its images")
