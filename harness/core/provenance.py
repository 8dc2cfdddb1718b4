"""The identity of the code that produces a number, so that a stored result is reused only for the same code.

A cell's key includes :func:`code_identity`: a hash of the harness version, the source of the attention variant's
module and of the shared attention pieces (``attentions.base``), and the source of the modules its suite kind
measures with (:attr:`harness.core.suite.SuiteKind.code`). Editing a variant's file makes that variant's cells stale and
no other's; editing the measuring code makes every cell of that kind stale. The git commit and a dirty flag are
recorded with every run and every CSV row (:func:`harness.core.envinfo.collect_env`), not in the key: a commit changes
with any file, README included, and would make every stored result stale.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
from collections.abc import Iterable

import attentions

#: Attention code every variant shares.
SHARED_ATTENTION_MODULES = ("attentions.base",)


def harness_version() -> str:
    try:
        return importlib.metadata.version("attnbench")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


@functools.cache
def _source(module: str) -> bytes:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"no source for module {module!r}")
    with open(spec.origin, "rb") as f:
        return f.read()


def source_hash(modules: Iterable[str]) -> str:
    """SHA-256 (16 hex digits) of the named modules' source files, in name order."""
    digest = hashlib.sha256(harness_version().encode())
    for name in sorted(set(modules)):
        digest.update(name.encode() + b"\0" + _source(name) + b"\0")
    return digest.hexdigest()[:16]


def code_identity(attention: str, kind_modules: Iterable[str]) -> str:
    """The identity of the code a cell of ``attention`` runs: its variant's module, the shared attention pieces and
    the kind's measuring modules."""
    variant = attentions.spec(attention).module_cls.__module__
    return source_hash([variant, *SHARED_ATTENTION_MODULES, *kind_modules])
