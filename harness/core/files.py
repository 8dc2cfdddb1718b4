"""Writing a file so that a reader never sees half of it (write a temporary file beside it, then rename), and the lock
that keeps two runs out of one output directory."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from . import faults
from .errors import EnvironmentFault, UserError

TEMPORARY = ".{name}.*.tmp"  # how atomic_write names its temporary files (a glob pattern over the final name)
_UMASK = os.umask(0o022)  # the process's umask (reading it means setting it; set it straight back)
os.umask(_UMASK)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Create or replace ``path`` with what ``write(tmp)`` writes into a temporary path in the same directory.

    The rename is atomic on POSIX (same filesystem), so a process killed at any point leaves either the old file or
    the new one, never a truncated one; the temporary file is removed if ``write`` fails. The temporary name is
    unique per call, so two processes writing the same path never share one.

    Returns:
        ``path``.
    """
    path = Path(path)
    prefix, suffix = TEMPORARY.format(name=path.name).split("*")
    tmp = None
    try:  # the directory and the temporary file too: a full disk there is a fault naming ``path``
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
        os.close(fd)
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; a report is as readable as any file the user writes
        faults.point("files.before_rename", path.name)  # written in full, not yet in place
        os.replace(tmp, path)
    except Exception as exc:
        fault = write_fault(path, exc)
        if fault is not None:
            raise fault from exc
        raise
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


#: How torch reports a file it could not write in full (a full disk during ``torch.save``): no errno, no OSError.
_TORCH_WRITE_FAILURE = ("inline_container.cc", "unexpected pos", "PytorchStreamWriter failed")


def write_fault(path: Path, exc: BaseException) -> EnvironmentFault | None:
    """``exc``, raised while writing ``path``, as an environment fault (a full disk, an I/O error; torch's own
    wording of one), or None when it is not one."""
    fault = EnvironmentFault.of(exc)
    if fault is not None and not isinstance(exc, EnvironmentFault):
        fault = EnvironmentFault(path, exc)  # the file meant, not the temporary one the OSError names
    if fault is None and isinstance(exc, RuntimeError) and any(m in str(exc) for m in _TORCH_WRITE_FAILURE):
        fault = EnvironmentFault(path, exc)
    return fault


def remove_temporaries(directory: str | Path) -> list[Path]:
    """Delete the temporary files :func:`atomic_write` left in ``directory`` (not below it) when a process was killed
    between writing one and renaming it. Call only while holding :func:`directory_lock`: another writer's
    temporary file would go too."""
    stale = sorted(Path(directory).glob(TEMPORARY.format(name="*")))
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def spec_key(spec: object) -> str:
    """A short stable key of a JSON-able description (16 hex digits of the SHA-256 of its sorted JSON): the name a
    generated file is cached under, so that other parameters give another file."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checksum_path(path: str | Path) -> Path:
    """The ``sha256sum``-style sidecar of a cached file: ``<name>.sha256``."""
    path = Path(path)
    return path.with_name(path.name + ".sha256")


def write_checksum(path: str | Path) -> Path:
    """Write ``path``'s sidecar (``<sha256>  <name>``, as ``sha256sum`` prints it); returns the sidecar."""
    path = Path(path)
    return atomic_write_text(checksum_path(path), f"{sha256_file(path)}  {path.name}\n")


def checksum_matches(path: str | Path) -> bool | None:
    """Whether ``path`` matches its sidecar: None when either file is missing."""
    path, sidecar = Path(path), checksum_path(path)
    if not (path.is_file() and sidecar.is_file()):
        return None
    return (sidecar.read_text().split() or [""])[0] == sha256_file(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """:func:`atomic_write` of UTF-8 text."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def refuse_symlinks(out: str | Path, directory: str | Path) -> None:
    """Refuse (exit 2, naming it) a symbolic link between ``out`` and ``directory`` or anywhere below ``directory``:
    a link planted in an output directory would make a run write, truncate or lock a file outside it. ``out`` itself
    may be a link (where the user keeps results is the user's choice)."""
    for path in _down_to_and_below(Path(out), Path(directory)):
        if os.path.islink(path):
            raise UserError(f"{path} is a symbolic link inside --out; remove it (a run writes only into real files "
                            f"and directories under {out})")


#: What a run keeps under ``--out`` beside the suites' directories: the generated datasets (``Context.cache_dir``), and
#: the libraries' caches and the run's temporary files (``harness.cli``).
DATA_CACHE = ".data_cache"
CACHE = ".cache"


def refuse_links_outside(out: str | Path, folder: str | Path) -> None:
    """Refuse (exit 2, naming it) a symbolic link that leads outside ``out``, on the way from ``out`` to ``folder`` or
    anywhere below ``folder``: what writes there (the data cache, matplotlib, Inductor, Ray, ``tempfile``) follows
    links, so a planted one would make a run write wherever it points. A link that stays inside ``out`` (Ray's
    ``session_latest``) is the run's own; ``out`` itself may be a link, as in :func:`refuse_symlinks`."""
    root = os.path.realpath(out)
    for path in _down_to_and_below(Path(out), Path(folder)):
        if os.path.islink(path) and os.path.commonpath([root, os.path.realpath(path)]) != root:
            raise UserError(f"{path} is a symbolic link to {os.readlink(path)}, outside --out; remove it (a run "
                            f"writes its caches only into real directories under {out})")


def _down_to_and_below(out: Path, directory: Path) -> Iterator[str]:
    """Each path from ``out`` (not included) down to ``directory``, then every path below ``directory``, without
    following links; lazily, so that a check raising on a link stops before anything behind it is listed."""
    try:
        inside = directory.relative_to(out)
    except ValueError:
        inside = Path()
    path = out
    for part in inside.parts:
        path = path / part
        yield str(path)
    if not os.path.isdir(directory) or os.path.islink(directory):  # os.path: a name too long is "no", not an error
        return
    for top, dirs, files in os.walk(directory, followlinks=False):
        for name in dirs + files:
            yield os.path.join(top, name)


@contextlib.contextmanager
def directory_lock(directory: str | Path, what: str = "attnbench run") -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` (its ``.lock`` file, which records the holder's pid) for the block.

    A second holder gets a :class:`~harness.core.errors.UserError` naming the first one's pid at once (exit 2), never a
    wait: two runs into one output directory would share checkpoints and temporary files. The lock is released when
    the process ends, however it ends (``flock`` on an open descriptor), so a killed run leaves no stale lock; a run
    that ends in Python (done, an error, Ctrl-C) removes the file too, so that ``.lock`` exists only while a run is in
    progress (a killed run's file stays, unlocked, and the next run takes it over).
    """
    directory = Path(directory)
    for _ in range(_LOCK_TRIES):
        fd = _open_lock(directory)
        try:
            _take(fd, directory, what)
        except BaseException:
            os.close(fd)
            raise
        if _still_the_file(fd, directory / ".lock"):
            break
        os.close(fd)  # removed by a run that ended between our open and our lock: lock the new file instead
    else:
        raise UserError(f"{directory / '.lock'}: replaced {_LOCK_TRIES} times while this run took it; another run is "
                        f"starting and ending there, wait for it or give another --out")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        with contextlib.suppress(OSError):  # removed while still held, so no other run can be holding it
            os.unlink(directory / ".lock")
        os.close(fd)  # releases the lock


#: How often :func:`directory_lock` takes a lock file that a finishing run removed meanwhile before giving up.
_LOCK_TRIES = 5


def _open_lock(directory: Path) -> int:
    """The descriptor of ``directory``'s ``.lock``, created with the directory where missing."""
    try:  # the first thing a run creates: a place it cannot write (/proc, a read-only mount) is bad input, said here
        directory.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a .lock planted as a link to another file must not be truncated and written
        return os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"{directory / '.lock'} is a symbolic link; remove it (a run locks only a real "
                            f"file)") from None
        if exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
            raise EnvironmentFault(exc.filename or directory, exc) from None
        raise UserError(f"{directory}: cannot be created or written ({exc.strerror or exc}); choose another "
                        f"output directory (--out)") from None


def _take(fd: int, directory: Path, what: str) -> None:
    """Lock ``fd`` at once, or refuse naming the holder's pid."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        raise UserError(f"{directory} is in use by another {what} (pid {holder}); wait for it to finish or give "
                        f"another --out") from None


def _still_the_file(fd: int, path: Path) -> bool:
    """Whether the locked descriptor is still the file at ``path`` (a finishing run unlinks its lock file: a lock
    on the unlinked file would exclude nobody)."""
    try:
        here = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)
