"""Unpickling LRA's processed pickles and CIFAR-10's python batches as data, never as code.

A pickle runs whatever callable it names, so a hostile file given as LRA data would run code as the user:
:class:`LraUnpickler` builds only Python containers and numpy arrays, dtypes and scalars, and refuses any other name a
file asks for (``pickle.load`` would call it, ``os.system`` included), and bounds what each call may build
(:data:`MAX_UNPICKLED_ELEMENTS`) before it is built. :func:`unpickle` reads a file of the user's data folder so
(:func:`~harness.core.datafiles.open_data_file`), every failure a one-line
:class:`~harness.core.errors.UserError` naming it; a ``MemoryError`` is left to the caller's
:func:`~harness.core.datafiles.memory_refusal`, which names the split.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...core.datafiles import open_data_file
from ...core.errors import UserError, first_line


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


def unpickle(path: Path, within: Path, expected: str, **kwargs: Any) -> Any:
    """The object pickled in ``path`` (a file under ``within``, the user's data folder), by :class:`LraUnpickler`
    with ``kwargs``; a UserError naming the file and ``expected`` (the format it should have) for anything else."""
    with open_data_file(path, within, expected) as f:
        try:
            return LraUnpickler(f, **kwargs).load()
        except MemoryError:
            raise  # the caller's memory_refusal names the split
        except RefusedGlobal as exc:
            raise UserError(f"{path}: attnbench refuses to unpickle {exc.name}: only Python containers and numpy "
                            f"arrays, dtypes and scalars are allowed; this file is not an LRA pickle or was tampered "
                            f"with; replace it with the original (expected {expected})") from None
        except Exception as exc:
            problem = first_line(exc) or type(exc).__name__
            raise UserError(f"{path}: cannot be unpickled ({problem}); expected {expected}") from None
