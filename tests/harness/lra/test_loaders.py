"""Real-data loaders, on small fixture files written here in each real format."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from harness.errors import UserError
from harness.lra import loaders
from harness.lra.load import load_task
from harness.lra.tasks import PAD_ID

# ---------------------------------------------------------------------------------------------------------------------
# Fixture writers, one per format


def write_pickle(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f)
    return path


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


def write_lra_pickles(root: Path, task: str, *, n: int = 6, length: int = 12, **kwargs: Any) -> dict[str, list]:
    out = {}
    for split_i, split in enumerate(("train", "dev", "test")):
        out[split] = lra_records(n, length, seed=split_i, dual=task == "retrieval", **kwargs)
        write_pickle(root / f"{loaders.PICKLE_PREFIX[task]}.{split}.pickle", out[split])
    return out


def write_cifar(root: Path, n: int = 10) -> dict[str, np.ndarray]:
    """Six CIFAR-10 batches of ``n`` images (bytes keys, uint8 [n, 3072] RGB planes), as the python version."""
    rng = np.random.default_rng(0)
    batches = {}
    for name in (*loaders.CIFAR_TRAIN_BATCHES, "test_batch"):
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        write_pickle(root / name, {b"batch_label": name.encode(), b"data": data, b"labels": list(range(n))})
        batches[name] = data
    return batches


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
    assert td.source == str(tmp_path) and td.dual == (task == "retrieval") and td.seq_len == 8
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
def test_lra_pixel_pickles_are_shifted_off_padding(tmp_path: Path, task: str) -> None:
    records = write_lra_pickles(tmp_path, task, length=1024, pixels=True)
    td = load_task(task, data_dir=tmp_path)
    assert td.seq_len == 1024 and td.vocab_size == 257
    assert torch.equal(td.dev.x0, torch.from_numpy(np.stack([r["input_ids_0"] for r in records["dev"]])).long() + 1)
    assert td.train.mask0().all()  # black pixels are tokens, not padding


def test_cifar10_batches(tmp_path: Path) -> None:
    batches = write_cifar(tmp_path / "cifar-10-batches-py")
    td = load_task("image", data_dir=tmp_path)  # found in the standard subdirectory
    # Five batches of 10 = 50 training images; dev = the last 10% of them, as LRA's train[90%:].
    assert (len(td.train), len(td.dev), len(td.test)) == (45, 5, 10)
    assert td.vocab_size == 257 and td.num_classes == 10 and td.seq_len == 1024
    last = batches["data_batch_5"][-1].reshape(3, 32, 32).astype(float)  # the last dev image, RGB planes
    gray = np.rint(0.2989 * last[0] + 0.5870 * last[1] + 0.1140 * last[2])
    assert torch.equal(td.dev.x0[-1], torch.from_numpy(gray.reshape(-1)).long() + 1)
    assert td.dev.y.tolist() == [5, 6, 7, 8, 9]
    first_test = batches["test_batch"][0].reshape(3, 32, 32).astype(float)
    assert td.test.x0[0, 33].item() == np.rint(0.2989 * first_test[0, 1, 1] + 0.5870 * first_test[1, 1, 1]
                                               + 0.1140 * first_test[2, 1, 1]) + 1
    pixels, labels = loaders.read_cifar10(tmp_path / "cifar-10-batches-py")["train"]
    assert pixels.shape == (45, 32, 32) and pixels.dtype == np.uint8 and labels.shape == (45,)


def test_cifar10_truncated_to_any_seq_len(tmp_path: Path) -> None:
    write_cifar(tmp_path, n=2)
    td = load_task("image", data_dir=tmp_path, seq_len=1000)  # real data needs no square length
    assert td.train.x0.shape == (9, 1000)


def test_imdb(tmp_path: Path) -> None:
    write_imdb(tmp_path / "aclImdb")
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
    td = loaders.load_aan(tmp_path, seq_len=4)
    assert td.train.y.tolist() == [1]


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


@pytest.mark.parametrize(
    ("make", "problem"),
    [
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
