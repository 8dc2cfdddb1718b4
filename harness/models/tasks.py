"""What a Long Range Arena task is, as data: the :class:`Task` type (each task is one entry of the accuracy kind's
table, :data:`harness.kinds.accuracy.tasks.TASK_TABLE`), splits of padded token ids, token helpers.

Token conventions, the same for generated and real data:

* id 0 is padding everywhere; real tokens are >= 1, so ``x != PAD_ID`` is the attention mask.
* Bytes (Text, Retrieval) map value v -> id v + 1, vocabulary 257 (:func:`encode_documents`).
* Pixel intensities (Image, Pathfinder) map v -> id v + :data:`PIXEL_OFFSET` of the suite's ``data.pixel_ids``
  (:func:`pixels_to_tokens`), images flattened row-major: ``released`` (the default) keeps id = v, so a black pixel
  is id 0 and masked as padding, as in the released S3Attention/Nystromformer pipeline (``mask = input_ids != 0``
  over the raw intensities of its pickles), in which the paper's numbers were measured; ``shifted`` makes every
  pixel a token (id v + 1, vocabulary 257), which is what an image model would normally want.
* ListOps uses :data:`harness.kinds.accuracy.generators.LISTOPS_VOCAB` (16 ids) for generated data and the file's own
  ids for LRA pickles.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

PAD_ID = 0  # token id 0 is always padding; real tokens are >= 1
BYTE_VOCAB = 257  # ids of bytes and pixel intensities: value v -> v + 1, plus PAD_ID

#: The tasks' names, for code that may not import the accuracy kind (the approximation kind names the task a probe
#: was trained on). The accuracy kind's table has one entry for each, in this order (a test checks that they agree).
TASKS = ("listops", "text", "retrieval", "image", "pathfinder")
SPLITS = ("train", "dev", "test")
#: ``data.pixel_ids`` -> the id of intensity 0 (see the module docstring).
PIXEL_OFFSET: dict[str, int] = {"released": 0, "shifted": 1}


@dataclass
class Split:
    """One split of a task.

    Attributes:
        x0: int64 [S, N] token ids, right-padded with PAD_ID.
        y: int64 [S] labels in [0, num_classes).
        x1: int64 [S, N] second documents (Retrieval), else None.
    """

    x0: torch.Tensor
    y: torch.Tensor
    x1: torch.Tensor | None = None

    def __post_init__(self) -> None:
        rows = self.y.shape[0] if self.y.dim() == 1 else -1
        if self.x0.dim() != 2 or self.x0.shape[0] != rows or (self.x1 is not None and self.x1.shape != self.x0.shape):
            x1_shape = None if self.x1 is None else tuple(self.x1.shape)
            raise ValueError(
                f"Split needs x0 [S, N], y [S] and x1 None or [S, N]; got x0 {tuple(self.x0.shape)}, "
                f"y {tuple(self.y.shape)}, x1 {x1_shape}"
            )

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def mask0(self) -> torch.Tensor:
        """bool [S, N]: True at real tokens of x0."""
        return self.x0 != PAD_ID



@dataclass
class TaskData:
    """A task's three splits and what a model needs to know about them.

    Attributes:
        task: one of :data:`TASKS`.
        vocab_size: largest token id + 1 (PAD_ID included).
        num_classes: number of labels.
        seq_len: N, the padded length of every sequence (per document for Retrieval).
        dual: True when examples are document pairs (Retrieval).
        train, dev, test: the splits.
        source: the data source line (:mod:`harness.core.datasource`).
        pixel_offset: the id of intensity 0 in a pixel task (:data:`PIXEL_OFFSET`); 1 for the other tasks.
    """

    task: str
    vocab_size: int
    num_classes: int
    seq_len: int
    dual: bool
    train: Split
    dev: Split
    test: Split
    source: str
    pixel_offset: int = 1

    def splits(self) -> dict[str, Split]:
        """The splits by name, in :data:`SPLITS` order."""
        return {"train": self.train, "dev": self.dev, "test": self.test}


#: A generator's output turned into tokens: (raw output, seq_len, id of intensity 0) -> (x0, x1 or None, labels,
#: vocab_size).
Tokens = Callable[[tuple[Any, ...], int, int], tuple[torch.Tensor, torch.Tensor | None, Any, int]]


@dataclass(frozen=True)
class Task:
    """One task: every fact and rule the harness reads about a task, so that code reads an attribute of the entry
    instead of branching on the task's name, and a new task is one more entry of
    :data:`harness.kinds.accuracy.tasks.TASK_TABLE`.

    Attributes:
        name: the name suites, cells and file names use (``listops``).
        label: the name tables and figures print (``ListOps``).
        seq_len: LRA's sequence length, the default (per document for a dual task).
        num_classes: the number of labels, 0..num_classes - 1.
        pixels: tokens are 8-bit pixel intensities: ``data.pixel_ids`` shifts them, real files may hold no value
            above 255, the vocabulary is at least 256 ids, and pixel noise (Table 5) applies.
        dual: examples are document pairs (x0, x1), as in Retrieval.
        options: the data options (:mod:`harness.kinds.accuracy.options`) that shape its data.
        generator: the offline stand-in, ``generator(n, seed=..., **params)``; its keyword defaults are the
            parameters a suite's ``tasks.<name>.gen`` may set.
        fit: ``fit(name, seq_len, given)``: the generator parameters seq_len implies; a UserError when seq_len or a
            ``given`` parameter does not fit it.
        tokens: the generator's output as tokens (:data:`Tokens`).
        budget: ``budget(n, **params)``: a check that ``n`` examples can be drawn with ``params`` before any is
            (raises a UserError); None where any ``n`` can.
        pickle_prefix: ``pickle_prefix(options)``: the file-name prefix of its LRA processed pickles.
        read: ``read(task, root, seq_len=, seed=, offset=, options=, note=)``: its data (``task`` is the entry
            itself) from the first of its own layouts (not the pickles) found under ``root``, else None.
        layout: ``layout(seq_len, options)``: the native layouts :attr:`read` looks for, as an error message names
            them (``or aclImdb (...)``), or nothing.
    """

    name: str
    label: str
    seq_len: int
    num_classes: int
    pixels: bool
    dual: bool
    options: tuple[str, ...]
    generator: Callable[..., tuple[Any, ...]]
    fit: Callable[[str, int, Mapping[str, object]], dict[str, object]]
    tokens: Tokens
    budget: Callable[..., object] | None
    pickle_prefix: Callable[[Mapping[str, str]], str]
    read: Callable[..., TaskData | None]
    layout: Callable[[int, Mapping[str, str]], str]


# ---------------------------------------------------------------------------------------------------------------------
# Tokenisation primitives (shared by generators and loaders)

def pad_or_truncate(seqs: Sequence[Sequence[int]] | torch.Tensor, length: int) -> torch.Tensor:
    """Stack id sequences into int64 [S, length]: longer ones are cut, shorter ones right-padded with PAD_ID.

    Args:
        seqs: S sequences of ids (lists, numpy arrays, ...) or an int tensor [S, M].
        length: the output length N.

    Returns:
        int64 [S, length].
    """
    if isinstance(seqs, torch.Tensor):
        x = seqs[:, :length].long()
        return torch.nn.functional.pad(x, (0, length - x.shape[1]), value=PAD_ID)
    out = torch.full((len(seqs), length), PAD_ID, dtype=torch.int64)
    for i, seq in enumerate(seqs):
        row = torch.as_tensor(np.asarray(seq[:length], dtype=np.int64))
        out[i, : row.numel()] = row
    return out


def _byte_ids(data: bytes, length: int) -> np.ndarray:
    """The one byte -> id mapping: the first ``length`` bytes, byte b -> b + 1 (int16, so 255 + 1 fits)."""
    return np.frombuffer(data[:length], dtype=np.uint8).astype(np.int16) + 1


def encode_documents(docs: Sequence[bytes], length: int) -> torch.Tensor:
    """int64 [S, length]: each document byte-encoded (byte b -> id b + 1), truncated or padded to ``length``."""
    return pad_or_truncate([_byte_ids(doc, length) for doc in docs], length)


def pixels_to_tokens(pixels: np.ndarray, offset: int = 1) -> torch.Tensor:
    """Grayscale images [..., H, W] -> int64 tokens [..., H * W], row-major, intensity v -> id v + ``offset``.

    Non-integer intensities (e.g. after adding U(-a, a) noise) are rounded to the nearest integer (half to even)
    and clipped to 0..255 before the shift, so the vocabulary stays 256 + offset. With offset 1 PAD_ID never
    appears; with offset 0 (``pixel_ids: released``) black is PAD_ID, masked as the released pipeline masks it.
    """
    values = np.clip(np.rint(np.asarray(pixels, dtype=np.float64)), 0, 255).astype(np.int64)
    flat = values.reshape(*values.shape[:-2], -1)  # [..., H, W] -> [..., H * W]
    return torch.from_numpy(flat + offset)
