"""Writing a file so that a reader never sees half of it: write a temporary file beside it, then rename."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Create or replace ``path`` with what ``write(tmp)`` writes into a temporary path in the same directory.

    The rename is atomic on POSIX (same filesystem), so a process killed at any point leaves either the old file or
    the new one, never a truncated one; the temporary file is removed if ``write`` fails. The temporary name is
    unique per call, so two processes writing the same path never share one.

    Returns:
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """:func:`atomic_write` of UTF-8 text."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
