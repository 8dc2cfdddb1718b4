"""Readers of the real Long Range Arena data the user already has (nothing is ever downloaded), besides the LRA
release's own ListOps and Pathfinder files (:mod:`harness.kinds.accuracy.release`);
:func:`harness.kinds.accuracy.real.load_real` recognises the format by the files in the directory:

* **LRA processed pickles** of the PyTorch LRA codebases (mlpen/Nystromformer ``LRA/datasets/*.py``, reused by
  xformers and others): ``{prefix}.{train,dev,test}.pickle``, each a list of dicts with ``input_ids_0`` (int
  array), ``input_ids_1`` (Retrieval) and ``label``; prefixes in :data:`PICKLE_PREFIX`. Id assumption: those
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

Pickles are data, not code: :class:`LraUnpickler` builds only Python containers and numpy arrays, dtypes and scalars,
and refuses any other name a file asks for (``pickle.load`` would call it, ``os.system`` included).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...core import datasource
from ...core.errors import UserError, first_line
from ...models.tasks import (
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

#: Largest token id taken from a file whose vocabulary the harness does not fix (ListOps, Text and Retrieval pickles).
#: The model's embedding has one row per id up to the largest, so an id of 10**12 would ask for terabytes; LRA's
#: vocabularies have tens (ListOps) or a few hundred (bytes) ids, and even a subword vocabulary stays far below this.
MAX_TOKEN_ID = 2**20 - 1
MAX_PIXEL = 255  # Image and Pathfinder pickles hold 8-bit intensities (shifted to ids 1..256 here)
#: Training examples needed for a dev split of DEV_FRACTION to hold one: round(0.1 * 5) = 0, round(0.1 * 6) = 1.
MIN_TRAIN_FOR_DEV = 6


# ---------------------------------------------------------------------------------------------------------------------
# Pickles: data only


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle asked for a callable or class outside :data:`ALLOWED_GLOBALS`; ``name`` is "module.name"."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


#: The most elements (items of a container, bytes, array elements) one call of a pickle may build: far above any LRA
#: record or CIFAR batch (10,000 x 3,072 bytes), far below what would exhaust memory or a core for minutes (a 64-byte
#: pickle calling ``frozenset(bytes(3e9))`` took 63 s before its error).
MAX_UNPICKLED_ELEMENTS = 2**28


def _bounded(n: int, what: str) -> int:
    if not 0 <= n <= MAX_UNPICKLED_ELEMENTS:
        raise RefusedGlobal(f"{what} of {n} elements (more than {MAX_UNPICKLED_ELEMENTS})")
    return n


def _container(kind: type) -> Callable[..., Any]:
    """``kind`` (set, frozenset, bytes, bytearray) as pickle protocols before 4 call it: from a list, tuple or
    text of bounded length; never from a count (``bytes(3e9)``) or a stream of unknown length."""
    def build(*args: Any) -> Any:
        if not args:
            return kind()
        (items, *rest) = args
        if rest and kind not in (bytes, bytearray) or not isinstance(items, list | tuple | set | frozenset | str |
                                                                        bytes | bytearray):
            raise RefusedGlobal(f"{kind.__name__}() of a {type(items).__name__}")
        _bounded(len(items), kind.__name__)
        return kind(items, *rest)

    build.__name__ = kind.__name__
    return build


def _array(reconstruct: Callable[..., Any]) -> Callable[..., Any]:
    """numpy's array reconstructor with the array's size bounded before anything is allocated."""
    def build(*args: Any) -> Any:
        shape = next((a for a in args if isinstance(a, tuple) and all(isinstance(s, int) for s in a)), ())
        size = 1
        for s in shape:
            size *= max(s, 0)
        _bounded(size, "an array")
        return reconstruct(*args)

    return build


def _latin1(text: str, encoding: str) -> bytes:
    """``_codecs.encode`` as pickle protocols 0-2 use it (to write bytes: ``encode(text, "latin1")``), and no other."""
    if encoding != "latin1":
        raise RefusedGlobal(f"_codecs.encode(..., {encoding!r})")
    _bounded(len(text), "bytes")
    return text.encode("latin1")


def _allowed_globals() -> dict[tuple[str, str], Callable[..., Any]]:
    """What an LRA pickle or a CIFAR-10 batch may name: plain containers, numpy arrays, dtypes and scalars.

    numpy's reconstructors are taken from what this numpy pickles, so that files written under numpy 1
    (``numpy.core``) and numpy 2 (``numpy._core``) resolve to the same functions without the deprecated
    ``numpy.core``. Each builds an array or scalar from its arguments and calls nothing named by the file.
    """
    allowed: dict[tuple[str, str], Callable[..., Any]] = {
        ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype, ("_codecs", "encode"): _latin1,
    }
    for core in ("numpy.core", "numpy._core"):
        allowed[f"{core}.multiarray", "_reconstruct"] = _array(np.zeros(1).__reduce__()[0])  # arrays, protocols 0-4
        allowed[f"{core}.numeric", "_frombuffer"] = np.zeros(1).__reduce_ex__(5)[0]  # arrays, protocol 5
        allowed[f"{core}.multiarray", "scalar"] = np.int64(0).__reduce__()[0]  # np.int32(1) and the like
    # Protocols before 4 (bytearray: 5) write these as calls; Python 2 and protocols 0-2 name them __builtin__.
    for module in ("builtins", "__builtin__"):
        for kind in (set, frozenset, bytes, bytearray):
            allowed[module, kind.__name__] = _container(kind)
    return allowed


ALLOWED_GLOBALS = _allowed_globals()


class LraUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that resolves only :data:`ALLOWED_GLOBALS`; any other name raises :class:`RefusedGlobal`.

    A pickle runs whatever callable it names, so a hostile file given as LRA data would run code as the user.
    The restriction is the one the Python docs recommend ("Restricting Globals", docs.python.org/3/library/pickle).
    """

    def find_class(self, module: str, name: str) -> Any:
        """The allowed object ``module.name``, never an import."""
        try:
            return ALLOWED_GLOBALS[module, name]
        except KeyError:
            raise RefusedGlobal(f"{module}.{name}") from None


def _unpickle(path: Path, expected: str, **kwargs: Any) -> Any:
    if not path.is_file():
        raise UserError(f"{path}: file not found; expected {expected}")
    try:
        with open(path, "rb") as f:
            return LraUnpickler(f, **kwargs).load()
    except RefusedGlobal as exc:
        raise UserError(f"{path}: attnbench refuses to unpickle {exc.name}: only Python containers and numpy arrays, "
                        f"dtypes and scalars are allowed; this file is not an LRA pickle or was tampered with; "
                        f"replace it with the original (expected {expected})") from None
    except Exception as exc:
        problem = first_line(exc) or type(exc).__name__
        raise UserError(f"{path}: cannot be unpickled ({problem}); expected {expected}") from None


# ---------------------------------------------------------------------------------------------------------------------
# Values: ids and labels within what the task's model can hold


def class_index(where: str, value: Any, task: str, expected: str) -> int:
    """``value`` as a class of ``task``: an integer (``1`` or ``1.0``; not 1.5, nan or inf) in 0..classes - 1.

    Raises:
        UserError: ``where`` (the file and record) with the value and the task's classes.
    """
    classes = NUM_CLASSES[task]
    try:
        number = float(value)  # numpy scalars, Python numbers and the tsv's text "1.0" alike
    except (TypeError, ValueError, OverflowError):
        number = float("nan")
    if not (number.is_integer() and 0 <= number < classes):
        shown = repr(value[:40]) if isinstance(value, str) else str(value)[:40]
        raise UserError(f"{where} {shown} is not a class of {task} (an integer in 0..{classes - 1}); "
                        f"expected {expected}")
    return int(number)


def _dev_size(n: int, where: Path, expected: str) -> int:
    """Rows of the dev split carved from ``n`` training examples; a UserError if it would be empty."""
    n_dev = round(DEV_FRACTION * n)
    if n_dev < 1:
        raise UserError(f"{where}: {n} training examples leave the dev split (10% of them) empty; expected {expected} "
                        f"with at least {MIN_TRAIN_FOR_DEV} training examples")
    return n_dev


def _ids(path: Path, i: int, record: dict[Any, Any], key: str, task: str, expected: str) -> np.ndarray:
    if key not in record:
        raise UserError(f"{path}: record {i} has no {key!r}; expected {expected}")
    try:
        ids = np.asarray(record[key]).reshape(-1)
    except (TypeError, ValueError):  # ragged nested lists
        ids = np.asarray([None])
    if ids.dtype.kind not in "iu" or (ids.size and ids.min() < 0):
        raise UserError(f"{path}: record {i} {key!r} is not an array of non-negative ints; expected {expected}")
    bound, what = (MAX_PIXEL, "8-bit intensity") if task in PIXEL_TASKS else (MAX_TOKEN_ID, "token id accepted")
    if ids.size and ids.max() > bound:
        raise UserError(f"{path}: record {i} {key!r} holds {ids.max()}, above {bound}, the largest {what}; "
                        f"expected {expected}")
    return ids


def _label(path: Path, i: int, record: dict[Any, Any], task: str, expected: str) -> int:
    if "label" not in record:
        raise UserError(f"{path}: record {i} has no 'label'; expected {expected}")
    try:
        value = np.asarray(record["label"]).reshape(-1)[0]  # a scalar, or the one value of an array
    except (TypeError, ValueError, IndexError):
        value = record["label"]
    return class_index(f"{path}: record {i} 'label'", value, task, expected)


def _read_pickle_split(path: Path, task: str, seq_len: int, offset: int) -> Split:
    dual = task == "retrieval"
    expected = PICKLE_FORMAT + (" and 'input_ids_1'" if dual else "")
    records = _unpickle(path, expected)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise UserError(f"{path}: not a list of dicts; expected {expected}")
    if not records:
        raise UserError(f"{path}: no records (an empty list); every split needs examples; expected {expected}")
    # Pixel pickles hold intensities 0..255 where 0 is black: shift them like every pixel (see module docstring).
    shift = offset if task in PIXEL_TASKS else 0
    x0 = [_ids(path, i, r, "input_ids_0", task, expected) + shift for i, r in enumerate(records)]
    x1 = [_ids(path, i, r, "input_ids_1", task, expected) + shift for i, r in enumerate(records)] if dual else None
    y = torch.tensor([_label(path, i, r, task, expected) for i, r in enumerate(records)], dtype=torch.int64)
    return Split(x0=pad_or_truncate(x0, seq_len), y=y, x1=None if x1 is None else pad_or_truncate(x1, seq_len))


def task_data(task: str, splits: dict[str, Split], seq_len: int, root: Path, files: Sequence[Path],
              contents: Sequence[bytes] | None = None, *, offset: int = 1, note: str = "") -> TaskData:
    """TaskData of real splits read from ``files`` under ``root``: vocab_size = max id + 1 (at least 256 +
    ``offset`` for pixels), LRA's classes, and the files' checksums (then ``note``) as the source.

    The readers have checked every id and label against the task's bounds, so both sizes are bounded.
    """
    max_id = max(int(t.max()) if t.numel() else 0 for s in splits.values() for t in (s.x0, s.x1) if t is not None)
    pixels = task in PIXEL_TASKS
    vocab_size = max(max_id + 1, BYTE_VOCAB - 1 + offset if pixels else 0)
    return TaskData(task=task, vocab_size=vocab_size, num_classes=NUM_CLASSES[task], seq_len=seq_len,
                    dual=splits["train"].x1 is not None, source=datasource.files(root, files, contents) + note,
                    pixel_offset=offset if pixels else 1, **splits)


def load_lra_pickles(task: str, data_dir: str | Path, *, seq_len: int, prefix: str | None = None, offset: int = 1,
                     note: str = "") -> TaskData:
    """The ``{prefix}.{train,dev,test}.pickle`` files of one task (default prefix: :data:`PICKLE_PREFIX`)."""
    root = Path(data_dir)
    paths = {name: root / f"{prefix or PICKLE_PREFIX[task]}.{name}.pickle" for name in SPLITS}
    splits = {name: _read_pickle_split(path, task, seq_len, offset) for name, path in paths.items()}
    return task_data(task, splits, seq_len, root, list(paths.values()), offset=offset, note=note)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch: grayscale uint8 [N, 32, 32] and int64 labels [N]."""
    batch = _unpickle(path, CIFAR_FORMAT, encoding="bytes")  # the batches are Python 2 pickles with bytes keys
    if not isinstance(batch, dict):
        raise UserError(f"{path}: not a dict; expected {CIFAR_FORMAT}")
    for key in (b"data", b"labels"):
        if key not in batch:
            raise UserError(f"{path}: no {key!r} entry; expected {CIFAR_FORMAT}")
    try:
        data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"]).reshape(-1)
    except (TypeError, ValueError):  # ragged nested lists
        raise UserError(f"{path}: b'data' or b'labels' is not an array; expected {CIFAR_FORMAT}") from None
    if labels.size and labels.dtype.kind not in "iu":  # also ints beyond int64, which numpy keeps as objects
        raise UserError(f"{path}: b'labels' is not a list of ints ({labels.dtype}); expected {CIFAR_FORMAT}")
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
        raise UserError(f"{path}: b'data' is {data.dtype} {data.shape} with {len(labels)} labels; "
                        f"expected {CIFAR_FORMAT}")
    if not len(data):
        raise UserError(f"{path}: b'data' holds no images; expected {CIFAR_FORMAT}")
    outside = labels[(labels < 0) | (labels >= NUM_CLASSES["image"])]
    if outside.size:
        raise UserError(f"{path}: b'labels' holds {outside[0]}, not a class of image (an integer in "
                        f"0..{NUM_CLASSES['image'] - 1}); expected {CIFAR_FORMAT}")
    return rgb_to_grayscale(data.reshape(-1, 3, 32, 32)), labels.astype(np.int64)  # [N, 3072] -> [N, 3, 32, 32]


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


def read_cifar10(data_dir: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Grayscale CIFAR-10 by split: uint8 [S, 32, 32] and int64 labels [S] (dev = last 10% of train).

    The raw pixels are exposed so that the noise-robustness suite can perturb intensities before
    :func:`harness.models.tasks.pixels_to_tokens`.
    """
    root = Path(data_dir)
    parts = [_read_cifar_batch(root / name) for name in CIFAR_TRAIN_BATCHES]
    pixels = np.concatenate([p for p, _ in parts])
    labels = np.concatenate([y for _, y in parts])
    n_train = len(pixels) - _dev_size(len(pixels), root, CIFAR_FORMAT)
    return {
        "train": (pixels[:n_train], labels[:n_train]),
        "dev": (pixels[n_train:], labels[n_train:]),
        "test": _read_cifar_batch(root / "test_batch"),
    }


def load_cifar10(data_dir: str | Path, *, seq_len: int, offset: int = 1, note: str = "") -> TaskData:
    """The Image task from CIFAR-10 python batches: 1024 grayscale pixel tokens per image."""
    splits = {name: Split(x0=pad_or_truncate(pixels_to_tokens(pixels, offset), seq_len), y=torch.from_numpy(labels))
              for name, (pixels, labels) in read_cifar10(data_dir).items()}
    root = Path(data_dir)
    return task_data("image", splits, seq_len, root, [root / n for n in (*CIFAR_TRAIN_BATCHES, "test_batch")],
                     offset=offset, note=note)


def load_imdb(data_dir: str | Path, *, seq_len: int, seed: int, dev: str = "test", note: str = "") -> TaskData:
    """The Text task from aclImdb: byte-level reviews, pos = 1; dev = the test set (``dev="test"``, LRA's) or a
    seeded 10% of train (``"heldout"``).

    Each review is encoded as tfds' ``imdb_reviews`` builder yields it to LRA's byte encoder: the file's bytes with
    leading and trailing ASCII whitespace stripped (``bytes.strip()``), so that a review's first tokens are its
    words, as in LRA, and not a newline. The data source's checksums are those of the files as they are on disk.
    """
    root = Path(data_dir)
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
            docs[part] += [f.read_bytes() for f in files]
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
    return task_data("text", splits, seq_len, root, read, raw, note=note)


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
            text = fields[0].decode(errors="replace")
            try:
                float(text)  # LRA reads the label as a float: "1" or "1.0"
            except ValueError:
                if lineno == 1:  # a header: only the first line, and only if its label is no number ("nan" is one)
                    continue
            labels.append(class_index(f"{path}:{lineno}: label", text, "retrieval", AAN_FORMAT))
            first.append(fields[3])
            second.append(fields[4])
    if not labels:
        raise UserError(f"{path}: no rows; every split needs examples; expected {AAN_FORMAT}")
    return Split(x0=encode_documents(first, seq_len), y=torch.tensor(labels, dtype=torch.int64),
                 x1=encode_documents(second, seq_len))


def load_aan(data_dir: str | Path, *, seq_len: int) -> TaskData:
    """The Retrieval task from LRA's AAN tsv files: byte-level document pairs."""
    root = Path(data_dir)
    splits = {name: _read_aan(root / file, seq_len) for name, file in AAN_FILES.items()}
    return task_data("retrieval", splits, seq_len, root, [root / file for file in AAN_FILES.values()])
