"""Readers of the real Long Range Arena data the user already has (nothing is ever downloaded), besides the LRA
release's own ListOps and Pathfinder files (:mod:`harness.kinds.accuracy.release`);
:func:`harness.kinds.accuracy.real.load_real` recognises the format by the files in the directory:

* **LRA processed pickles** of the PyTorch LRA codebases (mlpen/Nystromformer ``LRA/datasets/*.py``, reused by
  xformers and others): ``{prefix}.{train,dev,test}.pickle``, each a list of dicts with ``input_ids_0`` (int
  array), ``input_ids_1`` (Retrieval) and ``label``; prefixes: each task's ``pickle_prefix``. Id assumption: those
  scripts dump the ids of LRA's tfds encoders (ListOps ``TokenTextEncoder``, Text/Retrieval byte encoder), which
  reserve 0 for padding and were padded with zeros, so ListOps/Text/Retrieval ids are kept as they are. The Image
  and Pathfinder pickles hold raw intensities 0..255 (``normalize=False`` CIFAR, decoded Pathfinder PNGs), which
  the released pipeline masks where they are 0 (black); they are kept as they are under ``data.pixel_ids:
  released`` and shifted by +1 under ``shifted``, like every pixel (:data:`harness.models.tasks.PIXEL_OFFSET`).
* **CIFAR-10 python batches** (``data_batch_1..5``, ``test_batch``; also under ``cifar-10-batches-py/``): converted
  to grayscale exactly as LRA's ``tf.image.rgb_to_grayscale`` does (:func:`rgb_to_grayscale`: float32, truncated,
  not rounded); dev = the last 10% of the training images, as LRA's ``train[90%:]``.
* **aclImdb** (``train/{pos,neg}/*.txt``, ``test/{pos,neg}/*.txt``; also under ``aclImdb/``): byte-level, label
  pos = 1, each review stripped of leading and trailing whitespace as tfds' ``imdb_reviews`` strips it; dev = a
  seeded random 10% of train (the rest stays train), files read in sorted order.
* **AAN tsv** of LRA Retrieval (``new_aan_pairs.{train,eval,test}.tsv``; also under ``tsv_data/``): tab-separated
  label, id1, id2, text1, text2; byte-level pairs; ``eval`` is the dev split.

Every missing or malformed file raises :class:`~harness.core.errors.UserError` naming the file, the problem and the
expected format, before any training: an empty split, a label that is not a class of the task (ListOps and Image 10,
Text, Retrieval and Pathfinder 2), or a token id beyond :data:`MAX_TOKEN_ID` (pixels: beyond 255).

Pickles are data, not code (:mod:`harness.kinds.accuracy.pickles`). Files are data too, and only the user's
(:func:`~harness.core.datafiles.open_data_file`): every file is opened by its real path, which must lie
under the data folder the user gave (``--data-dir``), whatever a symlink says; only a regular file is read (a FIFO
would block forever, ``/dev/zero`` never ends); a review above :data:`MAX_REVIEW_BYTES` is refused unread. Memory is
bounded before it is taken: a pickle's records are counted, each as often as the file lists it, against
:data:`MAX_SPLIT_IDS` before any array is built; each record is cut to ``seq_len`` before it is copied; a value's type
is checked before numpy converts it (a label True, "3" or a 2x2 array is no class); and a split that still does not
fit in memory is an exit-2 error naming its file (:func:`~harness.core.datafiles.memory_refusal`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...core import datasource
from ...core.datafiles import memory_refusal, open_data_file, read_data_file
from ...core.errors import UserError
from ...models.tasks import (
    BYTE_VOCAB,
    SPLITS,
    Split,
    Task,
    TaskData,
    encode_documents,
    pad_or_truncate,
    pixels_to_tokens,
)
from .pickles import unpickle

CIFAR_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
AAN_FILES: dict[str, str] = {
    "train": "new_aan_pairs.train.tsv",
    "dev": "new_aan_pairs.eval.tsv",
    "test": "new_aan_pairs.test.tsv",
}
DEV_FRACTION = 0.1  # CIFAR-10 and IMDB dev splits, carved from train
CIFAR_CLASSES = 10  # CIFAR-10's classes, the Image task's: its batches are read before they are the task's data

PICKLE_FORMAT = "an LRA processed pickle: a list of dicts with 'input_ids_0' (int array), 'label' (int)"
CIFAR_FORMAT = "a CIFAR-10 python batch: a pickled dict with b'data' (uint8 [N, 3072], RGB planes) and b'labels'"
IMDB_FORMAT = "the aclImdb layout: train/pos, train/neg, test/pos, test/neg with one review per *.txt file"
AAN_FORMAT = "an LRA AAN tsv: 5 tab-separated columns label, id1, id2, text1, text2"

#: Largest token id taken from a file whose vocabulary the harness does not fix (ListOps, Text and Retrieval pickles).
#: The model's embedding has one row per id up to the largest, so an id of 10**12 would ask for terabytes; LRA's
#: vocabularies have tens (ListOps) or a few hundred (bytes) ids, and even a subword vocabulary stays far below this.
MAX_TOKEN_ID = 2**20 - 1
MAX_PIXEL = 255  # Image and Pathfinder pickles hold 8-bit intensities (shifted to ids 1..256 here)
#: Training examples needed for a dev split of DEV_FRACTION to hold one: round(0.1 * 5) = 0, round(0.1 * 6) = 1.
MIN_TRAIN_FOR_DEV = 6
#: The most token ids (pixels) one pickled split may hold: over all its records as the file lists them (a record the
#: pickle references 20,000 times counts 20,000 times: copied, it costs that much memory), and again once each record
#: is cut or padded to seq_len. LRA's largest split, Retrieval's training pickle, holds 147,086 pairs of 4,096 ids
#: (1.2e9); twice that is no LRA file.
MAX_SPLIT_IDS = 2**31
#: The largest aclImdb review file read: the longest review of aclImdb is under 14 KB, so 1 MiB holds any review and
#: refuses a file that is something else (a log, a disk image) before it is read whole.
MAX_REVIEW_BYTES = 2**20


# ---------------------------------------------------------------------------------------------------------------------
# Values: ids and labels within what the task's model can hold


def class_index(where: str, value: Any, task: Task, expected: str) -> int:
    """``value`` as a class of ``task``: an integer (``1`` or ``1.0``; not 1.5, nan or inf) in 0..classes - 1.

    Raises:
        UserError: ``where`` (the file and record) with the value and the task's classes.
    """
    classes = task.num_classes
    try:
        number = float(value)  # numpy scalars, Python numbers and the tsv's text "1.0" alike
    except (TypeError, ValueError, OverflowError):
        number = float("nan")
    if not (number.is_integer() and 0 <= number < classes):
        shown = repr(value[:40]) if isinstance(value, str) else str(value)[:40]
        raise UserError(f"{where} {shown} is not a class of {task.name} (an integer in 0..{classes - 1}); "
                        f"expected {expected}")
    return int(number)


def _dev_size(n: int, where: Path, expected: str) -> int:
    """Rows of the dev split carved from ``n`` training examples; a UserError if it would be empty."""
    n_dev = round(DEV_FRACTION * n)
    if n_dev < 1:
        raise UserError(f"{where}: {n} training examples leave the dev split (10% of them) empty; expected {expected} "
                        f"with at least {MIN_TRAIN_FOR_DEV} training examples")
    return n_dev


def _count_ids(path: Path, records: list[Any], keys: Sequence[str], seq_len: int, expected: str) -> None:
    """Refuse a split whose ids exceed :data:`MAX_SPLIT_IDS`, before any array is built: the ids its records hold,
    each record counted as often as the file lists it, and the ids once each is cut or padded to ``seq_len``."""
    held = 0
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise UserError(f"{path}: not a list of dicts (record {i} is a {type(record).__name__}); "
                            f"expected {expected}")
        for key in keys:
            if key not in record:
                raise UserError(f"{path}: record {i} has no {key!r}; expected {expected}")
            value = record[key]
            if not isinstance(value, np.ndarray | list | tuple):
                raise UserError(f"{path}: record {i} {key!r} is a {type(value).__name__}, not an array of "
                                f"non-negative ints; expected {expected}")
            held += value.size if isinstance(value, np.ndarray) else len(value)
    padded = len(records) * len(keys) * seq_len
    if max(held, padded) > MAX_SPLIT_IDS:
        what = (f"its records hold {held:,} ids (a record counts each time the file lists it)" if held > padded else
                f"its {len(records):,} records, each cut or padded to seq_len {seq_len:,}, would hold {padded:,} ids")
        raise UserError(f"{path}: {what}, more than the {MAX_SPLIT_IDS:,} of a split attnbench reads (LRA's largest "
                        f"holds 1.2e9); use a smaller seq_len, or replace the file with the original; "
                        f"expected {expected}")


def _is_int(value: object) -> bool:
    """A Python or numpy integer, not a bool (True would be read as the id or class 1)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _ids(path: Path, i: int, record: dict[Any, Any], key: str, task: Task, seq_len: int, expected: str) -> np.ndarray:
    """The first ``seq_len`` ids of one record (int64), checked: the rest are never read, so never copied.

    :func:`_count_ids` has checked that the value is an array, list or tuple; a list's kept items must be ints before
    numpy sees them (a nested list, referenced many times, would make numpy build an array of all it references).
    """
    value = record[key]
    bad = UserError(f"{path}: record {i} {key!r} is not an array of non-negative ints; expected {expected}")
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iu":
            raise bad
        kept = np.asarray(value.flat[:seq_len], dtype=np.int64)  # copies at most seq_len ids, in row-major order
    else:
        head = value[:seq_len]
        if not all(_is_int(v) for v in head):
            raise bad
        try:
            kept = np.asarray(head, dtype=np.int64)
        except OverflowError:  # a Python int beyond int64: no id
            raise bad from None
    if kept.size and kept.min() < 0:
        raise bad
    bound, what = (MAX_PIXEL, "8-bit intensity") if task.pixels else (MAX_TOKEN_ID, "token id accepted")
    if kept.size and kept.max() > bound:
        raise UserError(f"{path}: record {i} {key!r} holds {kept.max()}, above {bound}, the largest {what}; "
                        f"expected {expected}")
    return kept


def _shown(value: object) -> str:
    """A value as a message shows it: text quoted and cut, an array by its shape and dtype, else its type."""
    if isinstance(value, str | bytes):
        return f"{value[:40]!r} (text)"
    if isinstance(value, np.ndarray):
        return f"a {'x'.join(map(str, value.shape)) or '0-d'} {value.dtype} array"
    if isinstance(value, bool | np.bool_):
        return f"{value} (a bool)"
    return f"a {type(value).__name__}"


def _label(path: Path, i: int, record: dict[Any, Any], task: Task, expected: str) -> int:
    """The record's class: a number (numpy scalar or Python int or float; an array of one number), checked by
    :func:`class_index`. A bool, text or an array of several values is no class, whatever its first element is."""
    if "label" not in record:
        raise UserError(f"{path}: record {i} has no 'label'; expected {expected}")
    value = record["label"]
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iuf":
        value = value.reshape(-1)[0]  # the one value of an array (its size is 1)
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise UserError(f"{path}: record {i} 'label' is {_shown(value)}, not a class of {task.name} (an integer "
                        f"in 0..{task.num_classes - 1}); expected {expected}")
    return class_index(f"{path}: record {i} 'label'", value, task, expected)


def _read_pickle_split(path: Path, within: Path, task: Task, seq_len: int, offset: int) -> Split:
    dual = task.dual
    expected = PICKLE_FORMAT + (" and 'input_ids_1'" if dual else "")
    keys = ("input_ids_0", "input_ids_1") if dual else ("input_ids_0",)
    with memory_refusal(path, expected):
        records = unpickle(path, within, expected)
        if not isinstance(records, list):
            raise UserError(f"{path}: not a list of dicts (a {type(records).__name__}); expected {expected}")
        if not records:
            raise UserError(f"{path}: no records (an empty list); every split needs examples; expected {expected}")
        _count_ids(path, records, keys, seq_len, expected)
        # Pixel pickles hold intensities 0..255 where 0 is black: shift them like every pixel (see module docstring).
        shift = offset if task.pixels else 0
        x = [pad_or_truncate([_ids(path, i, r, key, task, seq_len, expected) + shift for i, r in enumerate(records)],
                             seq_len) for key in keys]
        y = torch.tensor([_label(path, i, r, task, expected) for i, r in enumerate(records)], dtype=torch.int64)
    return Split(x0=x[0], y=y, x1=x[1] if dual else None)


def task_data(task: Task, splits: dict[str, Split], seq_len: int, root: Path, files: Sequence[Path],
              contents: Sequence[bytes] | None = None, *, offset: int = 1, note: str = "") -> TaskData:
    """TaskData of real splits read from ``files`` under ``root``: vocab_size = max id + 1 (at least 256 +
    ``offset`` for pixels), LRA's classes, and the files' checksums (then ``note``) as the source.

    The readers have checked every id and label against the task's bounds, so both sizes are bounded.
    """
    max_id = max(int(t.max()) if t.numel() else 0 for s in splits.values() for t in (s.x0, s.x1) if t is not None)
    vocab_size = max(max_id + 1, BYTE_VOCAB - 1 + offset if task.pixels else 0)
    return TaskData(task=task.name, vocab_size=vocab_size, num_classes=task.num_classes, seq_len=seq_len,
                    dual=splits["train"].x1 is not None, source=datasource.files(root, files, contents) + note,
                    pixel_offset=offset if task.pixels else 1, **splits)


def load_lra_pickles(task: Task, data_dir: str | Path, *, seq_len: int, prefix: str, offset: int = 1,
                     note: str = "", within: str | Path | None = None) -> TaskData:
    """The ``{prefix}.{train,dev,test}.pickle`` files of one task, read only from under ``within`` (the user's data
    folder; default ``data_dir``)."""
    root = Path(data_dir)
    paths = {name: root / f"{prefix}.{name}.pickle" for name in SPLITS}
    folder = Path(within or root)
    splits = {name: _read_pickle_split(path, folder, task, seq_len, offset) for name, path in paths.items()}
    return task_data(task, splits, seq_len, root, list(paths.values()), offset=offset, note=note)


#: The image rows of one CIFAR-10 batch: 32 x 32 pixels of 3 colour planes.
CIFAR_ROW = 3 * 32 * 32


def _cifar_labels(path: Path, labels: object, rows: int) -> np.ndarray:
    """b'labels' as int64 [rows]: a list (the batches' own form) or 1-D array of ints, each a class of image; checked
    item by item before numpy converts it (its length is the image count, which the array's size bounds)."""
    classes = CIFAR_CLASSES
    if isinstance(labels, np.ndarray) and labels.ndim == 1 and labels.dtype.kind in "iu":
        items: Sequence[Any] = labels
    elif isinstance(labels, list | tuple) and all(_is_int(v) for v in labels):
        items = labels
    else:
        raise UserError(f"{path}: b'labels' is {_shown(labels)}, not a list of ints; expected {CIFAR_FORMAT}")
    if len(items) != rows:
        raise UserError(f"{path}: b'labels' holds {len(items)} labels for {rows} images; expected {CIFAR_FORMAT}")
    outside = next((v for v in items if not 0 <= v < classes), None)
    if outside is not None:
        raise UserError(f"{path}: b'labels' holds {outside}, not a class of image (an integer in 0..{classes - 1}); "
                        f"expected {CIFAR_FORMAT}")
    return np.asarray(items, dtype=np.int64)


def _read_cifar_batch(path: Path, within: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch: grayscale uint8 [N, 32, 32] and int64 labels [N].

    b'data' must be what the batches hold, a uint8 [N, 3072] array, checked before anything is converted: numpy
    would first turn a small list that references one row many times into an array of every row it lists.
    """
    with memory_refusal(path, CIFAR_FORMAT):
        batch = unpickle(path, within, CIFAR_FORMAT, encoding="bytes")  # Python 2 pickles with bytes keys
        if not isinstance(batch, dict):
            raise UserError(f"{path}: not a dict; expected {CIFAR_FORMAT}")
        for key in (b"data", b"labels"):
            if key not in batch:
                raise UserError(f"{path}: no {key!r} entry; expected {CIFAR_FORMAT}")
        data = batch[b"data"]
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != CIFAR_ROW:
            shown = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else _shown(data)
            raise UserError(f"{path}: b'data' is {shown}, not a uint8 array [N, {CIFAR_ROW}]; "
                            f"expected {CIFAR_FORMAT}")
        if not len(data):
            raise UserError(f"{path}: b'data' holds no images; expected {CIFAR_FORMAT}")
        labels = _cifar_labels(path, batch[b"labels"], len(data))
        return rgb_to_grayscale(data.reshape(-1, 3, 32, 32)), labels  # [N, 3072] -> [N, 3, 32, 32]


#: ``tf.image.rgb_to_grayscale``'s weights of R, G and B, as float32 (TensorFlow converts the Python list to float32).
GRAY_WEIGHTS = np.array([0.2989, 0.5870, 0.1140], dtype=np.float32)


def rgb_to_grayscale(rgb: np.ndarray) -> np.ndarray:
    """uint8 [..., 3, H, W] RGB planes -> uint8 [..., H, W], the intensities LRA's Image task trains on.

    LRA's input pipeline (``lra_benchmarks/image/input_pipeline.py``) casts ``tf.image.rgb_to_grayscale(image)``
    to int32. For a uint8 image that function works in float32: ``convert_image_dtype`` to float32 multiplies each
    channel by ``float32(1 / 255)``; the grey level is the weighted sum ``r·0.2989 + g·0.5870 + b·0.1140`` (float32
    weights, summed in that order); ``convert_image_dtype`` back to uint8 multiplies by ``float32(255.5)`` and
    casts, which truncates (the weights sum to 0.9999, so nothing saturates). This does the same steps in float32,
    so its levels are the release's: rounding ``0.2989 R + 0.5870 G + 0.1140 B`` instead puts many pixels one
    level above them. TensorFlow computes the sum as a matrix product, which may fuse or reorder the float32
    operations; only a grey level within a last-bit rounding error of an integer could then land on the other side.
    """
    channels = rgb.astype(np.float32) * np.float32(1.0 / 255.0)  # convert_image_dtype(uint8 -> float32)
    r, g, b = channels[..., 0, :, :], channels[..., 1, :, :], channels[..., 2, :, :]
    gray = r * GRAY_WEIGHTS[0] + g * GRAY_WEIGHTS[1] + b * GRAY_WEIGHTS[2]  # float32 throughout
    return (gray * np.float32(255.5)).astype(np.uint8)  # convert_image_dtype(float32 -> uint8): scale, truncate


def read_cifar10(data_dir: str | Path, *, within: str | Path | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Grayscale CIFAR-10 by split: uint8 [S, 32, 32] and int64 labels [S] (dev = last 10% of train), read only from
    under ``within`` (the user's data folder; default ``data_dir``).

    The raw pixels are exposed so that the noise-robustness suite can perturb intensities before
    :func:`harness.models.tasks.pixels_to_tokens`.
    """
    root = Path(data_dir)
    folder = Path(within or root)
    parts = [_read_cifar_batch(root / name, folder) for name in CIFAR_TRAIN_BATCHES]
    pixels = np.concatenate([p for p, _ in parts])
    labels = np.concatenate([y for _, y in parts])
    n_train = len(pixels) - _dev_size(len(pixels), root, CIFAR_FORMAT)
    return {
        "train": (pixels[:n_train], labels[:n_train]),
        "dev": (pixels[n_train:], labels[n_train:]),
        "test": _read_cifar_batch(root / "test_batch", folder),
    }


def load_cifar10(task: Task, data_dir: str | Path, *, seq_len: int, offset: int = 1, note: str = "",
                 within: str | Path | None = None) -> TaskData:
    """``task`` (Image) from CIFAR-10 python batches: 1024 grayscale pixel tokens per image."""
    splits = {name: Split(x0=pad_or_truncate(pixels_to_tokens(pixels, offset), seq_len), y=torch.from_numpy(labels))
              for name, (pixels, labels) in read_cifar10(data_dir, within=within).items()}
    root = Path(data_dir)
    return task_data(task, splits, seq_len, root, [root / n for n in (*CIFAR_TRAIN_BATCHES, "test_batch")],
                     offset=offset, note=note)


def load_imdb(task: Task, data_dir: str | Path, *, seq_len: int, seed: int, dev: str = "test", note: str = "",
              within: str | Path | None = None) -> TaskData:
    """``task`` (Text) from aclImdb: byte-level reviews, pos = 1; dev = the test set (``dev="test"``, LRA's) or a
    seeded 10% of train (``"heldout"``).

    Every ``*.txt`` match is read as a review only if it is a regular file under ``within`` (the user's data folder;
    default ``data_dir``) of at most :data:`MAX_REVIEW_BYTES`; anything else is refused by name
    (:func:`read_data_file`), never skipped: a folder missing one review is not aclImdb.

    Each review is encoded as tfds' ``imdb_reviews`` builder yields it to LRA's byte encoder: the file's bytes with
    leading and trailing ASCII whitespace stripped (``bytes.strip()``), so that a review's first tokens are its
    words, as in LRA, and not a newline. The data source's checksums are those of the files as they are on disk.
    """
    root = Path(data_dir)
    allowed = Path(within or root)
    docs: dict[str, list[bytes]] = {}
    labels: dict[str, list[int]] = {}
    read: list[Path] = []
    for part in ("train", "test"):
        docs[part], labels[part] = [], []
        for name, label in (("neg", 0), ("pos", 1)):
            folder = root / part / name
            if not folder.is_dir():
                raise UserError(f"{folder}: directory not found; expected {IMDB_FORMAT}")
            files = sorted(folder.glob("*.txt"))
            if not files:
                raise UserError(f"{folder}: no *.txt files; expected {IMDB_FORMAT}")
            docs[part] += [read_data_file(f, allowed, IMDB_FORMAT, max_bytes=MAX_REVIEW_BYTES,
                                          what="a review (aclImdb's longest is under 14 KB)") for f in files]
            read += files
            labels[part] += [label] * len(files)
    raw = docs["train"] + docs["test"]  # the files' bytes, for their checksums
    docs = {part: [doc.strip() for doc in texts] for part, texts in docs.items()}  # tfds: imdb_f.read().strip()
    n = len(docs["train"])
    test = Split(x0=encode_documents(docs["test"], seq_len), y=torch.tensor(labels["test"]))
    if dev == "test":  # LRA's pipeline evaluates on the test set, and the released pickles' dev split is it
        rows = {"train": np.arange(n)}
    else:
        perm = np.random.default_rng(seed).permutation(n)
        n_dev = _dev_size(n, root / "train", IMDB_FORMAT)
        # Sorted, so each split keeps the files' order; only membership is random.
        rows = {"train": np.sort(perm[n_dev:]), "dev": np.sort(perm[:n_dev])}
    splits = {
        name: Split(x0=encode_documents([docs["train"][i] for i in idx], seq_len),
                    y=torch.tensor(labels["train"], dtype=torch.int64)[torch.from_numpy(idx)])
        for name, idx in rows.items()
    }
    splits.setdefault("dev", test)
    splits["test"] = test
    return task_data(task, splits, seq_len, root, read, raw, note=note)


def _read_aan(task: Task, path: Path, within: Path, seq_len: int) -> Split:
    first: list[bytes] = []
    second: list[bytes] = []
    labels: list[int] = []
    with open_data_file(path, within, AAN_FORMAT) as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip(b"\r\n")
            if not line:
                continue
            fields = line.split(b"\t")
            if len(fields) != 5:
                raise UserError(f"{path}:{lineno}: {len(fields)} tab-separated columns; expected {AAN_FORMAT}")
            text = fields[0].decode(errors="replace")
            try:
                float(text)  # LRA reads the label as a float: "1" or "1.0"
            except ValueError:
                if lineno == 1:  # a header: only the first line, and only if its label is no number ("nan" is one)
                    continue
            labels.append(class_index(f"{path}:{lineno}: label", text, task, AAN_FORMAT))
            first.append(fields[3])
            second.append(fields[4])
    if not labels:
        raise UserError(f"{path}: no rows; every split needs examples; expected {AAN_FORMAT}")
    return Split(x0=encode_documents(first, seq_len), y=torch.tensor(labels, dtype=torch.int64),
                 x1=encode_documents(second, seq_len))


def load_aan(task: Task, data_dir: str | Path, *, seq_len: int, within: str | Path | None = None) -> TaskData:
    """``task`` (Retrieval) from LRA's AAN tsv files: byte-level document pairs, read only from under ``within`` (the
    user's data folder; default ``data_dir``)."""
    root = Path(data_dir)
    splits = {name: _read_aan(task, root / file, Path(within or root), seq_len) for name, file in AAN_FILES.items()}
    return task_data(task, splits, seq_len, root, [root / file for file in AAN_FILES.values()])
