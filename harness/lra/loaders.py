"""Readers of the real Long Range Arena data the user already has (nothing is ever downloaded).

:func:`load_real` recognises the format by the files in the directory:

* **LRA processed pickles** of the PyTorch LRA codebases (mlpen/Nystromformer ``LRA/datasets/*.py``, reused by
  xformers and others): ``{prefix}.{train,dev,test}.pickle``, each a list of dicts with ``input_ids_0`` (int
  array), ``input_ids_1`` (Retrieval) and ``label``; prefixes in :data:`PICKLE_PREFIX`. Id assumption: those
  scripts dump the ids of LRA's tfds encoders (ListOps ``TokenTextEncoder``, Text/Retrieval byte encoder), which
  reserve 0 for padding and were padded with zeros, so ListOps/Text/Retrieval ids are kept as they are. The Image
  and Pathfinder pickles instead hold raw intensities 0..255 (``normalize=False`` CIFAR, decoded Pathfinder PNGs),
  where 0 is black, not padding; they are shifted by +1 like every pixel here (vocabulary 257).
* **CIFAR-10 python batches** (``data_batch_1..5``, ``test_batch``; also under ``cifar-10-batches-py/``): converted
  to grayscale as LRA does (0.2989 R + 0.5870 G + 0.1140 B, rounded); dev = the last 10% of the training images,
  as LRA's ``train[90%:]``.
* **aclImdb** (``train/{pos,neg}/*.txt``, ``test/{pos,neg}/*.txt``; also under ``aclImdb/``): byte-level, label
  pos = 1; dev = a seeded random 10% of train (the rest stays train), files read in sorted order.
* **AAN tsv** of LRA Retrieval (``new_aan_pairs.{train,eval,test}.tsv``; also under ``tsv_data/``): tab-separated
  label, id1, id2, text1, text2; byte-level pairs; ``eval`` is the dev split.

Every missing or malformed file raises :class:`~harness.errors.UserError` naming the file, the problem and the
expected format. Pickles are trusted input: only load files you made or got from a source you trust.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import UserError, first_line
from .tasks import (
    BYTE_VOCAB,
    NUM_CLASSES,
    PIXEL_TASKS,
    SPLITS,
    Split,
    TaskData,
    encode_documents,
    pad_or_truncate,
    pixels_to_tokens,
)

#: File-name prefix of each task's LRA pickles.
PICKLE_PREFIX: dict[str, str] = {
    "listops": "listops",
    "text": "text",
    "retrieval": "retrieval",
    "image": "image",
    "pathfinder": "pathfinder32-curv_contour_length_14",
}
CIFAR_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
AAN_FILES: dict[str, str] = {
    "train": "new_aan_pairs.train.tsv",
    "dev": "new_aan_pairs.eval.tsv",
    "test": "new_aan_pairs.test.tsv",
}
DEV_FRACTION = 0.1  # CIFAR-10 and IMDB dev splits, carved from train

PICKLE_FORMAT = "an LRA processed pickle: a list of dicts with 'input_ids_0' (int array), 'label' (int)"
CIFAR_FORMAT = "a CIFAR-10 python batch: a pickled dict with b'data' (uint8 [N, 3072], RGB planes) and b'labels'"
IMDB_FORMAT = "the aclImdb layout: train/pos, train/neg, test/pos, test/neg with one review per *.txt file"
AAN_FORMAT = "an LRA AAN tsv: 5 tab-separated columns label, id1, id2, text1, text2"


def _unpickle(path: Path, expected: str, **kwargs: Any) -> Any:
    if not path.is_file():
        raise UserError(f"{path}: file not found; expected {expected}")
    try:
        with open(path, "rb") as f:
            return pickle.load(f, **kwargs)
    except Exception as exc:
        problem = first_line(exc) or type(exc).__name__
        raise UserError(f"{path}: cannot be unpickled ({problem}); expected {expected}") from None


def _ids(path: Path, i: int, record: dict[Any, Any], key: str, expected: str) -> np.ndarray:
    if key not in record:
        raise UserError(f"{path}: record {i} has no {key!r}; expected {expected}")
    ids = np.asarray(record[key]).reshape(-1)
    if ids.dtype.kind not in "iu" or (ids.size and ids.min() < 0):
        raise UserError(f"{path}: record {i} {key!r} is not an array of non-negative ints; expected {expected}")
    return ids


def _label(path: Path, i: int, record: dict[Any, Any], expected: str) -> int:
    if "label" not in record:
        raise UserError(f"{path}: record {i} has no 'label'; expected {expected}")
    try:
        label = int(np.asarray(record["label"]).reshape(-1)[0])
    except (TypeError, ValueError, IndexError):
        raise UserError(f"{path}: record {i} 'label' {record['label']!r} is not an int; expected {expected}") from None
    if label < 0:
        raise UserError(f"{path}: record {i} 'label' {label} is negative; expected {expected}")
    return label


def _read_pickle_split(path: Path, task: str, seq_len: int) -> Split:
    dual = task == "retrieval"
    expected = PICKLE_FORMAT + (" and 'input_ids_1'" if dual else "")
    records = _unpickle(path, expected)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise UserError(f"{path}: not a list of dicts; expected {expected}")
    # Pixel pickles hold intensities 0..255 where 0 is black: shift them like every pixel (see module docstring).
    shift = 1 if task in PIXEL_TASKS else 0
    x0 = [_ids(path, i, r, "input_ids_0", expected) + shift for i, r in enumerate(records)]
    x1 = [_ids(path, i, r, "input_ids_1", expected) + shift for i, r in enumerate(records)] if dual else None
    y = torch.tensor([_label(path, i, r, expected) for i, r in enumerate(records)], dtype=torch.int64)
    return Split(x0=pad_or_truncate(x0, seq_len), y=y, x1=None if x1 is None else pad_or_truncate(x1, seq_len))


def _task_data(task: str, splits: dict[str, Split], seq_len: int, source: Path) -> TaskData:
    """TaskData of real splits: vocab_size = max id + 1 (at least 257 for pixels), classes at least LRA's."""
    max_id = max(int(t.max()) if t.numel() else 0 for s in splits.values() for t in (s.x0, s.x1) if t is not None)
    max_label = max(int(s.y.max()) if len(s) else 0 for s in splits.values())
    vocab_size = max(max_id + 1, BYTE_VOCAB if task in PIXEL_TASKS else 0)
    return TaskData(task=task, vocab_size=vocab_size, num_classes=max(NUM_CLASSES[task], max_label + 1),
                    seq_len=seq_len, dual=splits["train"].x1 is not None, source=str(source), **splits)


def load_lra_pickles(task: str, data_dir: str | Path, *, seq_len: int) -> TaskData:
    """The ``{prefix}.{train,dev,test}.pickle`` files of one task (see :data:`PICKLE_PREFIX`)."""
    root = Path(data_dir)
    splits = {name: _read_pickle_split(root / f"{PICKLE_PREFIX[task]}.{name}.pickle", task, seq_len)
              for name in SPLITS}
    return _task_data(task, splits, seq_len, root)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch: grayscale uint8 [N, 32, 32] and int64 labels [N]."""
    batch = _unpickle(path, CIFAR_FORMAT, encoding="bytes")  # the batches are Python 2 pickles with bytes keys
    if not isinstance(batch, dict):
        raise UserError(f"{path}: not a dict; expected {CIFAR_FORMAT}")
    for key in (b"data", b"labels"):
        if key not in batch:
            raise UserError(f"{path}: no {key!r} entry; expected {CIFAR_FORMAT}")
    data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"], dtype=np.int64).reshape(-1)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
        raise UserError(f"{path}: b'data' is {data.dtype} {data.shape} with {len(labels)} labels; "
                        f"expected {CIFAR_FORMAT}")
    rgb = data.reshape(-1, 3, 32, 32).astype(np.float64)  # [N, 3072] -> [N, channel, row, col]
    gray = 0.2989 * rgb[:, 0] + 0.5870 * rgb[:, 1] + 0.1140 * rgb[:, 2]  # LRA's tf.image.rgb_to_grayscale weights
    return np.clip(np.rint(gray), 0, 255).astype(np.uint8), labels


def read_cifar10(data_dir: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Grayscale CIFAR-10 by split: uint8 [S, 32, 32] and int64 labels [S] (dev = last 10% of train).

    The raw pixels are exposed so that the noise-robustness suite can perturb intensities before
    :func:`harness.lra.tasks.pixels_to_tokens`.
    """
    root = Path(data_dir)
    parts = [_read_cifar_batch(root / name) for name in CIFAR_TRAIN_BATCHES]
    pixels = np.concatenate([p for p, _ in parts])
    labels = np.concatenate([y for _, y in parts])
    n_train = len(pixels) - round(DEV_FRACTION * len(pixels))
    return {
        "train": (pixels[:n_train], labels[:n_train]),
        "dev": (pixels[n_train:], labels[n_train:]),
        "test": _read_cifar_batch(root / "test_batch"),
    }


def load_cifar10(data_dir: str | Path, *, seq_len: int) -> TaskData:
    """The Image task from CIFAR-10 python batches: 1024 grayscale pixel tokens per image."""
    splits = {name: Split(x0=pad_or_truncate(pixels_to_tokens(pixels), seq_len), y=torch.from_numpy(labels))
              for name, (pixels, labels) in read_cifar10(data_dir).items()}
    return _task_data("image", splits, seq_len, Path(data_dir))


def load_imdb(data_dir: str | Path, *, seq_len: int, seed: int) -> TaskData:
    """The Text task from aclImdb: byte-level reviews, pos = 1; dev = a seeded 10% of train."""
    root = Path(data_dir)
    docs: dict[str, list[bytes]] = {}
    labels: dict[str, list[int]] = {}
    for part in ("train", "test"):
        docs[part], labels[part] = [], []
        for name, label in (("neg", 0), ("pos", 1)):
            folder = root / part / name
            if not folder.is_dir():
                raise UserError(f"{folder}: directory not found; expected {IMDB_FORMAT}")
            files = sorted(folder.glob("*.txt"))
            if not files:
                raise UserError(f"{folder}: no *.txt files; expected {IMDB_FORMAT}")
            docs[part] += [f.read_bytes() for f in files]
            labels[part] += [label] * len(files)
    n = len(docs["train"])
    perm = np.random.default_rng(seed).permutation(n)
    n_dev = round(DEV_FRACTION * n)
    # Sorted, so each split keeps the files' order; only membership is random.
    rows = {"train": np.sort(perm[n_dev:]), "dev": np.sort(perm[:n_dev])}
    splits = {
        name: Split(x0=encode_documents([docs["train"][i] for i in idx], seq_len),
                    y=torch.tensor(labels["train"], dtype=torch.int64)[torch.from_numpy(idx)])
        for name, idx in rows.items()
    }
    splits["test"] = Split(x0=encode_documents(docs["test"], seq_len), y=torch.tensor(labels["test"]))
    return _task_data("text", splits, seq_len, root)


def _read_aan(path: Path, seq_len: int) -> Split:
    if not path.is_file():
        raise UserError(f"{path}: file not found; expected {AAN_FORMAT}")
    first: list[bytes] = []
    second: list[bytes] = []
    labels: list[int] = []
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip(b"\r\n")
            if not line:
                continue
            fields = line.split(b"\t")
            if len(fields) != 5:
                raise UserError(f"{path}:{lineno}: {len(fields)} tab-separated columns; expected {AAN_FORMAT}")
            try:
                label = int(float(fields[0]))  # LRA reads the label as a float: "1" or "1.0"
            except ValueError:
                if lineno == 1:  # a header row
                    continue
                problem = f"label {fields[0]!r} is not a number"
                raise UserError(f"{path}:{lineno}: {problem}; expected {AAN_FORMAT}") from None
            first.append(fields[3])
            second.append(fields[4])
            labels.append(label)
    if not labels:
        raise UserError(f"{path}: no rows; expected {AAN_FORMAT}")
    return Split(x0=encode_documents(first, seq_len), y=torch.tensor(labels, dtype=torch.int64),
                 x1=encode_documents(second, seq_len))


def load_aan(data_dir: str | Path, *, seq_len: int) -> TaskData:
    """The Retrieval task from LRA's AAN tsv files: byte-level document pairs."""
    root = Path(data_dir)
    splits = {name: _read_aan(root / file, seq_len) for name, file in AAN_FILES.items()}
    return _task_data("retrieval", splits, seq_len, root)


def _find(root: Path, marker: str, subdir: str) -> Path | None:
    """``root`` or ``root/subdir``, whichever holds ``marker``."""
    return next((d for d in (root, root / subdir) if (d / marker).exists()), None)


def load_real(task: str, data_dir: str | Path, *, seq_len: int, seed: int = 0) -> TaskData:
    """Read a task's real data, in the format recognised from the directory's files (see the module docstring).

    Args:
        task: one of :data:`harness.lra.tasks.TASKS`.
        data_dir: the directory.
        seq_len: every sequence is truncated or padded to this length (per document for Retrieval).
        seed: seed of IMDB's dev split.

    Raises:
        UserError: the directory, a split file, or a record is missing or malformed.
    """
    root = Path(data_dir)
    pickles = f"{PICKLE_PREFIX[task]}.{{train,dev,test}}.pickle"
    native = {
        "image": f"or CIFAR-10 python batches ({', '.join(CIFAR_TRAIN_BATCHES[:1])}..5, test_batch)",
        "text": "or aclImdb (train/pos, train/neg, test/pos, test/neg)",
        "retrieval": "or AAN tsv (new_aan_pairs.{train,eval,test}.tsv)",
    }.get(task, "")
    expected = f"{pickles} {native}".strip()
    if not root.is_dir():
        raise UserError(f"{root}: data directory not found; expected a directory with {expected}")
    if (root / f"{PICKLE_PREFIX[task]}.train.pickle").exists():
        return load_lra_pickles(task, root, seq_len=seq_len)
    if task == "image" and (found := _find(root, CIFAR_TRAIN_BATCHES[0], "cifar-10-batches-py")):
        return load_cifar10(found, seq_len=seq_len)
    if task == "text" and (found := _find(root, "train", "aclImdb")):
        return load_imdb(found, seq_len=seq_len, seed=seed)
    if task == "retrieval" and (found := _find(root, AAN_FILES["train"], "tsv_data")):
        return load_aan(found, seq_len=seq_len)
    raise UserError(f"{root}: no {task} data found; expected {expected}")
