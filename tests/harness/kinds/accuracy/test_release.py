"""The LRA release as it unpacks (lra_release/lra_release/...): ListOps' tsv files and Pathfinder's PNGs with their
metadata, written here byte for byte as the release's generators write them, then read alone and through a whole
accuracy run with CIFAR-10 and aclImdb beside the release."""

from __future__ import annotations

import csv
import io
import random
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.core.errors import UserError
from harness.core.files import sha256_file
from harness.core.store import Store
from harness.kinds.accuracy import release
from harness.kinds.accuracy.data import load_task
from tests.conftest import REPO_ROOT, CliResult

from .test_loaders import write_aan, write_cifar, write_imdb

# ---------------------------------------------------------------------------------------------------------------------
# The release's files, as its generators write them

OPERATORS = {"[MIN": min, "[MAX": max, "[MED": lambda v: int(np.median(v)), "[SM": lambda v: sum(v) % 10}


def listops_tree(rng: random.Random, depth: int = 1) -> tuple[str, int]:
    """(expression, value) in LRA's listops.py form: an operator applied left to right to its arguments, each step
    in parentheses, ``]`` closing it: ``( ( ( [MAX 2 ) 9 ) ] )``."""
    if depth >= 3 or rng.random() > 0.5:
        value = rng.randrange(10)
        return str(value), value
    op = rng.choice(sorted(OPERATORS))
    args = [listops_tree(rng, depth + 1) for _ in range(rng.randint(2, 3))]
    text = f"( {op} {args[0][0]} )"
    for arg, _ in args[1:]:
        text = f"( {text} {arg} )"
    return f"( {text} ] )", int(OPERATORS[op]([v for _, v in args]))


def write_listops(folder: Path, rows: int = 24, seed: int = 0) -> dict[str, list[tuple[str, int]]]:
    """basic_{train,val,test}.tsv as LRA's ``write_to_file``: csv.writer with a tab delimiter (so CRLF line ends),
    the header Source, Target."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    written = {}
    for split, name in release.LISTOPS_FILES.items():
        data = [listops_tree(rng) for _ in range(rows)]
        buffer = io.StringIO()
        writer = csv.writer(buffer, delimiter="\t")
        writer.writerow(["Source", "Target"])
        writer.writerows(data)
        (folder / name).write_bytes(buffer.getvalue().encode())
        written[split] = data
    return written


def png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def write_pathfinder(folder: Path, side: int = 32, images: int = 20, files: int = 2, empty: int = 1
                     ) -> list[tuple[np.ndarray, int]]:
    """``folder/{imgs/K/sample_I.png, metadata/K.npy}`` as the Pathfinder generator lays them out: each metadata
    file a text file of lines ``imgs/K sample_I.png I LABEL ...``; ``empty`` listed images are empty files (the
    release has some). Returns the non-empty images and labels in metadata order."""
    rng = np.random.default_rng(side)
    kept = []
    for k in range(files):
        (folder / "imgs" / str(k)).mkdir(parents=True, exist_ok=True)
        (folder / "metadata").mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(images // files):
            label = int(rng.integers(2))
            pixels = np.where(rng.random((side, side)) < 0.1, 191, 0)
            pixels[0, 0] = 255  # a marker: never entirely black
            blank = k == 0 and i < empty
            (folder / "imgs" / str(k) / f"sample_{i}.png").write_bytes(b"" if blank else png(pixels))
            lines.append(f"imgs/{k} sample_{i}.png {i} {label} 14 1.5 2\n")
            if not blank:
                kept.append((pixels, label))
        (folder / "metadata" / f"{k}.npy").write_text("".join(lines))
    return kept


def write_release(root: Path) -> Path:
    """``root/lra_release/lra_release/`` with ListOps, AAN and Pathfinder, and CIFAR-10 and aclImdb beside it."""
    lra = root / "lra_release" / "lra_release"
    write_listops(lra / release.LISTOPS_DIR)
    write_aan(lra / "tsv_data")
    write_pathfinder(lra / "pathfinder32" / "curv_contour_length_14", images=30)
    write_cifar(root / "cifar-10-batches-py", n=10)
    write_imdb(root / "aclImdb")
    return root


# ---------------------------------------------------------------------------------------------------------------------
# ListOps


def test_listops_lra_tokenizer_drops_brackets_as_lra() -> None:
    source = "( ( ( [MAX 2 ) 9 ) ] )"
    assert release.listops_tokens(source, "lra") == ["MAX", "2", "9"]
    assert release.listops_tokens(source, "symbols") == ["(", "(", "(", "[MAX", "2", ")", "9", ")", "]", ")"]


@pytest.mark.parametrize("tokens", ["lra", "symbols"])
def test_listops_tsv_release_layout(tmp_path: Path, tokens: str) -> None:
    written = write_listops(tmp_path / "lra_release" / "lra_release" / "listops-1000")
    td = load_task("listops", data_dir=tmp_path, seq_len=40, options={"listops_tokens": tokens})
    assert (len(td.train), len(td.dev), len(td.test)) == (24, 24, 24)
    assert td.dev.y.tolist() == [v for _, v in written["dev"]]
    vocab = sorted({t for s, _ in written["train"] for t in release.listops_tokens(s, tokens)})
    first = release.listops_tokens(written["train"][0][0], tokens)[:40]
    assert td.train.x0[0, : len(first)].tolist() == [vocab.index(t) + 1 for t in first]
    assert td.vocab_size == len(vocab) + 2  # padding, the vocabulary, one id for a token unseen in training
    assert f"options: listops_tokens={tokens}" in td.source and "basic_train.tsv sha256:" in td.source


def test_listops_unseen_token_and_truncation(tmp_path: Path) -> None:
    write_listops(tmp_path)
    test_file = tmp_path / release.LISTOPS_FILES["test"]
    test_file.write_bytes(b"Source\tTarget\r\n( [FIRST 3 ] )\t3\r\n")
    td = load_task("listops", data_dir=tmp_path, seq_len=2)
    assert td.test.x0[0, 0].item() == td.vocab_size - 1  # FIRST is out of the vocabulary, then 3: cut at seq_len 2


@pytest.mark.parametrize(("content", "problem"), [
    (b"Input\tOutput\r\n1\t1\r\n", ":1: header ['Input', 'Output'] lacks Source and Target"),
    (b"Source\tTarget\r\n( [MAX 1 ] )\t12\r\n", ":2: Target '12' is not a class of listops"),
    (b"Source\tTarget\r\n( [MAX 1 ] )\r\n", ":2: 1 tab-separated columns, the header has 2"),
    (b"Source\tTarget\r\n", ": no rows"),
    # decoded with errors="replace", these became tokens without a word
    (b"Source\tTarget\r\n( [MAX 1 ] )\t1\r\n( [MAX \xff ] )\t1\r\n", ":3: not UTF-8 text (byte 0xff); save it"),
    (b"Source\tTarget\r\n( [MAX 1\x00 ] )\t1\r\n", ":2: a NUL byte, which no ListOps expression holds"),
])
def test_malformed_listops_file(tmp_path: Path, content: bytes, problem: str) -> None:
    write_listops(tmp_path)
    bad = tmp_path / release.LISTOPS_FILES["dev"]
    bad.write_bytes(content)
    with pytest.raises(UserError) as info:
        load_task("listops", data_dir=tmp_path, seq_len=16)
    assert f"{bad}{problem}" in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------------------------------------------------------------
# Pathfinder


def test_pathfinder_release_layout(tmp_path: Path) -> None:
    folder = tmp_path / "pathfinder32" / "curv_contour_length_14"
    kept = write_pathfinder(folder, images=30, files=3)
    td = load_task("pathfinder", data_dir=tmp_path, seq_len=1024, seed=0)
    # 29 non-empty images cut 80/10/10 as int(0.8 n), int(0.9 n): 23, 3, 3
    assert (len(td.train), len(td.dev), len(td.test)) == (23, 3, 3)
    order = np.random.default_rng(0).permutation(len(kept))
    pixels, labels = kept[order[0]]
    assert torch.equal(td.train.x0[0], torch.from_numpy(pixels.reshape(-1)).long())  # released: id = intensity
    assert td.train.y[0].item() == labels and td.vocab_size == 256
    assert "30 files" not in td.source and "32 files" in td.source  # 3 metadata files + 29 images
    again = load_task("pathfinder", data_dir=tmp_path, seq_len=1024, seed=0, options={"pixel_ids": "shifted"})
    assert torch.equal(again.train.x0, td.train.x0 + 1)
    other = load_task("pathfinder", data_dir=tmp_path, seq_len=1024, seed=1)
    assert not torch.equal(other.train.y, td.train.y) or not torch.equal(other.train.x0, td.train.x0)


def test_pathfinder_difficulty_and_path_x(tmp_path: Path) -> None:
    write_pathfinder(tmp_path / "pathfinder128" / "curv_baseline", side=128, images=10, empty=0)
    with pytest.raises(UserError, match="no pathfinder data found.*pathfinder128/curv_contour_length_14"):
        load_task("pathfinder", data_dir=tmp_path, seq_len=128 * 128)
    td = load_task("pathfinder", data_dir=tmp_path, seq_len=128 * 128, options={"pathfinder": "easy"})
    assert td.train.x0.shape == (8, 16384) and "pathfinder=easy" in td.source


def png_header(width: int, height: int, depth: int = 8, colour: int = 0, rows: bytes = b"\x00") -> bytes:
    """A PNG file written chunk by chunk: IHDR says ``width`` x ``height`` at ``depth`` bits (colour type 0: grey,
    2: RGB), IDAT holds ``rows`` (filter byte, then samples) deflated; a header need not match what follows."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def sample(folder: Path) -> Path:
    """One listed image of the written folder (the metadata's line 3)."""
    return folder / "imgs" / "0" / "sample_2.png"


def sparse_link(folder: Path) -> None:
    """The sample as a link to a sparse file just above the cap, in the folder (the issue's was 20 GiB)."""
    with open(folder / "disk.img", "wb") as f:
        f.truncate(release.MAX_PNG_BYTES + 1)
    sample(folder).unlink()
    sample(folder).symlink_to(folder / "disk.img")


def linked_from_outside(folder: Path) -> None:
    """The sample as a link to a real image outside the data folder (``folder``'s grandparent)."""
    elsewhere = folder.parents[1].with_name(folder.parents[1].name + "-outside.png")
    elsewhere.write_bytes(png(np.zeros((32, 32))))
    sample(folder).unlink()
    sample(folder).symlink_to(elsewhere)


def grey16(folder: Path) -> None:
    """The sample as a 16-bit greyscale PNG (every sample 1000, which 8 bits would clip to 255)."""
    rows = b"".join(b"\x00" + np.full(32, 1000, ">u2").tobytes() for _ in range(32))
    sample(folder).write_bytes(png_header(32, 32, depth=16, rows=rows))


def rgb16(folder: Path) -> None:
    """The sample as a 16-bit RGB PNG, which Pillow opens as 8-bit RGB (its high bytes) without a word."""
    rows = b"".join(b"\x00" + np.full(96, 1000, ">u2").tobytes() for _ in range(32))
    sample(folder).write_bytes(png_header(32, 32, depth=16, colour=2, rows=rows))


def metadata_names(line: str) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        (folder / "metadata" / "1.npy").write_text(line)

    return damage


@pytest.mark.parametrize(("damage", "problem"), [
    (lambda f: sample(f).write_bytes(b"\x89PNG not really"), "not a readable PNG"),
    (lambda f: sample(f).write_bytes(png(np.zeros((16, 16)))), "image of 16x16 pixels"),
    (lambda f: sample(f).unlink(), "sample_2.png: file not found"),
    (metadata_names("imgs/1 sample_0.png\n"), "1.npy:1: 2 space-separated"),
    (metadata_names("imgs/1 sample_0.png 0 7\n"), "label '7' is not a class"),
    # resources: the size is read from the header, the file's from the disk, before anything is decoded
    (lambda f: sample(f).write_bytes(png_header(30000, 30000)), "sample_2.png: image of 30000x30000 pixels"),
    (sparse_link, "sample_2.png: 1,048,577 bytes, above the cap of 1,048,576 bytes for a Pathfinder image"),
    (grey16, "sample_2.png: a 16-bit PNG, which 8-bit tokens 0..255 cannot hold without clipping"),
    (rgb16, "sample_2.png: a 16-bit PNG"),
    # nothing outside the data folder, whatever the metadata or a link says
    (metadata_names("../../../../../../../../etc passwd 0 1\n"), "resolves to /etc/passwd, outside the data folder"),
    (metadata_names("/etc shadow 0 1\n"), "1.npy:1: names /etc/shadow: outside the data folder"),
    (linked_from_outside, "-outside.png, outside the data folder"),
    (lambda f: (f / "metadata" / "2.npy").mkdir(), "2.npy: a directory, not a regular file"),
], ids=["not-png", "16x16", "missing", "fields", "label", "30000x30000", "sparse-link", "grey16", "rgb16",
        "dotdot-passwd", "etc-shadow", "link-outside", "metadata-dir"])
def test_malformed_pathfinder_file(tmp_path: Path, damage: Callable[[Path], object], problem: str) -> None:
    folder = tmp_path / "pathfinder32" / "curv_contour_length_14"
    write_pathfinder(folder)
    damage(folder)
    with pytest.raises(UserError) as info:
        load_task("pathfinder", data_dir=tmp_path, seq_len=1024)
    assert problem in str(info.value) and str(folder) in str(info.value) and "\n" not in str(info.value)


def test_pathfinder_length_must_be_a_release_size(tmp_path: Path) -> None:
    write_pathfinder(tmp_path / "pathfinder32" / "curv_contour_length_14")
    with pytest.raises(UserError, match="seq_len of 1,024, 4,096, 16,384 .Path-X. or 65,536 .not 256."):
        load_task("pathfinder", data_dir=tmp_path, seq_len=256)


# ---------------------------------------------------------------------------------------------------------------------
# A whole run


def test_accuracy_smoke_on_the_release_layouts(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    """`--data-dir` at the folder holding the extracted release (and CIFAR-10 and aclImdb): every task ok, and
    the tables name the files and their checksums, never "generated"."""
    root = write_release(tmp_path / "data")
    out = tmp_path / "out"
    result = cli("run", REPO_ROOT / "suites" / "accuracy.yaml", "--profile", "smoke", "--out", out, "--device", "cpu",
                 "--data-dir", root, "--set", "attention=vanilla")
    assert result.code == 0, result.err
    with Store(out / "accuracy" / "smoke" / "results.db") as store:
        df = store.dataframe()
    assert sorted(df["task"]) == sorted(["listops", "text", "retrieval", "image", "pathfinder"])
    assert set(df["status"]) == {"ok"}, df[["task", "status", "error"]].to_string()
    table = (out / "accuracy" / "smoke" / "table1.md").read_text()
    assert "generated" not in table
    lra = root / "lra_release" / "lra_release"
    for path in (lra / "listops-1000" / "basic_train.tsv", root / "cifar-10-batches-py" / "test_batch"):
        assert f"{path.name} sha256:{sha256_file(path)[:16]}" in table


def test_a_malformed_release_file_is_exit_2_before_anything_is_written(cli: Callable[..., CliResult],
                                                                        tmp_path: Path) -> None:
    root = write_release(tmp_path / "data")
    bad = root / "lra_release" / "lra_release" / "listops-1000" / "basic_val.tsv"
    bad.write_bytes(b"Source\tTarget\r\n( [MAX 1 ] )\tten\r\n")
    out = tmp_path / "out"
    result = cli("run", REPO_ROOT / "suites" / "accuracy.yaml", "--profile", "smoke", "--out", out, "--device", "cpu",
                 "--data-dir", root, "--set", "attention=vanilla")
    assert result.code == 2 and str(bad) in result.err and len(result.err.strip().splitlines()) == 1, result.err
    assert not out.exists()
