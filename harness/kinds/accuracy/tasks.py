"""The table of tasks: each task the accuracy kind runs is one :class:`~harness.models.tasks.Task` entry of
:data:`TASK_TABLE`, holding everything the harness decides by task (LRA's sequence length and classes, whether its
tokens are pixels or its examples pairs, its data options, its offline generator and how that fits a sequence length
and becomes tokens, its real data's pickles and own layouts). Code reads the entry's attributes instead of branching
on a task's name, so a new task (say MQAR) is one more entry here.

The order of the table is the paper's column order (ListOps, Text, Retrieval, Image, Pathfinder): tables, figures and
the suite's axis list tasks in it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ...core.errors import UserError
from ...models.tasks import BYTE_VOCAB, Task, encode_documents, pad_or_truncate, pixels_to_tokens
from . import generators, loaders, pixels, real, release

# ---------------------------------------------------------------------------------------------------------------------
# How a generator fits a sequence length (:attr:`Task.fit`): the parameters seq_len implies, and a UserError where
# seq_len, or a parameter the user gives, does not fit.


def _expression_fit(name: str, seq_len: int, given: Mapping[str, object]) -> dict[str, object]:
    """Expressions of at most seq_len tokens and more than a quarter of it (LRA: 500 < length < 2000 at N = 2000)."""
    implied: dict[str, object] = {"max_length": seq_len, "min_length": seq_len // 4}
    params = {**implied, **given}
    if int(params["max_length"]) > seq_len + 1:
        raise UserError(f"{name}: max_length {params['max_length']} exceeds seq_len + 1 = {seq_len + 1}")
    return implied


def _document_fit(name: str, seq_len: int, given: Mapping[str, object]) -> dict[str, object]:
    """Documents of at most seq_len bytes (each one of a pair, too)."""
    implied: dict[str, object] = {"length": seq_len}
    length = {**implied, **given}["length"]
    if int(length) > seq_len:
        raise UserError(f"{name}: length {length} exceeds seq_len {seq_len}")
    return implied


def _image_fit(name: str, seq_len: int, given: Mapping[str, object]) -> dict[str, object]:
    """Square images of seq_len pixels."""
    side = math.isqrt(seq_len)
    if side * side != seq_len:
        raise UserError(f"{name}: seq_len {seq_len} is not a square image (side * side); use e.g. 1024 for 32x32")
    size = {"size": side, **given}["size"]
    if int(size) ** 2 != seq_len:
        raise UserError(f"{name}: size {size} does not give seq_len {seq_len} (size * size)")
    return {"size": side}


# ---------------------------------------------------------------------------------------------------------------------
# A generator's output as tokens (:data:`harness.models.tasks.Tokens`): (x0, x1 or None, labels, vocab_size).

_TokenRows = tuple[torch.Tensor, torch.Tensor | None, Any, int]


def _expression_tokens(raw: tuple[Any, ...], seq_len: int, offset: int) -> _TokenRows:
    seqs, y = raw
    return pad_or_truncate(seqs, seq_len), None, y, len(generators.LISTOPS_TOKENS)


def _document_tokens(raw: tuple[Any, ...], seq_len: int, offset: int) -> _TokenRows:
    docs, y = raw
    return encode_documents(docs, seq_len), None, y, BYTE_VOCAB


def _pair_tokens(raw: tuple[Any, ...], seq_len: int, offset: int) -> _TokenRows:
    first, second, y = raw
    return encode_documents(first, seq_len), encode_documents(second, seq_len), y, BYTE_VOCAB


def _pixel_tokens(raw: tuple[Any, ...], seq_len: int, offset: int) -> _TokenRows:
    images, y = raw
    return pixels_to_tokens(images, offset), None, y, BYTE_VOCAB - 1 + offset


@dataclass(frozen=True)
class Constant:
    """A hook that answers ``value`` whatever it is asked: a pickle prefix or layout that no option or length changes
    (a class, not a lambda, so that an entry prints and pickles)."""

    value: str

    def __call__(self, *_: object) -> str:
        return self.value


# ---------------------------------------------------------------------------------------------------------------------
# The table

LISTOPS = Task(
    name="listops", label="ListOps", seq_len=2000, num_classes=10, pixels=False, dual=False,
    options=("listops_tokens",), generator=generators.generate_listops, fit=_expression_fit,
    tokens=_expression_tokens, budget=generators.check_listops, pickle_prefix=Constant("listops"),
    read=real.find_listops, layout=Constant(f"or {release.LISTOPS_DIR}/{{{','.join(release.LISTOPS_FILES.values())}}}"),
)
TEXT = Task(
    name="text", label="Text", seq_len=4000, num_classes=2, pixels=False, dual=False,
    options=("imdb_dev",), generator=generators.generate_text, fit=_document_fit,
    tokens=_document_tokens, budget=None, pickle_prefix=Constant("text"),
    read=real.find_imdb, layout=Constant("or aclImdb (train/pos, train/neg, test/pos, test/neg)"),
)
RETRIEVAL = Task(
    name="retrieval", label="Retrieval", seq_len=4000, num_classes=2, pixels=False, dual=True,
    options=(), generator=generators.generate_retrieval, fit=_document_fit,
    tokens=_pair_tokens, budget=None, pickle_prefix=Constant("retrieval"),
    read=real.find_aan, layout=Constant("or AAN tsv (new_aan_pairs.{train,eval,test}.tsv)"),
)
IMAGE = Task(
    name="image", label="Image", seq_len=1024, num_classes=loaders.CIFAR_CLASSES, pixels=True, dual=False,
    options=("pixel_ids",), generator=pixels.generate_images, fit=_image_fit,
    tokens=_pixel_tokens, budget=None, pickle_prefix=Constant("image"),
    read=real.find_cifar10,
    layout=Constant(f"or CIFAR-10 python batches ({loaders.CIFAR_TRAIN_BATCHES[0]}..5, test_batch)"),
)
PATHFINDER = Task(
    name="pathfinder", label="Pathfinder", seq_len=1024, num_classes=2, pixels=True, dual=False,
    options=("pixel_ids", "pathfinder"), generator=pixels.generate_pathfinder, fit=_image_fit,
    tokens=_pixel_tokens, budget=None, pickle_prefix=real.pathfinder_prefix,
    read=real.find_pathfinder, layout=real.pathfinder_layout,
)

#: Every task by name, in the paper's column order.
TASK_TABLE: dict[str, Task] = {task.name: task for task in (LISTOPS, TEXT, RETRIEVAL, IMAGE, PATHFINDER)}
#: The tasks' names in the table's order (a tuple: membership of any value, hashable or not, is a plain test).
TASK_NAMES = tuple(TASK_TABLE)


def task_named(name: str) -> Task:
    """The entry of task ``name``; a UserError naming the closest task and every valid one for any other name."""
    if name not in TASK_NAMES:
        close = difflib.get_close_matches(str(name), TASK_NAMES, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"unknown task {name!r}{hint}; valid tasks: {', '.join(TASK_NAMES)}")
    return TASK_TABLE[name]
