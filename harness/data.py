"""Datasets of the accuracy benchmark: the five Long Range Arena tasks as padded token tensors.

:func:`load_task` returns a :class:`TaskData` (train/dev/test :class:`Split` s of int64 token ids, right-padded
with :data:`PAD_ID`) either from the offline generators of :mod:`harness.generators` (``data_dir=None``;
deterministic from ``seed``, optionally cached) or from the real LRA files the user has (:mod:`harness.loaders`).

Token conventions, the same for generated and real data:

* id 0 is padding everywhere; real tokens are >= 1, so ``x != PAD_ID`` is the attention mask.
* Bytes (Text, Retrieval) and pixel intensities (Image, Pathfinder) map value v -> id v + 1, vocabulary 257
  (:func:`encode_bytes`, :func:`pixels_to_tokens`); images are flattened row-major.
* ListOps uses :data:`harness.generators.LISTOPS_VOCAB` (16 ids) for generated data and the file's own ids for
  LRA pickles.

Cache: a generated dataset is saved as ``<cache_dir>/<task>-<key>.pt``, ``key`` a SHA-256 of (task, seed, sizes,
seq_len, resolved generator parameters, :data:`CACHE_VERSION`), with a ``sha256sum``-style sidecar
``<task>-<key>.pt.sha256``. A file whose checksum or key does not match is regenerated (with a warning).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import inspect
import json
import math
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import generators
from .errors import UserError

PAD_ID = 0  # token id 0 is always padding; real tokens are >= 1
BYTE_VOCAB = 257  # ids of bytes and pixel intensities: value v -> v + 1, plus PAD_ID

TASKS = ("listops", "text", "retrieval", "image", "pathfinder")
SPLITS = ("train", "dev", "test")
#: LRA's sequence length of each task (Retrieval: per document).
LRA_SEQ_LEN: dict[str, int] = {"listops": 2000, "text": 4000, "retrieval": 4000, "image": 1024, "pathfinder": 1024}
#: LRA's number of classes of each task.
NUM_CLASSES: dict[str, int] = {"listops": 10, "text": 2, "retrieval": 2, "image": 10, "pathfinder": 2}
#: Bumped whenever a generator's output changes, so that stale cache files are never reused.
CACHE_VERSION = 1


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

    def mask1(self) -> torch.Tensor | None:
        """bool [S, N]: True at real tokens of x1, or None for single-document tasks."""
        return None if self.x1 is None else self.x1 != PAD_ID


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
        source: ``"generated:<task>:<params>"`` or the real data directory.
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

    def splits(self) -> dict[str, Split]:
        """The splits by name, in :data:`SPLITS` order."""
        return {"train": self.train, "dev": self.dev, "test": self.test}

    def describe(self) -> dict[str, object]:
        """Sizes, class balance, token lengths and source, JSON-serialisable (for logs and result records)."""
        splits: dict[str, object] = {}
        for name, split in self.splits().items():
            lengths = split.mask0().sum(dim=1).double()
            splits[name] = {
                "size": len(split),
                "class_counts": torch.bincount(split.y, minlength=self.num_classes).tolist(),
                "mean_tokens": lengths.mean().item() if len(split) else 0.0,
                "max_tokens": int(lengths.max().item()) if len(split) else 0,
            }
        return {
            "task": self.task,
            "source": self.source,
            "vocab_size": self.vocab_size,
            "num_classes": self.num_classes,
            "seq_len": self.seq_len,
            "dual": self.dual,
            "splits": splits,
        }


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


def encode_bytes(data: bytes, length: int) -> list[int]:
    """Byte-level ids of the first ``length`` bytes: byte b -> b + 1, so PAD_ID stays free (vocabulary 257)."""
    return _byte_ids(data, length).tolist()


def encode_documents(docs: Sequence[bytes], length: int) -> torch.Tensor:
    """int64 [S, length]: each document byte-encoded (:func:`encode_bytes`), truncated or padded to ``length``."""
    return pad_or_truncate([_byte_ids(doc, length) for doc in docs], length)


def pixels_to_tokens(pixels: np.ndarray) -> torch.Tensor:
    """Grayscale images [..., H, W] -> int64 tokens [..., H * W], row-major, intensity v -> id v + 1.

    Non-integer intensities (e.g. after adding U(-a, a) noise) are rounded to the nearest integer (half to even)
    and clipped to 0..255 before the shift, so the vocabulary stays 257 and PAD_ID never appears.
    """
    values = np.clip(np.rint(np.asarray(pixels, dtype=np.float64)), 0, 255).astype(np.int64)
    flat = values.reshape(*values.shape[:-2], -1)  # [..., H, W] -> [..., H * W]
    return torch.from_numpy(flat + 1)


# ---------------------------------------------------------------------------------------------------------------------
# Pixel noise (the S3Attention paper's robustness study, Table 5)

#: Tasks whose tokens are pixel intensities (id v + 1), where additive noise is defined.
PIXEL_TASKS = ("image", "pathfinder")
#: Where noise goes: every split (the paper: noise added "during generating sample sequences"), or only the test
#: split (distribution shift: trained and selected on clean data).
NOISE_ON = ("train+test", "test")


def add_pixel_noise(x: torch.Tensor, a: float, generator: torch.Generator) -> torch.Tensor:
    """Pixel tokens with uniform noise U(-a, a) added to every intensity; padding (id 0) is left alone.

    Token id t = v + 1 carries intensity v in 0..255. Each real position becomes
    ``clip(round_half_even(v + a * (2u - 1)), 0, 255) + 1`` with u ~ U[0, 1) from ``generator``: the noise is added
    to the intensity, rounded to the nearest integer (half to even, as :func:`pixels_to_tokens`) and clipped to
    0..255, so the vocabulary stays 257. The draw u depends only on the generator and the shape, not on ``a``, so
    datasets at different amplitudes share one realisation scaled by ``a`` (common random numbers: the columns of
    Table 5 differ by the amplitude alone, not by a fresh draw).

    Args:
        x: int64 [S, N] pixel token ids (PAD_ID = 0 at padding).
        a: amplitude, >= 0; 0 returns ``x`` unchanged.
        generator: CPU generator that fixes the draw.
    """
    if a < 0:
        raise ValueError(f"noise amplitude must be >= 0, got {a}")
    if a == 0:
        return x
    u = torch.rand(x.shape, generator=generator, dtype=torch.float64)
    values = (x - 1).double() + a * (2.0 * u - 1.0)
    noisy = values.round().clamp_(0, 255).long() + 1  # torch.round: half to even
    return torch.where(x == PAD_ID, x, noisy)


def noisy_task(data: TaskData, a: float, noise_on: str, seed: int) -> TaskData:
    """``data`` with U(-a, a) pixel noise (:func:`add_pixel_noise`) in the splits ``noise_on`` names.

    Noise is drawn once per example when the dataset is made (static, like the paper's "during generating sample
    sequences"), from a generator seeded by ``seed`` and the split, so the same seed gives the same noise.

    Raises:
        UserError: noise on a task whose tokens are not pixels, or an unknown ``noise_on``.
    """
    if noise_on not in NOISE_ON:
        raise UserError(f"noise_on {noise_on!r}: choose one of {', '.join(NOISE_ON)}")
    if a == 0:
        return data
    if data.task not in PIXEL_TASKS:
        raise UserError(f"{data.task}: pixel noise applies to {', '.join(PIXEL_TASKS)} only; use noise 0 here")
    noisy = {"train", "dev", "test"} if noise_on == "train+test" else {"test"}
    splits = {}
    for i, (name, split) in enumerate(data.splits().items()):
        if name in noisy:
            g = torch.Generator().manual_seed(int(seed) * 7919 + i)
            split = Split(x0=add_pixel_noise(split.x0, a, g), y=split.y, x1=split.x1)
        splits[name] = split
    return dataclasses.replace(data, **splits, source=f"{data.source}+noise(a={a:g},on={noise_on},seed={seed})")


# ---------------------------------------------------------------------------------------------------------------------
# Generated tasks

_GENERATORS: dict[str, Callable[..., tuple[Any, ...]]] = {
    "listops": generators.generate_listops,
    "text": generators.generate_text,
    "retrieval": generators.generate_retrieval,
    "image": generators.generate_images,
    "pathfinder": generators.generate_pathfinder,
}


def _image_side(task: str, seq_len: int) -> int:
    side = math.isqrt(seq_len)
    if side * side != seq_len:
        raise UserError(f"{task}: seq_len {seq_len} is not a square image (side * side); use e.g. 1024 for 32x32")
    return side


def _length_params(task: str, seq_len: int) -> dict[str, object]:
    """Generator parameters implied by seq_len (the user may override them, within seq_len)."""
    if task == "listops":
        return {"max_length": seq_len, "min_length": seq_len // 4}  # LRA: 500 < length < 2000 at N = 2000
    if task in ("text", "retrieval"):
        return {"length": seq_len}
    return {"size": _image_side(task, seq_len)}


def _generator_defaults(task: str, gen_params: dict[str, object]) -> dict[str, object]:
    """The defaults of a task's generator parameters; a UserError if ``gen_params`` names any other."""
    signature = inspect.signature(_GENERATORS[task])
    defaults = {name: p.default for name, p in signature.parameters.items() if name not in ("n", "seed")}
    unknown = sorted(set(gen_params) - set(defaults))
    if unknown:
        raise UserError(f"{task}: unknown generator parameter(s) {', '.join(unknown)}; valid: {', '.join(defaults)}")
    return defaults


def resolve_gen_params(task: str, seq_len: int, gen_params: dict[str, object]) -> dict[str, object]:
    """All parameters of a task's generator: its defaults, then those implied by seq_len, then ``gen_params``.

    Raises:
        UserError: an unknown parameter, or one that would not fit in seq_len.
    """
    defaults = _generator_defaults(check_task(task), gen_params)
    params = {**defaults, **_length_params(task, seq_len), **gen_params}
    if task == "listops" and int(params["max_length"]) > seq_len + 1:
        raise UserError(f"listops: max_length {params['max_length']} exceeds seq_len + 1 = {seq_len + 1}")
    if task in ("text", "retrieval") and int(params["length"]) > seq_len:
        raise UserError(f"{task}: length {params['length']} exceeds seq_len {seq_len}")
    if task in ("image", "pathfinder") and int(params["size"]) ** 2 != seq_len:
        raise UserError(f"{task}: size {params['size']} does not give seq_len {seq_len} (size * size)")
    return params


def _generate(task: str, n: int, seq_len: int, seed: int, params: dict[str, Any]) -> tuple[Any, ...]:
    """(x0, x1 or None, y, vocab_size) of ``n`` generated examples."""
    raw = _GENERATORS[task](n, seed=seed, **params)
    if task == "listops":
        seqs, y = raw
        return pad_or_truncate(seqs, seq_len), None, y, len(generators.LISTOPS_TOKENS)
    if task == "text":
        docs, y = raw
        return encode_documents(docs, seq_len), None, y, BYTE_VOCAB
    if task == "retrieval":
        first, second, y = raw
        return encode_documents(first, seq_len), encode_documents(second, seq_len), y, BYTE_VOCAB
    pixels, y = raw
    return pixels_to_tokens(pixels), None, y, BYTE_VOCAB


def split_rows(x0: torch.Tensor, x1: torch.Tensor | None, y: torch.Tensor,
               sizes: tuple[int, int, int]) -> tuple[Split, Split, Split]:
    """Cut row-aligned tensors into consecutive train/dev/test splits of ``sizes`` rows."""
    parts = [t.split(list(sizes)) if t is not None else (None,) * 3 for t in (x0, x1, y)]
    train, dev, test = (Split(x0=a, y=c, x1=b) for a, b, c in zip(*parts, strict=True))
    return train, dev, test


def check_task(task: str) -> str:
    """``task`` if it is one of :data:`TASKS`, else a UserError with the closest name."""
    if task not in TASKS:
        close = difflib.get_close_matches(str(task), TASKS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"unknown task {task!r}{hint}; valid tasks: {', '.join(TASKS)}")
    return task


def _check_sizes(sizes: Sequence[int]) -> tuple[int, int, int]:
    if len(sizes) != 3 or any(int(s) != s or s < 1 for s in sizes):
        raise UserError(f"sizes must be three positive integers (train, dev, test), got {tuple(sizes)!r}")
    train, dev, test = (int(s) for s in sizes)
    return train, dev, test


def generate_task(task: str, *, seq_len: int, seed: int, sizes: tuple[int, int, int],
                  params: dict[str, Any]) -> TaskData:
    """A generated TaskData: one stream of sum(sizes) examples from ``seed``, cut into train/dev/test."""
    x0, x1, y, vocab_size = _generate(task, sum(sizes), seq_len, seed, params)
    train, dev, test = split_rows(x0, x1, torch.as_tensor(y, dtype=torch.int64), sizes)
    desc = json.dumps({"seed": seed, "sizes": list(sizes), "seq_len": seq_len, **params}, sort_keys=True,
                      separators=(",", ":"))
    return TaskData(task=task, vocab_size=vocab_size, num_classes=NUM_CLASSES[task], seq_len=seq_len,
                    dual=x1 is not None, train=train, dev=dev, test=test, source=f"generated:{task}:{desc}")


# ---------------------------------------------------------------------------------------------------------------------
# Cache of generated datasets


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_path(cache_dir: str | Path, spec: dict[str, Any]) -> Path:
    """Where the dataset described by ``spec`` (JSON-able, with a "task" key) is cached."""
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache_dir) / f"{spec['task']}-{key}.pt"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same directory, so a killed process never leaves half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_cache(path: Path, spec: dict[str, Any], data: TaskData) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "spec": spec,
        "meta": {k: getattr(data, k) for k in ("task", "vocab_size", "num_classes", "seq_len", "dual", "source")},
        "splits": {name: {"x0": s.x0, "y": s.y, "x1": s.x1} for name, s in data.splits().items()},
    }
    _atomic_write(path, lambda tmp: torch.save(payload, tmp))
    _atomic_write(_sidecar(path), lambda tmp: tmp.write_text(f"{_sha256(path)}  {path.name}\n"))


def _read_cache(path: Path, spec: dict[str, Any]) -> TaskData | None:
    """The cached dataset, or None if absent; a corrupt or mismatching file is reported and ignored."""
    sidecar = _sidecar(path)
    if not (path.is_file() and sidecar.is_file()):
        return None
    expected = (sidecar.read_text().split() or [""])[0]
    if _sha256(path) != expected:
        warnings.warn(f"{path}: cache file does not match its checksum {sidecar.name}; regenerating", stacklevel=3)
        return None
    try:
        payload = torch.load(path, weights_only=True)
        if payload["spec"] != spec:
            raise ValueError("it was written for other parameters")
        splits = {name: Split(**payload["splits"][name]) for name in SPLITS}
        return TaskData(**payload["meta"], **splits)
    except Exception as exc:  # any unreadable cache file is regenerated, never fatal
        warnings.warn(f"{path}: unusable cache file ({exc}); regenerating", stacklevel=3)
        return None


# ---------------------------------------------------------------------------------------------------------------------
# Entry point


def load_task(
    task: str,
    *,
    data_dir: str | Path | None,
    seq_len: int | None = None,
    seed: int = 0,
    sizes: tuple[int, int, int] = (2000, 200, 200),
    cache_dir: str | Path | None = None,
    **gen_params: object,
) -> TaskData:
    """Load one LRA task, generated offline or read from the user's real data.

    Args:
        task: one of :data:`TASKS`.
        data_dir: None for the offline generator (deterministic from ``seed``); else a directory holding the real
            data, whose format is recognised by its files (see :func:`harness.loaders.load_real`).
        seq_len: padded length N (per document for Retrieval); default :data:`LRA_SEQ_LEN` of the task. Generated
            data fits in it; real data is truncated or padded to it.
        seed: generator seed; for real IMDB data, the seed of the dev split drawn from train.
        sizes: (train, dev, test) sizes of generated data. Real data uses its files' splits whole.
        cache_dir: where generated datasets are cached (checksummed); None disables the cache.
        **gen_params: parameters of the task's generator in :mod:`harness.generators`; checked, but unused for
            real data.

    Returns:
        The task's splits and metadata.

    Raises:
        UserError: unknown task or parameter, or missing or malformed data files.
    """
    task = check_task(task)
    seq_len = LRA_SEQ_LEN[task] if seq_len is None else int(seq_len)
    if seq_len < 1:
        raise UserError(f"{task}: seq_len must be a positive integer, got {seq_len}")
    if data_dir is not None:
        # Names are checked even for real data, so that a typo in a suite fails with or without a data directory.
        _generator_defaults(task, gen_params)
        from . import loaders  # imported here: loaders builds on this module's primitives

        return loaders.load_real(task, data_dir, seq_len=seq_len, seed=seed)
    sizes = _check_sizes(sizes)
    params = resolve_gen_params(task, seq_len, dict(gen_params))
    spec = {"task": task, "seed": int(seed), "sizes": list(sizes), "seq_len": seq_len, "gen_params": params,
            "version": CACHE_VERSION}
    path = cache_path(cache_dir, spec) if cache_dir is not None else None
    if path is not None and (cached := _read_cache(path, spec)) is not None:
        return cached
    data = generate_task(task, seq_len=seq_len, seed=int(seed), sizes=sizes, params=params)
    if path is not None:
        _write_cache(path, spec, data)
    return data
