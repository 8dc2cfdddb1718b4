"""Loading a task: generated offline (deterministic from a seed, cached with a checksum) or read from real data.

:func:`load_task` returns a :class:`~harness.models.tasks.TaskData` (train/dev/test splits of int64 token ids,
right-padded with PAD_ID) either from the offline generators of :mod:`harness.kinds.accuracy.generators` and
:mod:`harness.kinds.accuracy.pixels` (``data_dir=None``) or from the real LRA files the user has
(:mod:`harness.kinds.accuracy.loaders`).

Cache: a generated dataset is saved as ``<cache_dir>/<task>-<key>.pt``, ``key`` a SHA-256 of (task, seed, sizes,
seq_len, resolved generator parameters, :data:`CACHE_VERSION`), with a ``sha256sum``-style sidecar
``<task>-<key>.pt.sha256``. A file whose checksum or key does not match is regenerated (with a warning).
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ...core import datasource
from ...core.errors import UserError
from ...core.files import atomic_write, checksum_matches, checksum_path, spec_key, write_checksum
from ...core.files import sha256_file as _sha256  # noqa: F401  (tests write sidecars with it)
from ...models.tasks import SPLITS, Split, Task, TaskData
from .options import pixel_offset, task_options
from .real import load_real
from .tasks import task_named

#: Bumped whenever a generator's output changes, so that stale cache files are never reused.
CACHE_VERSION = 6


# ---------------------------------------------------------------------------------------------------------------------
# Generated tasks

def _generator_defaults(task: Task, gen_params: dict[str, object]) -> dict[str, object]:
    """The defaults of a task's generator parameters; a UserError if ``gen_params`` names any other."""
    signature = inspect.signature(task.generator)
    defaults = {name: p.default for name, p in signature.parameters.items() if name not in ("n", "seed")}
    unknown = sorted(set(gen_params) - set(defaults))
    if unknown:
        raise UserError(f"{task.name}: unknown generator parameter(s) {', '.join(unknown)}; "
                        f"valid: {', '.join(defaults)}")
    return defaults


def resolve_gen_params(task: str, seq_len: int, gen_params: dict[str, object]) -> dict[str, object]:
    """All parameters of a task's generator: its defaults, then those implied by seq_len, then ``gen_params``.

    Raises:
        UserError: an unknown task or parameter, or one that would not fit in seq_len.
    """
    entry = task_named(task)
    defaults = _generator_defaults(entry, gen_params)
    return {**defaults, **entry.fit(entry.name, seq_len, gen_params), **gen_params}


def split_rows(x0: torch.Tensor, x1: torch.Tensor | None, y: torch.Tensor,
               sizes: tuple[int, int, int]) -> tuple[Split, Split, Split]:
    """Cut row-aligned tensors into consecutive train/dev/test splits of ``sizes`` rows."""
    parts = [t.split(list(sizes)) if t is not None else (None,) * 3 for t in (x0, x1, y)]
    train, dev, test = (Split(x0=a, y=c, x1=b) for a, b, c in zip(*parts, strict=True))
    return train, dev, test




def _check_sizes(sizes: Sequence[int]) -> tuple[int, int, int]:
    if len(sizes) != 3 or any(int(s) != s or s < 1 for s in sizes):
        raise UserError(f"sizes must be three positive integers (train, dev, test), got {tuple(sizes)!r}")
    train, dev, test = (int(s) for s in sizes)
    return train, dev, test


def generate_task(task: str, *, seq_len: int, seed: int, sizes: tuple[int, int, int],
                  params: dict[str, Any], options: dict[str, str] | None = None) -> TaskData:
    """A generated TaskData: one stream of sum(sizes) examples from ``seed``, cut into train/dev/test."""
    entry = task_named(task)
    options = options if options is not None else task_options(entry, False, {})
    offset = pixel_offset(entry, options)
    raw = entry.generator(sum(sizes), seed=seed, **params)
    x0, x1, y, vocab_size = entry.tokens(raw, seq_len, offset)
    train, dev, test = split_rows(x0, x1, torch.as_tensor(y, dtype=torch.int64), sizes)
    return TaskData(task=task, vocab_size=vocab_size, num_classes=entry.num_classes, seq_len=seq_len,
                    dual=x1 is not None, train=train, dev=dev, test=test, pixel_offset=offset,
                    source=generated_source(task, seq_len=seq_len, seed=seed, sizes=sizes, params=params,
                                            options=options))


def generated_source(task: str, *, seq_len: int, seed: int, sizes: Sequence[int], params: dict[str, Any],
                     options: dict[str, str] | None = None) -> str:
    """The data source line of a generated task (:mod:`harness.core.datasource`): the generator's version is the
    cache's, which changes whenever a generator's output does; the task's data options are among the parameters."""
    return datasource.generated(f"attnbench {task} stand-in", CACHE_VERSION,
                                {"seed": seed, "sizes": list(sizes), "seq_len": seq_len, **params, **(options or {})})


# ---------------------------------------------------------------------------------------------------------------------
# Cache of generated datasets


def cache_path(cache_dir: str | Path, spec: dict[str, Any]) -> Path:
    """Where the dataset described by ``spec`` (JSON-able, with a "task" key) is cached."""
    return Path(cache_dir) / f"{spec['task']}-{spec_key(spec)}.pt"




def _write_cache(path: Path, spec: dict[str, Any], data: TaskData) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "spec": spec,
        "meta": {k: getattr(data, k) for k in ("task", "vocab_size", "num_classes", "seq_len", "dual", "source",
                                               "pixel_offset")},
        "splits": {name: {"x0": s.x0, "y": s.y, "x1": s.x1} for name, s in data.splits().items()},
    }
    atomic_write(path, lambda tmp: torch.save(payload, tmp))
    write_checksum(path)


def _read_cache(path: Path, spec: dict[str, Any]) -> TaskData | None:
    """The cached dataset, or None if absent; a corrupt or mismatching file is reported and ignored."""
    matches = checksum_matches(path)
    if matches is None:
        return None
    if not matches:
        warnings.warn(f"{path}: cache file does not match its checksum {checksum_path(path).name}; regenerating",
                      stacklevel=3)
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
    options: dict[str, str] | None = None,
    **gen_params: object,
) -> TaskData:
    """Load one LRA task, generated offline or read from the user's real data.

    Args:
        task: a task of :data:`~harness.kinds.accuracy.tasks.TASK_TABLE`.
        data_dir: None for the offline generator (deterministic from ``seed``); else a directory holding the real
            data, whose format is recognised by its files (see :func:`harness.kinds.accuracy.loaders.load_real`).
        seq_len: padded length N (per document for Retrieval); default the task's, LRA's (``Task.seq_len``).
            Generated data fits in it; real data is truncated or padded to it.
        seed: generator seed; for real IMDB data, the seed of the dev split drawn from train.
        sizes: (train, dev, test) sizes of generated data. Real data uses its files' splits whole.
        cache_dir: where generated datasets are cached (checksummed); None disables the cache.
        options: the task's data options (:mod:`harness.kinds.accuracy.options`); their defaults where absent.
        **gen_params: parameters of the task's generator in :mod:`harness.kinds.accuracy.generators`; checked, but
            unused for real data.

    Returns:
        The task's splits and metadata.

    Raises:
        UserError: unknown task or parameter, or missing or malformed data files.
    """
    entry = task_named(task)
    seq_len = entry.seq_len if seq_len is None else int(seq_len)
    if seq_len < 1:
        raise UserError(f"{task}: seq_len must be a positive integer, got {seq_len}")
    if data_dir is not None:
        # Names are checked even for real data, so that a typo in a suite fails with or without a data directory.
        _generator_defaults(entry, gen_params)
        return load_real(entry, data_dir, seq_len=seq_len, seed=seed, options=task_options(entry, True, options or {}))
    sizes = _check_sizes(sizes)
    params = resolve_gen_params(task, seq_len, dict(gen_params))
    opts = task_options(entry, False, options or {})
    spec = {"task": task, "seed": int(seed), "sizes": list(sizes), "seq_len": seq_len, "gen_params": params,
            "version": CACHE_VERSION, **({"options": opts} if opts else {})}
    path = cache_path(cache_dir, spec) if cache_dir is not None else None
    if path is not None and (cached := _read_cache(path, spec)) is not None:
        # the source line as this code writes it (a cache written before it said only "generated:<task>:...")
        return dataclasses.replace(cached, source=generated_source(task, seq_len=seq_len, seed=int(seed), sizes=sizes,
                                                                   params=params, options=opts))
    data = generate_task(task, seq_len=seq_len, seed=int(seed), sizes=sizes, params=params, options=opts)
    if path is not None:
        _write_cache(path, spec, data)
    return data
