"""Figures drawn again only when something they show changed: ``attnbench report`` on a suite directory redrew every
figure of every group (most of its time: each figure is laid out and written twice, PNG and PDF), although a report
run again over the same store draws the same pixels.

:func:`draw_if_changed` wraps one call of a figure writer. It keys the call by everything the drawing depends on —
the writer, the source of every project module it imports (:func:`harness.core.provenance.import_closure`), the
registry's catalogue (display names and groups), matplotlib's version, the ``--highlight`` patterns and the call's
arguments (a frame by its values) — and records each file it wrote with that key and the file's SHA-256 in
``.figures.json`` beside them. A later call with the same key whose files are all still there, unchanged, returns them
without drawing; anything else draws. A key that cannot be told equal (an argument printed with its address) only
costs a redraw.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.files import atomic_write_text, sha256_file
from ..core.provenance import import_closure, project_root, source_hash
from .highlight import _HIGHLIGHT

#: The record of the figures drawn into a directory (hidden: ``show`` does not list it).
MANIFEST = ".figures.json"


def draw_if_changed(out_dir: Path, draw: Callable[..., list[Path]], *args: Any, **kwargs: Any) -> list[Path]:
    """``draw(*args, **kwargs)``, the files it writes into ``out_dir``, unless the same call drew them there before
    and they are unchanged (see the module docstring); then those files, in the order ``draw`` returned them."""
    out_dir = Path(out_dir)
    key = call_key(draw, args, kwargs)
    manifest = _manifest(out_dir)
    mine = sorted((entry["order"], name) for name, entry in manifest.items() if entry.get("key") == key)
    if mine and all(_unchanged(out_dir / name, manifest[name]) for _, name in mine):
        return [out_dir / name for _, name in mine]
    written = list(draw(*args, **kwargs))
    for order, path in enumerate(written):
        if Path(path).parent.resolve() == out_dir.resolve() and Path(path).is_file():
            manifest[Path(path).name] = {"key": key, "order": order, "sha256": sha256_file(path)}
    atomic_write_text(out_dir / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return written


def call_key(draw: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """The SHA-256 of what a figure writer's call draws from (see the module docstring)."""
    digest = hashlib.sha256()
    name = getattr(draw, "__qualname__", type(draw).__qualname__)  # a function, or an object called as one
    for part in (f"{draw.__module__}.{name}", _code(draw.__module__), _catalog(), _matplotlib(),
                 repr(_HIGHLIGHT.get())):
        digest.update(part.encode() + b"\0")
    _feed(digest, (args, dict(kwargs)))
    return digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    """Add ``value`` to ``digest``: a frame by its values, index, columns and dtypes; containers item by item;
    anything else by its type and ``repr``."""
    if isinstance(value, pd.DataFrame | pd.Series):
        dtypes = value.dtypes if isinstance(value, pd.DataFrame) else [value.dtype]
        digest.update(repr((type(value).__name__, value.shape, list(getattr(value, "columns", [])),
                            [str(t) for t in dtypes])).encode())
        try:
            digest.update(pd.util.hash_pandas_object(value, index=True).to_numpy().tobytes())
        except TypeError:  # unhashable cells (lists): their text
            digest.update(value.to_csv().encode())
    elif isinstance(value, Mapping):
        digest.update(b"{")
        for k in sorted(value, key=repr):
            _feed(digest, k)
            _feed(digest, value[k])
        digest.update(b"}")
    elif isinstance(value, list | tuple | set | frozenset):
        digest.update(type(value).__name__.encode() + b"[")
        for item in sorted(value, key=repr) if isinstance(value, set | frozenset) else value:
            _feed(digest, item)
        digest.update(b"]")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _feed(digest, (type(value).__qualname__, dataclasses.asdict(value)))
    else:
        digest.update(f"{type(value).__qualname__}:{value!r}".encode() + b"\0")


@functools.cache
def _code(module: str) -> str:
    """The source hash of ``module`` and every project module it imports."""
    return source_hash(import_closure((module,))[0])


@functools.cache
def _catalog() -> str:
    """The registry's catalogue (every variant's display name and group), by its bytes' hash; "" without one."""
    path = project_root() / "attentions" / "catalog.json"
    return sha256_file(path) if path.is_file() else ""


@functools.cache
def _matplotlib() -> str:
    try:
        return importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _manifest(out_dir: Path) -> dict[str, dict[str, Any]]:
    """The figures recorded in ``out_dir`` (empty when there is no record or it cannot be read)."""
    try:
        data = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def _unchanged(path: Path, entry: Mapping[str, Any]) -> bool:
    """Whether ``path`` is the file recorded (a deleted or edited figure is drawn again)."""
    try:
        return sha256_file(path) == entry.get("sha256")
    except OSError:
        return False
