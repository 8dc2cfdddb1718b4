"""The identity of the code and the software that produce a number, so that a stored result is reused only when
nothing it depends on has changed.

A cell's key includes:

- :func:`code_identity`: a hash of the source of every module of this project in the **import closure** of the
  attention variant's module and of its suite kind's measuring modules (:attr:`harness.core.suite.SuiteKind.code`),
  found by reading their ``import`` statements (:func:`import_closure`). Editing a helper that a variant imports
  (``attentions/_s3_cpu.py``, ``performer.py`` for Scatterbrain) makes that variant's cells stale; editing the
  measuring code or a model it trains makes every cell of that kind stale; editing a module that none of them imports
  (a report, the CLI, another variant) makes nothing stale.
- :func:`software`: the torch version (its CUDA build included), the versions of the numerical libraries that
  closure imports, and the malloc settings of the measuring process (``GLIBC_TUNABLES``): each changes the numbers.

Both are computed once per process. The git commit and a dirty flag are recorded with every run and every CSV row
(:func:`harness.core.envinfo.collect_env`), not in the key: a commit changes with any file, README included, and would
make every stored result stale.

What the closure reads: every ``import``/``from ... import`` statement of a module, at any depth (a function-level
import is code the function runs). ``importlib.import_module`` calls are not followed: the zoo's package imports every
variant that way to register it, which is not a dependency of any one variant's numbers.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: The packages of this project; an import of anything else is a library's.
PROJECT_PACKAGES = ("attentions", "harness")
#: The libraries whose version changes a number when the cell's code imports them: import name -> distribution name.
NUMERICAL_LIBRARIES = {"torch": "torch", "numpy": "numpy", "pandas": "pandas", "scipy": "scipy", "PIL": "pillow",
                       "xformers": "xformers", "triton": "triton"}


def harness_version() -> str:
    try:
        return importlib.metadata.version("attnbench")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


@functools.cache
def project_root() -> Path:
    """The folder holding the project's packages (the checkout, or site-packages for an installed copy)."""
    return Path(__file__).resolve().parents[2]


def module_file(name: str) -> Path | None:
    """The source file of the project module ``name`` (a module or a package's ``__init__``), or None if there is
    none. Found on the file system, without importing anything (importing a package runs its ``__init__``)."""
    base = project_root().joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _source(module: str) -> bytes:
    path = module_file(module)
    if path is None:
        raise ValueError(f"no source for module {module!r} under {project_root()}")
    return path.read_bytes()


def _is_project(name: str) -> bool:
    return name.split(".")[0] in PROJECT_PACKAGES


@functools.cache
def _imports(module: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the project modules ``module`` imports, the top-level names of the libraries it imports), from its source."""
    path = module_file(module)
    is_package = path is not None and path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    ours: set[str] = set()
    libraries: set[str] = set()
    for node in ast.walk(ast.parse(_source(module), filename=str(path))):
        if isinstance(node, ast.Import):
            named = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, up ``level - 1`` packages
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            # `from pkg import name`: name is a submodule when it has a file, else an attribute of pkg
            named = [target] + [f"{target}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in named:
            if _is_project(name):
                # `import a.b.c` runs a.b.c's code; a.b's own code is a package's (it matters only if named itself)
                while name and module_file(name) is None:
                    name = name.rpartition(".")[0]
                if name:
                    ours.add(name)
            elif name:
                libraries.add(name.split(".")[0])
    return frozenset(ours - {module}), frozenset(libraries)


@functools.cache
def import_closure(roots: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every project module ``roots`` import, directly or not, the roots included; the top-level names of the
    libraries those modules import), each sorted."""
    seen: set[str] = set()
    libraries: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        ours, theirs = _imports(module)
        libraries |= theirs
        todo.extend(ours - seen)
    return tuple(sorted(seen)), tuple(sorted(libraries))


def source_hash(modules: Iterable[str]) -> str:
    """SHA-256 (16 hex digits) of the named modules' source files, in name order."""
    digest = hashlib.sha256(harness_version().encode())
    for name in sorted(set(modules)):
        digest.update(name.encode() + b"\0" + _source(name) + b"\0")
    return digest.hexdigest()[:16]


def cell_modules(variant_module: str, kind_modules: Iterable[str]) -> tuple[str, ...]:
    """The project modules whose source determines a cell's numbers: the import closure of its variant's module and
    of its kind's measuring modules."""
    return import_closure(tuple(sorted({variant_module, *kind_modules})))[0]


@functools.cache
def _code_identity(variant_module: str, kind_modules: tuple[str, ...]) -> str:
    return source_hash(cell_modules(variant_module, kind_modules))


def variant_module(attention: str) -> str:
    import attentions  # here: reading sources and versions needs no torch; the registry does

    return attentions.spec(attention).module_cls.__module__


def code_identity(attention: str, kind_modules: Iterable[str]) -> str:
    """The identity of the code a cell of ``attention`` runs (see the module docstring); once per process."""
    return _code_identity(variant_module(attention), tuple(sorted(set(kind_modules))))


@functools.cache
def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def software(attention: str, kind_modules: Iterable[str]) -> dict[str, Any]:
    """What besides the code changes a cell's numbers: torch's version and build, the versions of the numerical
    libraries its code imports, and the malloc settings of the process that measures it."""
    import torch

    modules = tuple(sorted({variant_module(attention), *kind_modules}))
    libraries = import_closure(modules)[1]
    versions = {lib: _version(dist) for lib, dist in sorted(NUMERICAL_LIBRARIES.items())
                if lib in libraries and lib != "torch"}
    return {"torch": str(torch.__version__), "cuda": torch.version.cuda,
            "libraries": {lib: v for lib, v in versions.items() if v is not None},
            "malloc": os.environ.get("GLIBC_TUNABLES", "")}
