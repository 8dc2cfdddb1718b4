"""Real-data loaders, on small fixture files written here in each real format."""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import pickle
import resource
import signal
import struct
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from harness.core.errors import UserError
from harness.core.files import sha256_file
from harness.kinds.accuracy import loaders, pickles
from harness.kinds.accuracy.data import load_task
from harness.kinds.accuracy.data import load_task as load_data
from harness.kinds.accuracy.tasks import RETRIEVAL, TASK_TABLE, TEXT
from harness.models.tasks import PAD_ID

# ---------------------------------------------------------------------------------------------------------------------
# Fixture writers, one per format


class Python2Pickler(pickle._Pickler):
    """Protocol 2 as Python 2's cPickle wrote the CIFAR-10 batches: every string a byte string (the dict's keys,
    numpy's dtype codes and array data), which ``encoding="bytes"`` reads back as bytes."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_byte_string(self, obj: str | bytes) -> None:
        data = obj.encode("latin1") if isinstance(obj, str) else obj
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[str] = dispatch[bytes] = save_byte_string


def write_pickle(path: Path, obj: Any, protocol: int | str = pickle.DEFAULT_PROTOCOL) -> Path:
    """``obj`` pickled with ``protocol``, or as numpy 1 wrote it ("numpy1": protocol 2, numpy.core names), or as
    Python 2 did ("python2": numpy 1 names, byte strings)."""
    buffer = io.BytesIO()
    if protocol == "python2":
        Python2Pickler(buffer, protocol=2).dump(obj)
    else:
        pickle.dump(obj, buffer, protocol=2 if protocol == "numpy1" else int(protocol))
    raw = buffer.getvalue()
    if protocol in ("numpy1", "python2"):
        raw = raw.replace(b"cnumpy._core.", b"cnumpy.core.")  # the GLOBAL opcodes of numpy 1's module names
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return path


@dataclass
class Call:
    """Unpickling it calls ``func(*args)``: what a tampered data file can make ``pickle.load`` do."""

    func: Callable[..., Any]
    args: tuple[Any, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        return self.func, self.args


def touch(path: Path) -> Call:
    return Call(os.system, (f"touch {path}",))


def lra_records(n: int, length: int, *, dual: bool = False, pixels: bool = False, seed: int = 0) -> list[dict]:
    """Records like the PyTorch LRA scripts dump: int32 ids zero-padded at the end, numpy int labels."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        rec: dict[str, Any] = {"label": np.int32(i % 2)}
        for key in ("input_ids_0", "input_ids_1") if dual else ("input_ids_0",):
            if pixels:
                ids = rng.integers(0, 256, size=length).astype(np.int32)  # raw intensities, 0 = black
            else:
                real = int(rng.integers(1, length))
                ids = np.concatenate([rng.integers(1, 20, size=real), np.zeros(length - real)]).astype(np.int32)
            rec[key] = ids
        records.append(rec)
    return records


def write_lra_pickles(root: Path, task: str, *, n: int = 6, length: int = 12, protocol: int | str = 4,
                      **kwargs: Any) -> dict[str, list]:
    out = {}
    for split_i, split in enumerate(("train", "dev", "test")):
        out[split] = lra_records(n, length, seed=split_i, dual=task == "retrieval", **kwargs)
        write_pickle(root / f"{TASK_TABLE[task].pickle_prefix({})}.{split}.pickle", out[split], protocol)
    return out


def write_cifar(root: Path, n: int = 10, protocol: int | str = 4) -> dict[str, np.ndarray]:
    """Six CIFAR-10 batches of ``n`` images (bytes keys, uint8 [n, 3072] RGB planes), as the python version."""
    rng = np.random.default_rng(0)
    batches = {}
    for name in (*loaders.CIFAR_TRAIN_BATCHES, "test_batch"):
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = [i % 10 for i in range(n)]
        write_pickle(root / name, {b"batch_label": name.encode(), b"data": data, b"labels": labels}, protocol)
        batches[name] = data
    return batches


def gray(rows: np.ndarray) -> np.ndarray:
    """LRA's grayscale of CIFAR rows uint8 [N, 3072] (RGB planes), int64 [N, 32, 32]: tf.image.rgb_to_grayscale's
    float32 steps, written out here as the reference (scale by 1/255, weigh, scale by 255.5, truncate)."""
    f32 = np.float32
    rgb = rows.reshape(-1, 3, 32, 32).astype(f32) * f32(1 / 255)  # [N, 3072] -> [N, channel, row, col]
    level = rgb[:, 0] * f32(0.2989) + rgb[:, 1] * f32(0.5870) + rgb[:, 2] * f32(0.1140)
    return np.trunc(level * f32(255.5)).astype(np.int64)


def write_imdb(root: Path, per_class: int = 10) -> None:
    for part in ("train", "test"):
        for name in ("pos", "neg"):
            folder = root / part / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                (folder / f"{i}_7.txt").write_bytes(f"{part} {name} review {i} <br />".encode() + bytes([200, 0]))


def write_aan(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for split, file in loaders.AAN_FILES.items():
        rows = [f"{i % 2}\tid{i}a\tid{i}b\t{split} doc {i} first\t{split} doc {i} second" for i in range(4)]
        (root / file).write_text("\n".join(rows) + "\n")


# ---------------------------------------------------------------------------------------------------------------------
# Reading each format


@pytest.mark.parametrize("task", ["listops", "text", "retrieval"])
def test_lra_token_pickles_keep_their_ids(tmp_path: Path, task: str) -> None:
    records = write_lra_pickles(tmp_path, task)
    td = load_task(task, data_dir=tmp_path, seq_len=8)
    files = [f"{TASK_TABLE[task].pickle_prefix({})}.{name}.pickle" for name in ("dev", "test", "train")]
    sums = ", ".join(f"{f} sha256:{sha256_file(tmp_path / f)}" for f in files)  # whole digests
    assert td.source == f"files in {tmp_path}: {sums}"  # the files and their checksums, in name order
    assert td.dual == (task == "retrieval") and td.seq_len == 8
    for name, split in td.splits().items():
        expected = np.stack([r["input_ids_0"][:8] for r in records[name]])
        assert torch.equal(split.x0, torch.from_numpy(expected).long())
        assert split.y.tolist() == [int(r["label"]) for r in records[name]]
        assert (split.x1 is not None) == td.dual
    assert td.vocab_size == max(int(s.x0.max()) for s in td.splits().values()) + 1
    assert td.num_classes == {"listops": 10, "text": 2, "retrieval": 2}[task]


def test_lra_pickles_are_padded_to_seq_len(tmp_path: Path) -> None:
    write_lra_pickles(tmp_path, "listops", length=5)
    td = load_task("listops", data_dir=tmp_path, seq_len=9, max_depth=6)  # generator parameters are not used
    assert td.train.x0.shape == (6, 9) and (td.train.x0[:, 5:] == PAD_ID).all()


@pytest.mark.parametrize("task", ["image", "pathfinder"])
def test_lra_pixel_pickles_as_released_or_shifted_off_padding(tmp_path: Path, task: str) -> None:
    records = write_lra_pickles(tmp_path, task, length=1024, pixels=True)
    raw = torch.from_numpy(np.stack([r["input_ids_0"] for r in records["dev"]])).long()
    td = load_task(task, data_dir=tmp_path)  # pixel_ids: released, as the released pipeline reads its pickles
    assert td.seq_len == 1024 and td.vocab_size == 256 and torch.equal(td.dev.x0, raw)
    assert torch.equal(td.dev.mask0(), raw != 0)  # black pixels are padding there
    assert td.source.endswith("pixel_ids=released")
    td = load_task(task, data_dir=tmp_path, options={"pixel_ids": "shifted"})
    assert td.vocab_size == 257 and torch.equal(td.dev.x0, raw + 1)
    assert td.train.mask0().all()  # black pixels are tokens, not padding


def test_cifar10_batches(tmp_path: Path) -> None:
    batches = write_cifar(tmp_path / "cifar-10-batches-py")
    # found in the standard subdirectory; every pixel a token (pixel_ids: shifted)
    td = load_task("image", data_dir=tmp_path, options={"pixel_ids": "shifted"})
    # Five batches of 10 = 50 training images; dev = the last 10% of them, as LRA's train[90%:].
    assert (len(td.train), len(td.dev), len(td.test)) == (45, 5, 10)
    assert td.vocab_size == 257 and td.num_classes == 10 and td.seq_len == 1024
    released = load_task("image", data_dir=tmp_path)  # the default: id = intensity
    assert released.vocab_size == 256 and torch.equal(released.dev.x0 + 1, td.dev.x0)
    last = batches["data_batch_5"][-1:]  # the last dev image
    assert torch.equal(td.dev.x0[-1], torch.from_numpy(gray(last).reshape(-1)) + 1)
    assert td.dev.y.tolist() == [5, 6, 7, 8, 9]
    assert torch.equal(td.test.x0, torch.from_numpy(gray(batches["test_batch"]).reshape(10, -1)) + 1)
    pixels, labels = loaders.read_cifar10(tmp_path / "cifar-10-batches-py")["train"]
    assert pixels.shape == (45, 32, 32) and pixels.dtype == np.uint8 and labels.shape == (45,)


def test_cifar10_grayscale_truncates_as_tensorflow_does(tmp_path: Path) -> None:
    """tf.image.rgb_to_grayscale on uint8 (LRA's Image pipeline): float32 x/255, weights 0.2989, 0.5870, 0.1140,
    then x 255.5 and a truncating cast. On these pixels rounding the weighted sum gives one level more."""
    pixels = [(100, 0, 0), (0, 100, 0), (0, 0, 200), (50, 100, 150), (10, 20, 30), (255, 255, 255), (0, 0, 0)]
    # by hand, weighted sum -> x 255.5/255 -> truncated (rounded): 29.89 -> 29.949 -> 29 (30); 58.70 -> 58.815 -> 58
    # (59); 22.80 -> 22.845 -> 22 (23); 90.745 -> 90.923 -> 90 (91); 18.149 -> 18.185 -> 18 (18); 254.97 -> 255.47
    # -> 255 (255); 0 -> 0 (0)
    expected = [29, 58, 22, 90, 18, 255, 0]
    rows = np.zeros((1, 3072), dtype=np.uint8)
    planes = rows.reshape(3, 1024)  # [3072] -> [channel, pixel]: R, G, B planes
    for i, rgb in enumerate(pixels):
        planes[:, i] = rgb
    assert gray(rows).reshape(-1)[: len(pixels)].tolist() == expected  # the test's own float32 reference
    assert np.rint(planes[:, :4].T.astype(float) @ [0.2989, 0.5870, 0.1140]).tolist() == [30, 59, 23, 91]
    for name in (*loaders.CIFAR_TRAIN_BATCHES, "test_batch"):  # through the reader
        write_pickle(tmp_path / name, {b"data": np.repeat(rows, 2, axis=0), b"labels": [3, 3]})
    train, _ = loaders.read_cifar10(tmp_path)["train"]
    assert train[0].reshape(-1)[: len(pixels)].tolist() == expected
    many = np.random.default_rng(1).integers(0, 256, size=(64, 3072), dtype=np.uint8)
    assert np.array_equal(loaders.rgb_to_grayscale(many.reshape(-1, 3, 32, 32)), gray(many))


def test_cifar10_truncated_to_any_seq_len(tmp_path: Path) -> None:
    write_cifar(tmp_path, n=2)
    td = load_task("image", data_dir=tmp_path, seq_len=1000)  # real data needs no square length
    assert td.train.x0.shape == (9, 1000)


def test_imdb_dev_is_the_test_set_as_in_lra(tmp_path: Path) -> None:
    write_imdb(tmp_path / "aclImdb")
    td = load_task("text", data_dir=tmp_path, seq_len=40, seed=0)
    assert (len(td.train), len(td.dev), len(td.test)) == (20, 20, 20)
    assert torch.equal(td.dev.x0, td.test.x0) and td.source.endswith("; options: imdb_dev=test")


def test_imdb_heldout_dev(tmp_path: Path) -> None:
    write_imdb(tmp_path / "aclImdb")

    def load_task(task: str, **kwargs: Any) -> Any:  # the held-out dev split throughout this test
        return load_data(task, **kwargs, options={"imdb_dev": "heldout"})

    td = load_task("text", data_dir=tmp_path, seq_len=40, seed=0)
    assert (len(td.train), len(td.dev), len(td.test)) == (18, 2, 20)
    assert td.num_classes == 2 and td.vocab_size <= 257
    decoded = [bytes((row[row != PAD_ID] - 1).tolist()) for row in td.test.x0]
    assert decoded[0].startswith(b"test neg review 0 <br />") and td.test.y[0].item() == 0
    assert all(d.split()[1] == (b"pos" if y else b"neg") for d, y in zip(decoded, td.test.y.tolist(), strict=True))
    # The dev split is a seeded 10% of train: reproducible, seed-dependent, disjoint from the rest of train.
    again = load_task("text", data_dir=tmp_path, seq_len=40, seed=0)
    other = load_task("text", data_dir=tmp_path, seq_len=40, seed=5)
    assert torch.equal(again.dev.x0, td.dev.x0) and not torch.equal(other.dev.x0, td.dev.x0)
    rows = {tuple(r.tolist()) for r in torch.cat([td.train.x0, td.dev.x0])}
    assert len(rows) == 20


def test_imdb_reviews_are_stripped_as_tfds_strips_them(tmp_path: Path) -> None:
    """tfds' imdb_reviews yields ``imdb_f.read().strip()``, which LRA byte-encodes: no leading or trailing
    whitespace or newline becomes a token; inner whitespace and other bytes stay; checksums are of the files."""
    write_imdb(tmp_path)
    review = tmp_path / "test" / "neg" / "0_7.txt"
    review.write_bytes(b" \n\t\r Great  film.\nReally. \x0b\x0c\r\n\n")
    td = load_task("text", data_dir=tmp_path, seq_len=32)
    first = td.test.x0[0]
    assert bytes((first[first != PAD_ID] - 1).tolist()) == b"Great  film.\nReally."
    assert bytes((td.test.x0[1][td.test.x0[1] != PAD_ID] - 1).tolist()).endswith(bytes([200, 0]))  # NUL is no space
    assert loaders.load_imdb(TEXT, tmp_path, seq_len=32, seed=0).source == loaders.datasource.files(
        tmp_path, sorted(tmp_path.glob("*/*/*.txt")))


def test_imdb_truncates_long_reviews(tmp_path: Path) -> None:
    write_imdb(tmp_path)
    td = load_task("text", data_dir=tmp_path, seq_len=8)
    assert bytes((td.test.x0[0] - 1).tolist()) == b"test neg"


def test_aan_tsv(tmp_path: Path) -> None:
    write_aan(tmp_path / "tsv_data")
    td = load_task("retrieval", data_dir=tmp_path, seq_len=64)
    assert td.dual and (len(td.train), len(td.dev), len(td.test)) == (4, 4, 4)
    assert td.dev.y.tolist() == [0, 1, 0, 1]
    first = bytes((td.dev.x0[1][td.dev.mask0()[1]] - 1).tolist())
    second = bytes((td.dev.x1[1][td.dev.x1[1] != 0] - 1).tolist())
    assert (first, second) == (b"dev doc 1 first", b"dev doc 1 second")


def test_aan_header_and_float_labels(tmp_path: Path) -> None:
    write_aan(tmp_path)
    path = tmp_path / loaders.AAN_FILES["train"]
    path.write_text("label\tid1\tid2\ttext1\ttext2\n1.0\ta\tb\tx\ty\n")
    td = loaders.load_aan(RETRIEVAL, tmp_path, seq_len=4)
    assert td.train.y.tolist() == [1]


# ---------------------------------------------------------------------------------------------------------------------
# Pickles are data: every layout numpy and Python 2 write loads; nothing that calls other code does


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5, "numpy1", "python2"])
def test_pickles_of_every_protocol_load(tmp_path: Path, protocol: int | str) -> None:
    records = write_lra_pickles(tmp_path / "lra", "retrieval", protocol=protocol)
    td = load_task("retrieval", data_dir=tmp_path / "lra", seq_len=12)
    assert torch.equal(td.test.x1, torch.from_numpy(np.stack([r["input_ids_1"] for r in records["test"]])).long())
    assert td.test.y.tolist() == [int(r["label"]) for r in records["test"]]
    batches = write_cifar(tmp_path / "cifar", n=6, protocol=protocol)
    pixels, labels = loaders.read_cifar10(tmp_path / "cifar")["test"]
    assert np.array_equal(pixels, gray(batches["test_batch"])) and labels.tolist() == list(range(6))


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (touch(Path("pwned")), f"{os.system.__module__}.system"),
        (Call(eval, ("1 + 1",)), "builtins.eval"),
        (Call(codecs.encode, ("text", "rot13")), "_codecs.encode(..., 'rot13')"),  # only latin1, as pickle writes bytes
        (Call(np.load, ("x.npy",)), "numpy.load"),
    ],
)
def test_unpickler_refuses_any_other_callable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: Call,
                                              name: str) -> None:
    monkeypatch.chdir(tmp_path)
    raw = pickle.dumps([{"input_ids_0": call, "label": 0}], protocol=4)
    with pytest.raises(pickles.RefusedGlobal) as info:
        pickles.LraUnpickler(io.BytesIO(raw)).load()
    assert info.value.name == name and not (tmp_path / "pwned").exists()
    if call.func is os.system:  # the control: plain pickle runs the command
        pickle.loads(raw)
        assert (tmp_path / "pwned").exists()


# ---------------------------------------------------------------------------------------------------------------------
# Errors: one line naming the file, the problem and the expected format


def missing_dir(root: Path) -> tuple[str, Path]:
    return "listops", root / "nope"  # load_task is pointed at the culprit itself (see the test)


def missing_split(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "listops")
    (root / "listops.dev.pickle").unlink()
    return "listops", root / "listops.dev.pickle"


def not_a_list_of_dicts(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "text")
    return "text", write_pickle(root / "text.test.pickle", [{"label": 1, "input_ids_0": [1]}, [1, 2]])


def no_label(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "listops")
    return "listops", write_pickle(root / "listops.train.pickle", [{"input_ids_0": np.arange(1, 4)}])


def no_second_document(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "retrieval")
    return "retrieval", write_pickle(root / "retrieval.dev.pickle", [{"input_ids_0": [1, 2], "label": 0}])


def not_a_pickle(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "listops")
    (root / "listops.test.pickle").write_bytes(b"certainly not a pickle")
    return "listops", root / "listops.test.pickle"


def tsv_wrong_columns(root: Path) -> tuple[str, Path]:
    write_aan(root)
    path = root / loaders.AAN_FILES["test"]
    path.write_text("1\tid1\tid2\tonly one text\n")
    return "retrieval", path


def cifar_without_data(root: Path) -> tuple[str, Path]:
    write_cifar(root)
    return "image", write_pickle(root / "data_batch_3", {b"labels": [0, 1]})


def cifar_missing_batch(root: Path) -> tuple[str, Path]:
    write_cifar(root)
    (root / "test_batch").unlink()
    return "image", root / "test_batch"


def cifar_wrong_shape(root: Path) -> tuple[str, Path]:
    write_cifar(root)
    return "image", write_pickle(root / "data_batch_2", {b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]})


def imdb_missing_folder(root: Path) -> tuple[str, Path]:
    write_imdb(root)
    for f in (root / "test" / "neg").iterdir():
        f.unlink()
    (root / "test" / "neg").rmdir()
    return "text", root / "test" / "neg"


def nothing_recognised(root: Path) -> tuple[str, Path]:
    (root / "README").write_text("hello")
    return "pathfinder", root


# Bad data the loaders used to accept, or to fail on with a traceback or terabytes of embedding.


def hostile_pickle(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "listops")
    return "listops", write_pickle(root / "listops.train.pickle", [{"input_ids_0": touch(root / "pwned"), "label": 0}])


def hostile_cifar_batch(root: Path) -> tuple[str, Path]:
    write_cifar(root)
    return "image", write_pickle(root / "data_batch_4", {b"data": touch(root / "pwned"), b"labels": [0]}, "python2")


def empty_train_pickle(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "listops")
    return "listops", write_pickle(root / "listops.train.pickle", [])


def label_beyond_classes(root: Path) -> tuple[str, Path]:
    records = write_lra_pickles(root, "listops")["dev"]
    records[1]["label"] = np.int32(10)
    return "listops", write_pickle(root / "listops.dev.pickle", records)


def label_inf(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "text")
    return "text", write_pickle(root / "text.test.pickle", [{"input_ids_0": np.arange(1, 4), "label": np.inf}])


def huge_token_id(root: Path) -> tuple[str, Path]:
    records = write_lra_pickles(root, "retrieval")["train"]
    records[2]["input_ids_1"] = np.array([5, 10**12, 0], dtype=np.int64)
    return "retrieval", write_pickle(root / "retrieval.train.pickle", records)


def pixel_above_255(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "pathfinder", pixels=True)
    path = root / f"{TASK_TABLE['pathfinder'].pickle_prefix({})}.dev.pickle"
    return "pathfinder", write_pickle(path, [{"input_ids_0": np.array([0, 256], dtype=np.int32), "label": 1}])


def ragged_ids(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "listops")
    return "listops", write_pickle(root / "listops.test.pickle", [{"input_ids_0": [[1, 2], [3]], "label": 1}])


def tsv_rows(root: Path, rows: list[str]) -> tuple[str, Path]:
    """The AAN files, with the train file's rows (label first) replaced by ``rows``."""
    write_aan(root)
    path = root / loaders.AAN_FILES["train"]
    path.write_text("".join(f"{label}\tid1\tid2\tfirst\tsecond\n" for label in rows))
    return "retrieval", path


def tsv_label_inf(root: Path) -> tuple[str, Path]:
    return tsv_rows(root, ["1", "inf"])


def tsv_label_nan_first(root: Path) -> tuple[str, Path]:
    return tsv_rows(root, ["nan", "1"])  # a number, so not a header


def tsv_label_2(root: Path) -> tuple[str, Path]:
    return tsv_rows(root, ["label", "0", "2.0"])


def tsv_second_header(root: Path) -> tuple[str, Path]:
    return tsv_rows(root, ["label", "1", "label"])  # only the first line may be a header


def tsv_header_only(root: Path) -> tuple[str, Path]:
    return tsv_rows(root, ["label"])


def cifar_label_10(root: Path) -> tuple[str, Path]:
    write_cifar(root)
    data = np.zeros((2, 3072), np.uint8)
    return "image", write_pickle(root / "test_batch", {b"data": data, b"labels": [3, 10]}, "python2")


def cifar_empty_test_batch(root: Path) -> tuple[str, Path]:
    write_cifar(root)
    return "image", write_pickle(root / "test_batch", {b"data": np.zeros((0, 3072), np.uint8), b"labels": []})


def cifar_too_few_for_dev(root: Path) -> tuple[str, Path]:
    write_cifar(root, n=1)  # 5 training images: 10% of them rounds to none
    return "image", root


def label_true(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "text")
    return "text", write_pickle(root / "text.dev.pickle", [{"input_ids_0": np.arange(1, 4), "label": True}])


def label_text(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "listops")
    return "listops", write_pickle(root / "listops.train.pickle", [{"input_ids_0": np.arange(1, 4), "label": "3"}])


def label_2x2_array(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "listops")
    return "listops", write_pickle(root / "listops.test.pickle", [{"input_ids_0": np.arange(1, 4),
                                                                   "label": np.eye(2, dtype=np.int64)}])


def cifar_data_a_list(root: Path) -> tuple[str, Path]:
    """b'data' as a list referencing one row (a list of ints) many times: a small file numpy would turn into an
    int64 array of every row before the dtype check (the issue's case: 400,000 references, 9.8 GB)."""
    write_cifar(root)
    row = [7] * 3072
    return "image", write_pickle(root / "data_batch_1", {b"data": [row] * 20, b"labels": [0] * 20})


def outside(root: Path, name: str, content: bytes) -> Path:
    """A file beside ``root``, outside the data folder the test points the loader at."""
    path = root.parent / f"{root.name}-outside" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def imdb_review_a_directory(root: Path) -> tuple[str, Path]:
    write_imdb(root)
    (root / "train" / "pos" / "zz.txt").mkdir()
    return "text", root / "train" / "pos" / "zz.txt"


def imdb_review_outside(root: Path) -> tuple[str, Path]:
    write_imdb(root)
    link = root / "test" / "neg" / "zz.txt"
    link.symlink_to(outside(root, "secret.txt", b"not a review of this data set"))
    return "text", link


def pickle_outside(root: Path) -> tuple[str, Path]:
    write_lra_pickles(root, "listops")
    elsewhere = root.parent / f"{root.name}-outside"
    write_lra_pickles(elsewhere, "listops")
    link = root / "listops.dev.pickle"
    link.unlink()
    link.symlink_to(elsewhere / "listops.dev.pickle")
    return "listops", link


BAD_DATA = [
    (hostile_pickle, f"attnbench refuses to unpickle {os.system.__module__}.system: only Python containers and "
                     "numpy arrays, dtypes and scalars are allowed; this file is not an LRA pickle or was tampered"),
    (hostile_cifar_batch, f"refuses to unpickle {os.system.__module__}.system"),
    (empty_train_pickle, "no records (an empty list)"),
    (label_beyond_classes, "record 1 'label' 10 is not a class of listops (an integer in 0..9)"),
    (label_inf, "record 0 'label' inf is not a class of text (an integer in 0..1)"),
    (huge_token_id, "record 2 'input_ids_1' holds 1000000000000, above 1048575, the largest token id accepted"),
    (pixel_above_255, "record 0 'input_ids_0' holds 256, above 255, the largest 8-bit intensity"),
    (ragged_ids, "record 0 'input_ids_0' is not an array of non-negative ints"),
    (tsv_label_inf, ":2: label 'inf' is not a class of retrieval (an integer in 0..1)"),
    (tsv_label_nan_first, ":1: label 'nan' is not a class of retrieval"),
    (tsv_label_2, ":3: label '2.0' is not a class of retrieval"),
    (tsv_second_header, ":3: label 'label' is not a class of retrieval"),
    (tsv_header_only, "no rows"),
    (cifar_label_10, "b'labels' holds 10, not a class of image (an integer in 0..9)"),
    (cifar_empty_test_batch, "b'data' holds no images"),
    (cifar_too_few_for_dev, "5 training examples leave the dev split (10% of them) empty"),
    # values accepted without a word: a bool, text or a 2x2 array is no class (not 1, 3 or the first element)
    (label_true, "record 0 'label' is True (a bool), not a class of text"),
    (label_text, "record 0 'label' is '3' (text), not a class of listops"),
    (label_2x2_array, "record 0 'label' is a 2x2 int64 array, not a class of listops"),
    (cifar_data_a_list, "b'data' is a list, not a uint8 array [N, 3072]"),
    # what a *.txt match or a pickle's name may be besides a file of the data folder
    (imdb_review_a_directory, "zz.txt: a directory, not a regular file; remove it"),
    (imdb_review_outside, "-outside/secret.txt, outside the data folder"),
    (pickle_outside, "-outside/listops.dev.pickle, outside the data folder"),
]


def test_imdb_too_few_for_a_heldout_dev(tmp_path: Path) -> None:
    write_imdb(tmp_path, per_class=1)
    with pytest.raises(UserError, match="2 training examples leave the dev split"):
        load_task("text", data_dir=tmp_path, seq_len=16, options={"imdb_dev": "heldout"})


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        *BAD_DATA,
        (missing_dir, "data directory not found"),
        (missing_split, "file not found"),
        (not_a_list_of_dicts, "not a list of dicts"),
        (no_label, "has no 'label'"),
        (no_second_document, "has no 'input_ids_1'"),
        (not_a_pickle, "cannot be unpickled"),
        (tsv_wrong_columns, "4 tab-separated columns"),
        (cifar_without_data, "no b'data' entry"),
        (cifar_missing_batch, "file not found"),
        (cifar_wrong_shape, "(2, 100)"),
        (imdb_missing_folder, "directory not found"),
        (nothing_recognised, "no pathfinder data found"),
    ],
)
def test_malformed_data_is_a_user_error(
    tmp_path: Path, make: Callable[[Path], tuple[str, Path]], problem: str
) -> None:
    task, culprit = make(tmp_path)
    with pytest.raises(UserError) as info:
        load_task(task, data_dir=culprit if make is missing_dir else tmp_path, seq_len=16)
    message = str(info.value)
    assert "\n" not in message
    assert str(culprit) in message and problem in message and "expected" in message
    assert not (tmp_path / "pwned").exists()


def test_a_tiny_pickle_that_would_build_gigabytes_is_refused_at_once() -> None:
    """``frozenset(bytes(3_000_000_000))`` in 40 bytes (protocol 2 opcodes): 63 s of one core before its error, when
    ``bytes`` and ``frozenset`` were allowed as they are; refused now before anything is built."""
    import io
    import time

    from harness.kinds.accuracy.pickles import LraUnpickler, RefusedGlobal

    bomb = b"\x80\x02cbuiltins\nfrozenset\ncbuiltins\nbytes\n\x8a\x05\x00^\xd0\xb2\x00\x85R\x85R."
    started = time.perf_counter()
    with pytest.raises(RefusedGlobal, match="bytes"):
        LraUnpickler(io.BytesIO(bomb)).load()
    assert time.perf_counter() - started < 1.0
    big_array = (b'\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarra'
                 b'y\nJ\x00\xe1\xf5\x05J\x00\xe1\xf5\x05\x86c_codecs\nencode\nX\x01\x00\x00\x00bX\x06\x00\x00\x00latin1\x86R\x87R.')
    with pytest.raises(RefusedGlobal, match="array"):
        LraUnpickler(io.BytesIO(big_array)).load()


# ---------------------------------------------------------------------------------------------------------------------
# Resources: memory bounded before it is taken, no read that never ends


@contextlib.contextmanager
def memory_ceiling(extra: int = 2**30) -> Iterator[None]:
    """This process's address space capped at its size now + ``extra`` bytes inside: should a fix regress, the old
    behaviour (gigabytes asked for) fails at once with a MemoryError instead of exhausting the machine."""
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    before = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)


@contextlib.contextmanager
def deadline(seconds: int = 5) -> Iterator[None]:
    """A TimeoutError after ``seconds`` (SIGALRM interrupts a blocking open): a hang fails the test, not the suite."""
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still reading after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


LINUX = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")


def shared_record_pickle(root: Path, ids: int, times: int) -> Path:
    """The listops pickles, the train split replaced by ``times`` references to one record of ``ids`` ids: a small
    file (one array, then a memo reference per record) whose records hold ``ids * times`` ids."""
    write_lra_pickles(root, "listops")
    record = {"input_ids_0": np.arange(ids, dtype=np.int32) % 17, "label": np.int32(1)}
    return write_pickle(root / "listops.train.pickle", [record] * times)


@LINUX
def test_a_pickle_that_lists_one_huge_record_many_times_is_refused_at_once(tmp_path: Path) -> None:
    """The issue's file: one 200,000-id record referenced 20,000 times, 840 KB, asked for 16 GB (each record copied
    whole by ``+ shift``) before a numpy traceback. Its records hold 4e9 ids, above MAX_SPLIT_IDS: refused before
    any array is built."""
    path = shared_record_pickle(tmp_path, 200_000, 20_000)
    assert path.stat().st_size < 2**20
    with memory_ceiling(), pytest.raises(UserError) as info:
        load_task("listops", data_dir=tmp_path, seq_len=16)
    assert f"{path}: its records hold 4,000,000,000 ids (a record counts each time the file lists it), more than " \
           f"the {loaders.MAX_SPLIT_IDS:,}" in str(info.value)


def test_records_are_cut_to_seq_len_before_they_are_copied(tmp_path: Path) -> None:
    """200 references to one 200,000-id record (800 KB): copied whole, 160 MB; cut to 16 ids first, a few KB."""
    shared_record_pickle(tmp_path, 200_000, 200)
    tracemalloc.start()
    try:
        td = load_task("listops", data_dir=tmp_path, seq_len=16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak:,} bytes"
    assert td.train.x0.shape == (200, 16) and td.train.x0[0].tolist() == list(range(16))


@pytest.mark.parametrize(("ids", "times", "seq_len", "problem"), [
    (1_000, 50, 16, "its records hold 50,000 ids (a record counts each time the file lists it)"),
    (1, 50, 1_000, "its 50 records, each cut or padded to seq_len 1,000, would hold 50,000 ids"),
])
def test_the_id_cap_counts_every_reference_and_the_padding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           ids: int, times: int, seq_len: int, problem: str) -> None:
    path = shared_record_pickle(tmp_path, ids, times)
    monkeypatch.setattr(loaders, "MAX_SPLIT_IDS", 10_000)
    with pytest.raises(UserError, match="more than the 10,000 of a split attnbench reads") as info:
        load_task("listops", data_dir=tmp_path, seq_len=seq_len)
    assert f"{path}: {problem}" in str(info.value)


@LINUX
def test_a_cifar_batch_of_one_row_listed_400000_times_is_refused_before_numpy_converts_it(tmp_path: Path) -> None:
    """The issue's 1.6 MB batch ``{b"data": [row] * 400000}`` held a 9.8 GB array for a minute before the dtype
    check; its type is checked first now."""
    write_cifar(tmp_path)
    path = write_pickle(tmp_path / "data_batch_2", {b"data": [[7] * 3072] * 400_000, b"labels": [0] * 400_000})
    started = time.perf_counter()
    with memory_ceiling(), pytest.raises(UserError, match="b'data' is a list, not a uint8 array"):
        loaders.read_cifar10(tmp_path)
    assert time.perf_counter() - started < 5 and path.stat().st_size < 2 * 2**20


@pytest.mark.parametrize("error", [MemoryError(), RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. "
                                                                "DefaultCPUAllocator: can't allocate memory: you tried "
                                                                "to allocate 17179869184 bytes.")])
def test_running_out_of_memory_while_reading_is_one_line_naming_the_file(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         error: Exception) -> None:
    write_lra_pickles(tmp_path, "text")

    def no_memory(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(loaders, "pad_or_truncate", no_memory)
    with pytest.raises(UserError) as info:
        load_task("text", data_dir=tmp_path, seq_len=16)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'text.train.pickle'}: does not fit in this machine's memory")
    assert "use a machine with more memory, a smaller seq_len or a smaller file" in message and "\n" not in message


def test_an_imdb_review_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO named zz.txt hung the run forever with no output (open() waits for a writer)."""
    write_imdb(tmp_path)
    fifo = tmp_path / "train" / "pos" / "zz.txt"
    os.mkfifo(fifo)
    with deadline(5), pytest.raises(UserError) as info:
        load_task("text", data_dir=tmp_path, seq_len=16)
    assert str(info.value).startswith(f"{fifo}: a FIFO (named pipe), not a regular file; remove it")


@LINUX
def test_an_imdb_review_linked_to_dev_zero_is_refused_not_read(tmp_path: Path) -> None:
    """A link to /dev/zero read without bound; it lies outside the data folder (and is no regular file)."""
    write_imdb(tmp_path)
    link = tmp_path / "test" / "pos" / "zz.txt"
    link.symlink_to("/dev/zero")
    with deadline(5), memory_ceiling(), pytest.raises(UserError) as info:
        load_task("text", data_dir=tmp_path, seq_len=16)
    assert str(info.value).startswith(f"{link}: resolves to /dev/zero, outside the data folder {tmp_path}")


def test_an_imdb_review_above_the_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    write_imdb(tmp_path)
    big = tmp_path / "train" / "neg" / "zz.txt"
    with open(big, "wb") as f:
        f.truncate(loaders.MAX_REVIEW_BYTES + 1)  # sparse: nothing written
    with pytest.raises(UserError) as info:
        load_task("text", data_dir=tmp_path, seq_len=16)
    assert str(info.value).startswith(f"{big}: 1,048,577 bytes, above the cap of 1,048,576 bytes for a review")


def test_files_under_the_data_folder_may_be_links_within_it(tmp_path: Path) -> None:
    """The rule is where a file really is, not whether it is a link: a review linked to another file of the folder,
    and a data folder given through a link, still load."""
    write_imdb(tmp_path / "real")
    review = tmp_path / "real" / "train" / "pos" / "zz.txt"
    review.symlink_to(tmp_path / "real" / "train" / "neg" / "0_7.txt")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    td = load_task("text", data_dir=tmp_path / "link", seq_len=16)
    assert len(td.train) == 21


def test_uint8_pixels_are_shifted_without_wrapping(tmp_path: Path) -> None:
    """A pixel pickle of uint8 arrays: under ``shifted`` 255 is id 256, not 0 (uint8 arithmetic wraps)."""
    for split in ("train", "dev", "test"):
        records = [{"input_ids_0": np.full(4, 255, np.uint8), "label": np.int32(i % 2)} for i in range(6)]
        write_pickle(tmp_path / f"{TASK_TABLE['image'].pickle_prefix({})}.{split}.pickle", records)
    td = load_task("image", data_dir=tmp_path, seq_len=4, options={"pixel_ids": "shifted"})
    assert td.train.x0.unique().tolist() == [256] and td.vocab_size == 257
