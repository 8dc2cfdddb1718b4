"""Readers of the Long Range Arena release (``lra_release.gz``) as it unpacks: ListOps' TSV files and Pathfinder's
PNG images with their metadata, following LRA's ``input_pipeline.py`` files (google-research/long-range-arena).

* **ListOps** (``listops-1000/basic_{train,val,test}.tsv``; ``lra_benchmarks/listops/input_pipeline.py``): a tab-
  separated header with ``Source`` and ``Target`` (selected by name, as ``make_csv_dataset(select_columns=...)``),
  then one expression and its value 0..9 per row. Tokens by ``data.listops_tokens``: ``lra`` is LRA's tokenizer
  (``tfds.deprecated.text.Tokenizer()``: runs of alphanumeric characters, so ``[MAX`` is ``MAX`` and ``]``, ``(``,
  ``)`` are dropped), ``symbols`` keeps every whitespace-separated symbol. Vocabulary: the sorted tokens of the
  training file, ids 1..V, and V + 1 for a token never seen in training (``TokenTextEncoder``'s out-of-vocabulary
  id; LRA builds its vocabulary from the first 1,002 training rows in set order, which differs from run to run;
  sorted tokens of every row are the same set on the release and stable). Each expression is cut at ``seq_len``
  (LRA: ``[:max_length]``, 2,000).
* **Pathfinder and Path-X** (``pathfinder{32,64,128,256}/curv_{baseline,contour_length_9,contour_length_14}/``;
  ``lra_benchmarks/data/pathfinder.py`` and ``image/input_pipeline.py``): every ``metadata/*.npy`` file (text
  despite its name) lists one image per line, ``DIR NAME _ LABEL ...``, the image at ``DIR/NAME`` under the
  difficulty's folder. The resolution is the one whose square is ``seq_len`` (1,024: Pathfinder; 16,384: Path-X), the
  difficulty ``data.pathfinder`` (LRA's task: ``hard``). Empty image files are skipped, as LRA filters them. The
  images, in metadata file order (numeric) and line order, are permuted with ``data.seed`` and cut 80/10/10 into
  train/dev/test, as the released pipeline (which shuffles unseeded) and LRA's ``[:80%]``, ``[80%:90%]``,
  ``[90%:]`` splits. Pixels are grayscale intensities (a colour PNG is converted with ITU-R 601 weights).

Every file is read through :func:`~harness.core.datafiles.open_data_file`: a regular file whose real path lies
under the user's data folder, whatever a symlink or a metadata line (``../../etc passwd``, ``/etc shadow``) says. A
ListOps file must be UTF-8 text without NUL bytes (a replaced byte would become a token silently). A PNG must be one
(only Pillow's PNG reader runs), at most :data:`MAX_PNG_BYTES`, of the resolution's size and at most 8 bits per sample,
all read from its header before anything is decoded (a 30000x30000 header would ask Pillow for 900 MB; 16-bit samples
would be clipped to 8 bits); a metadata file is at most :data:`MAX_METADATA_BYTES`.
"""

from __future__ import annotations

import io
import re
import struct
import warnings
from pathlib import Path

import numpy as np
import torch

from ...core.datafiles import open_data_file, read_data_file
from ...core.errors import UserError, first_line
from ...models.tasks import PAD_ID, Split, Task, pad_or_truncate, pixels_to_tokens
from .loaders import class_index

LISTOPS_DIR = "listops-1000"
LISTOPS_FILES: dict[str, str] = {"train": "basic_train.tsv", "dev": "basic_val.tsv", "test": "basic_test.tsv"}
LISTOPS_FORMAT = ("LRA's ListOps tsv: a header with the columns Source and Target, then one expression and its value "
                  "per row")
PATHFINDER_DIFFICULTY: dict[str, str] = {
    "easy": "curv_baseline", "intermediate": "curv_contour_length_9", "hard": "curv_contour_length_14",
}
PATHFINDER_RESOLUTIONS = (32, 64, 128, 256)
PATHFINDER_FORMAT = ("the LRA release's Pathfinder layout: metadata/*.npy text files with lines 'DIR NAME _ LABEL', "
                     "each naming a grayscale PNG at DIR/NAME")
#: LRA's ``[:80%]``, ``[80%:90%]``, ``[90%:]`` splits (the released pipeline cuts at int(0.8 n) and int(0.9 n)).
SPLIT_AT = (0.8, 0.9)
_ALPHANUMERIC_RUNS = re.compile(r"\W+")  # tfds Tokenizer(alphanum_only=True) splits on this
#: The largest Pathfinder image file read: a real 32x32 sample is about 1 KB, and an uncompressed 8-bit image of the
#: largest resolution (256x256) 64 KB; a larger file is no image of the release (a link to a disk image, say).
MAX_PNG_BYTES = 2**20
#: The largest metadata file read: the release's list their images one per line of about 40 bytes, and 16 MiB would be
#: 400,000 lines, more than the 200,000 images of a whole difficulty folder.
MAX_METADATA_BYTES = 2**24
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------------------------------
# ListOps


def listops_tokens(source: str, mode: str) -> list[str]:
    """The tokens of one expression: LRA's (``lra``) or every whitespace-separated symbol (``symbols``)."""
    if mode == "symbols":
        return source.split()
    return [t for t in _ALPHANUMERIC_RUNS.split(source) if t]


def _utf8_text(path: Path, data: bytes) -> str:
    """``data`` as UTF-8 text without NUL bytes; else a UserError naming the file, the line and the byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save it as UTF-8; "
                        f"expected {LISTOPS_FORMAT}") from None
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise UserError(f"{path}:{line}: a NUL byte, which no ListOps expression holds; remove it; "
                        f"expected {LISTOPS_FORMAT}")
    return text


def _read_listops_tsv(task: Task, path: Path, within: Path) -> tuple[list[str], list[int]]:
    """(expressions, values, each a class of ``task``) of one file; a UserError naming the file and line for anything
    else."""
    with open_data_file(path, within, LISTOPS_FORMAT) as f:
        text = _utf8_text(path, f.read())
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0].split("\t") if lines else []
    if "Source" not in header or "Target" not in header:
        raise UserError(f"{path}:1: header {header[:4]!r} lacks Source and Target; expected {LISTOPS_FORMAT}")
    source, target = header.index("Source"), header.index("Target")
    sources, values = [], []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != len(header):
            raise UserError(f"{path}:{lineno}: {len(fields)} tab-separated columns, the header has {len(header)}; "
                            f"expected {LISTOPS_FORMAT}")
        sources.append(fields[source])
        values.append(class_index(f"{path}:{lineno}: Target", fields[target].strip(), task, LISTOPS_FORMAT))
    if not sources:
        raise UserError(f"{path}: no rows; every split needs examples; expected {LISTOPS_FORMAT}")
    return sources, values


def read_listops(task: Task, folder: Path, *, seq_len: int, tokens: str, within: Path | None = None
                 ) -> tuple[dict[str, Split], int, list[Path]]:
    """(splits, vocabulary size, files read) of the ListOps tsv files in ``folder`` (labels: classes of ``task``),
    read only from under ``within`` (the user's data folder; default ``folder``)."""
    paths = {name: folder / file for name, file in LISTOPS_FILES.items()}
    raw = {name: _read_listops_tsv(task, path, within or folder) for name, path in paths.items()}
    tokenised = {name: [listops_tokens(s, tokens) for s in sources] for name, (sources, _) in raw.items()}
    vocab = {t: i for i, t in enumerate(sorted({t for seq in tokenised["train"] for t in seq}), start=PAD_ID + 1)}
    unknown = len(vocab) + 1  # one out-of-vocabulary id after the vocabulary, as TokenTextEncoder's
    splits = {
        name: Split(x0=pad_or_truncate([[vocab.get(t, unknown) for t in seq[:seq_len]] for seq in tokenised[name]],
                                       seq_len),
                    y=torch.tensor(raw[name][1], dtype=torch.int64))
        for name in paths
    }
    return splits, unknown + 1, list(paths.values())


# ---------------------------------------------------------------------------------------------------------------------
# Pathfinder


def pathfinder_resolution(seq_len: int) -> int:
    """The release's image side whose square is ``seq_len``; a UserError naming the ones there are."""
    for side in PATHFINDER_RESOLUTIONS:
        if side * side == seq_len:
            return side
    have = ", ".join(f"{s * s:,} (pathfinder{s})" for s in PATHFINDER_RESOLUTIONS)
    raise UserError(f"pathfinder: seq_len {seq_len:,} is not an image size of the LRA release; use one of {have}; "
                    f"16,384 is Path-X")


def pathfinder_folder(root: Path, seq_len: int, difficulty: str) -> Path:
    """``root/pathfinderR/<difficulty's folder>`` for the resolution R of ``seq_len``."""
    return root / f"pathfinder{pathfinder_resolution(seq_len)}" / PATHFINDER_DIFFICULTY[difficulty]


def _metadata_files(folder: Path) -> list[Path]:
    """Every ``metadata/*.npy`` (whatever each is: :func:`read_pathfinder` refuses what is not a regular file)."""
    files = list((folder / "metadata").glob("*.npy"))
    if not files:
        raise UserError(f"{folder / 'metadata'}: no *.npy metadata files; expected {PATHFINDER_FORMAT}")
    # numeric order (0, 1, ..., 10, ...), the order the generator wrote them in; other names after, by name
    return sorted(files, key=lambda p: (not p.stem.isdigit(), int(p.stem) if p.stem.isdigit() else 0, p.name))


def _check_png_header(path: Path, data: bytes, side: int) -> None:
    """The PNG's size and bit depth, from its header (IHDR, the first chunk the PNG format allows), checked before
    Pillow decodes anything: a UserError naming the file if it is not an 8-bit image of ``side`` x ``side``."""
    if len(data) < 33 or not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise UserError(f"{path}: not a readable PNG (no PNG header); expected {PATHFINDER_FORMAT}")
    width, height, depth = struct.unpack(">IIB", data[16:25])  # big-endian, as PNG writes them
    if (width, height) != (side, side):
        raise UserError(f"{path}: image of {width}x{height} pixels in pathfinder{side}; expected {side}x{side}")
    if depth > 8:
        raise UserError(f"{path}: a {depth}-bit PNG, which 8-bit tokens 0..255 cannot hold without clipping; save it "
                        f"with 8 bits per sample; expected {PATHFINDER_FORMAT}")


def _decode_png(path: Path, data: bytes, side: int) -> np.ndarray:
    """uint8 [side, side] grayscale pixels of one PNG; a UserError naming it if it is not one of that size."""
    from PIL import Image, UnidentifiedImageError  # Pillow comes with matplotlib; loaded only for Pathfinder

    _check_png_header(path, data, side)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # not a line on stderr: the error below
            with Image.open(io.BytesIO(data), formats=["PNG"]) as image:  # only the PNG reader, never another's
                image.load()
                pixels = np.asarray(image if image.mode == "L" else image.convert("L"))
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError,
            Image.DecompressionBombWarning) as exc:
        raise UserError(f"{path}: not a readable PNG ({first_line(exc, 200)}); expected {PATHFINDER_FORMAT}") from None
    if pixels.shape != (side, side):
        raise UserError(f"{path}: image of {pixels.shape[1]}x{pixels.shape[0]} pixels in pathfinder{side}; "
                        f"expected {side}x{side}")
    return pixels


def read_pathfinder(task: Task, folder: Path, *, seq_len: int, seed: int, offset: int, within: Path | None = None
                    ) -> tuple[dict[str, Split], list[Path], list[bytes]]:
    """(splits, files read, their bytes) of the Pathfinder images listed in ``folder``'s metadata (labels: classes
    of ``task``), every file read only from under ``within`` (the user's data folder; default ``folder``)."""
    side = pathfinder_resolution(seq_len)
    root = within or folder
    images, labels, files, contents = [], [], [], []
    for meta in _metadata_files(folder):
        data = read_data_file(meta, root, PATHFINDER_FORMAT, max_bytes=MAX_METADATA_BYTES,
                              what="a metadata file")
        files.append(meta)
        contents.append(data)
        for lineno, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 4:
                raise UserError(f"{meta}:{lineno}: {len(fields)} space-separated fields; expected {PATHFINDER_FORMAT}")
            path = folder / fields[0] / fields[1]
            png = read_data_file(path, root, PATHFINDER_FORMAT, max_bytes=MAX_PNG_BYTES, named_by=f"{meta}:{lineno}",
                                 what="a Pathfinder image (a real 32x32 sample is about 1 KB)")
            if not png:  # the release has a few empty images; LRA filters them out
                continue
            images.append(_decode_png(path, png, side))
            labels.append(class_index(f"{meta}:{lineno}: label", fields[3], task, PATHFINDER_FORMAT))
            files.append(path)
            contents.append(png)
    if len(images) < 10:
        raise UserError(f"{folder}: {len(images)} images; the 80/10/10 split needs at least 10; "
                        f"expected {PATHFINDER_FORMAT}")
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(images)))
    tokens = pixels_to_tokens(np.stack(images), offset)[order]  # [S, side * side]
    y = torch.tensor(labels, dtype=torch.int64)[order]
    cut = [int(len(images) * f) for f in SPLIT_AT]
    bounds = {"train": (0, cut[0]), "dev": (cut[0], cut[1]), "test": (cut[1], len(images))}
    splits = {name: Split(x0=tokens[a:b], y=y[a:b]) for name, (a, b) in bounds.items()}
    return splits, files, contents
