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
from ...models.tasks import PIXEL_OFFSET, PIXEL_TASKS, TaskData
from . import loaders, release
from .options import DATA_OPTIONS, options_text

RELEASE_NESTING = ("", "lra_release", "lra_release/lra_release")


def _bases(root: Path) -> list[Path]:
    return [root / sub if sub else root for sub in RELEASE_NESTING]


def _find(root: Path, marker: str, subdir: str) -> Path | None:
    """The first of ``base`` or ``base/subdir`` (``base`` each of :func:`_bases`) that holds ``marker``."""
    return next((d for base in _bases(root) for d in (base, base / subdir) if (d / marker).exists()), None)


def _option(options: Mapping[str, str], name: str) -> str:
    return str(options.get(name, DATA_OPTIONS[name].default))


def _pickle_prefix(task: str, options: Mapping[str, str]) -> str:
    if task == "pathfinder":  # the Nystromformer script writes pathfinder32-<difficulty folder>.<split>.pickle
        return f"pathfinder32-{release.PATHFINDER_DIFFICULTY[_option(options, 'pathfinder')]}"
    return loaders.PICKLE_PREFIX[task]


def _expected(task: str, prefix: str, seq_len: int, options: Mapping[str, str]) -> str:
    pickles = f"{prefix}.{{train,dev,test}}.pickle"
    native = {
        "listops": f"or {release.LISTOPS_DIR}/{{{','.join(release.LISTOPS_FILES.values())}}}",
        "image": f"or CIFAR-10 python batches ({loaders.CIFAR_TRAIN_BATCHES[0]}..5, test_batch)",
        "text": "or aclImdb (train/pos, train/neg, test/pos, test/neg)",
        "retrieval": "or AAN tsv (new_aan_pairs.{train,eval,test}.tsv)",
    }.get(task, "")
    if task == "pathfinder":
        side = next((s for s in release.PATHFINDER_RESOLUTIONS if s * s == seq_len), None)
        folder = release.PATHFINDER_DIFFICULTY[_option(options, "pathfinder")]
        native = (f"or pathfinder{side}/{folder}/metadata/*.npy with its images" if side else
                  f"or, at a seq_len of 1,024, 4,096, 16,384 (Path-X) or 65,536 (not {seq_len:,}), the release's "
                  f"pathfinderR/{folder}/metadata/*.npy with its images")
    where = " (in it, in lra_release/ or in lra_release/lra_release/)"
    return f"{pickles} {native}".strip() + where


def load_real(task: str, data_dir: str | Path, *, seq_len: int, seed: int = 0,
              options: Mapping[str, str] | None = None) -> TaskData:
    """Read a task's real data, in the first layout found under ``data_dir`` (see the module docstring).

    Args:
        task: one of :data:`harness.models.tasks.TASKS`.
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
    prefix = _pickle_prefix(task, options)
    if not root.is_dir():
        raise UserError(f"{root}: data directory not found; expected a directory with "
                        f"{_expected(task, prefix, seq_len, options)}")
    offset = PIXEL_OFFSET[_option(options, "pixel_ids")] if task in PIXEL_TASKS else 1

    def note(*names: str) -> str:  # the options that shaped what was read, for the source line
        return options_text({n: v for n, v in options.items() if n in names})

    with memory_refusal(root, _expected(task, prefix, seq_len, options)):
        return _read(task, root, prefix, seq_len, seed, offset, options, note)


def _read(task: str, root: Path, prefix: str, seq_len: int, seed: int, offset: int, options: Mapping[str, str],
          note: Callable[..., str]) -> TaskData:
    """The first layout found under ``root`` (see :func:`load_real`), every file read from under ``root``."""
    if found := _find(root, f"{prefix}.train.pickle", ""):
        return loaders.load_lra_pickles(task, found, seq_len=seq_len, prefix=prefix, offset=offset,
                                         note=note("pixel_ids", "pathfinder"), within=root)
    if task == "listops" and (found := _find(root, release.LISTOPS_FILES["train"], release.LISTOPS_DIR)):
        splits, vocab_size, files = release.read_listops(found, seq_len=seq_len, within=root,
                                                         tokens=_option(options, "listops_tokens"))
        data = loaders.task_data(task, splits, seq_len, found, files, note=note("listops_tokens"))
        return dataclasses.replace(data, vocab_size=max(data.vocab_size, vocab_size))  # the unseen token's id too
    if task == "image" and (found := _find(root, loaders.CIFAR_TRAIN_BATCHES[0], "cifar-10-batches-py")):
        return loaders.load_cifar10(found, seq_len=seq_len, offset=offset, note=note("pixel_ids"), within=root)
    if task == "text" and (found := _find(root, "train", "aclImdb")):
        return loaders.load_imdb(found, seq_len=seq_len, seed=seed, dev=_option(options, "imdb_dev"),
                                 note=note("imdb_dev"), within=root)
    if task == "retrieval" and (found := _find(root, loaders.AAN_FILES["train"], "tsv_data")):
        return loaders.load_aan(found, seq_len=seq_len, within=root)
    if task == "pathfinder" and any(s * s == seq_len for s in release.PATHFINDER_RESOLUTIONS):
        folder = release.pathfinder_folder(Path(), seq_len, _option(options, "pathfinder"))
        if found := _find(root, "metadata", str(folder)):
            splits, files, contents = release.read_pathfinder(found, seq_len=seq_len, seed=seed, offset=offset,
                                                              within=root)
            return loaders.task_data(task, splits, seq_len, found, files, contents, offset=offset,
                                     note=note("pixel_ids", "pathfinder"))
    raise UserError(f"{root}: no {task} data found; expected {_expected(task, prefix, seq_len, options)}")
