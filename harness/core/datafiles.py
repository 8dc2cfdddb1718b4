"""Opening the user's data files: only regular files under the data folder the user gave, of bounded size, and
running out of memory while reading them as a one-line error.

The readers of real data (the LRA readers of :mod:`harness.kinds.accuracy`, the forecasting CSV files) take their
paths from the user's folder and from what its files say (Pathfinder's metadata lines), so a path may be a symlink or
a ``../``-path to anywhere, a FIFO (opening it blocks until a writer comes, forever), a device (``/dev/zero`` never
ends) or a directory. :func:`open_data_file` opens a path only once its real path lies under the data folder and it
is a regular file (checked on the opened file, so what is read is what was checked), and refuses it by name
otherwise; :func:`read_data_file` also refuses a file above a cap before reading it. Both raise
:class:`~harness.core.errors.UserError` (exit 2, one line naming the file, what it is and how to fix it); a failing
disk stays an ``OSError`` (the run's environment fault).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import UserError, first_line

#: What a path may be instead of a regular file, for the refusal (by ``stat.S_IFMT``).
_FILE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
#: Errors of opening a path that are the path's (the user fixes them), not the disk's (those stay OSErrors): the
#: problem and its fix.
_PATH_ERRORS = {
    errno.ENOENT: ("file not found", "put the file there"), errno.ENOTDIR: ("file not found", "put the file there"),
    errno.ELOOP: ("a looping symlink", "replace it with the file itself"),
    errno.EACCES: ("cannot be read (permission denied)", "make it readable"),
    errno.EPERM: ("cannot be read (permission denied)", "make it readable"),
    errno.ENAMETOOLONG: ("file name too long", "shorten it"),
}


def _where(path: Path, named_by: str) -> str:
    """How a refusal begins: the path, after the metadata line that named it if one did."""
    return f"{named_by}: names {path}" if named_by else str(path)


def open_data_file(path: Path, within: Path, expected: str, *, max_bytes: int = 0, what: str = "",
                   named_by: str = "") -> BinaryIO:
    """``path`` opened for reading, once it is known to be a regular file under the data folder ``within``.

    The path is resolved, and its real path must lie under ``within``'s (a metadata line's ``/etc shadow`` or
    ``../../etc passwd``, a link to elsewhere, are refused); it is opened without following a link and without
    blocking, and checked as opened (``fstat``).

    Args:
        path: the file.
        within: the data folder the user gave (``--data-dir``); nothing outside it is read.
        expected: the format the file should have, for the message.
        max_bytes: if positive, a larger file is refused before it is read; ``what`` says what may be that large
            and why (e.g. "a review (aclImdb's longest is under 14 KB)").
        named_by: where the path came from (``FILE:LINE`` of a metadata file), to begin the message with.

    Raises:
        UserError: one line naming the path (and ``named_by``), what it is and how to fix it.
    """
    def refuse(problem: str, fix: str) -> UserError:
        return UserError(f"{_where(path, named_by)}: {problem}; {fix}; expected {expected}")

    folder = Path(os.path.realpath(within))
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(folder):
        via = f"resolves to {real}, " if real != Path(path).absolute() else ""  # a link or a '..' on the way
        raise refuse(f"{via}outside the data folder {folder}", "attnbench reads nothing outside --data-dir: copy the "
                     "file into it, or give --data-dir the folder that holds it")
    try:  # O_NOFOLLOW: the real path's last part is no link (one put there since is refused); O_NONBLOCK: a FIFO
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno not in _PATH_ERRORS:
            raise  # the disk's failure (EIO, ...), not the path's
        raise refuse(*_PATH_ERRORS[exc.errno]) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = _FILE_KINDS.get(stat.S_IFMT(info.st_mode), "not a file")
            raise refuse(f"{kind}, not a regular file", "remove it or replace it with the file itself")
        if 0 < max_bytes < info.st_size:
            raise refuse(f"{info.st_size:,} bytes, above the cap of {max_bytes:,} bytes for {what}",
                         "replace it with the file itself")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_data_file(path: Path, within: Path, expected: str, *, max_bytes: int, what: str, named_by: str = "") -> bytes:
    """The bytes of ``path``, checked by :func:`open_data_file`; never more than ``max_bytes`` (a file that grew
    beyond them while read is refused too)."""
    with open_data_file(path, within, expected, max_bytes=max_bytes, what=what, named_by=named_by) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UserError(f"{_where(path, named_by)}: above the cap of {max_bytes:,} bytes for {what}; replace it "
                        f"with the file itself; expected {expected}")
    return data


@contextlib.contextmanager
def memory_refusal(where: Path, expected: str) -> Iterator[None]:
    """Reading ``where`` inside: running out of memory (Python's ``MemoryError``, torch's CPU allocator) is an
    exit-2 error naming it, not a traceback. The readers cap what a file may ask for first; this is what is left
    when a file within the caps still does not fit in this machine's memory."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "DefaultCPUAllocator" not in str(exc):
            raise
        raise UserError(f"{where}: does not fit in this machine's memory ({first_line(exc, 120) or 'MemoryError'}); "
                        f"use a machine with more memory, a smaller seq_len or a smaller file; "
                        f"expected {expected}") from None
