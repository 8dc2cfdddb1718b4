"""Errors that mean "the user's input is wrong" (the CLI prints one line and exits with code 2), how any
exception is shown in one line, and how text quoted from input is made safe to print on a terminal."""

from __future__ import annotations


class UserError(Exception):
    """Bad input (suite file, CLI flag, data path). The message names what is wrong and how to fix it."""

    exit_code = 2


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is (as Ctrl-C raises KeyboardInterrupt), so a terminated run records its end
    and says how to resume like an interrupted one, and exits 143 (128 + SIGTERM)."""

    exit_code = 143


class RunFailed(Exception):
    """A run that cannot give trustworthy results (no cell finished, or the machine never got quiet): exit code 1."""

    exit_code = 1


class EnvironmentFault(RunFailed):
    """The machine or its files failed while a cell ran (a full disk, an I/O error, a read-only filesystem, a quota),
    not the cell: never stored as the cell's result. The run stops with exit code 1 naming the file; the cells
    finished before are kept, and a rerun resumes once the fault is fixed."""

    #: errno values that are the environment's, whichever file they hit.
    ERRNOS = frozenset({28, 5, 30, 122})  # ENOSPC, EIO, EROFS, EDQUOT

    def __init__(self, path: object, exc: BaseException) -> None:
        self.path = str(path)
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else first_line(exc) or type(exc).__name__
        super().__init__(f"{path}: {what}; free space or fix the disk (or give another --out), then rerun: the "
                         f"finished cells are kept and the run resumes")

    @classmethod
    def relayed(cls, message: str) -> EnvironmentFault:
        """The fault a worker process (``--isolate``, Ray) met, from its message."""
        fault = cls.__new__(cls)
        fault.path = message.split(":", 1)[0]
        Exception.__init__(fault, message)
        return fault

    @classmethod
    def of(cls, exc: BaseException) -> EnvironmentFault | None:
        """``exc`` as an environment fault, or None when it is the cell's own failure."""
        if isinstance(exc, EnvironmentFault):
            return exc
        if isinstance(exc, OSError) and exc.errno in cls.ERRNOS:
            return cls(exc.filename or "a file", exc)
        return None


class SuiteError(UserError):
    """A suite file that does not validate."""

    def __init__(self, path: object, key: str, problem: str) -> None:
        self.path, self.key, self.problem = path, key, problem
        where = f"{path}: {key}" if key else str(path)
        super().__init__(f"{where}: {problem}")


def first_line(exc: BaseException, limit: int = 500) -> str:
    """The first line of ``str(exc)`` (at most ``limit`` characters); "" for an exception without a message.

    Messages of torch, pickle and Ray errors run over many lines (stack dumps, hints); a cell's status message, a
    progress line and a one-line CLI error keep only their first.
    """
    return (str(exc).strip().splitlines() or [""])[0][:limit]


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on instead of showing written as an escape (ESC as ``\\x1b``,
    a newline as ``\\x0a``, a right-to-left override as ``\\u202e``).

    Messages quote input (a suite key, a file name, a cell label): raw, an ``ESC [ 2 J`` in one would clear the
    user's screen, retitle the window or forge a line, and a newline would split a one-line error. The escapes are
    Python's, so the text can be pasted back into a YAML double-quoted string.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character :func:`printable` would escape (a name must not: it is shown raw in
    tables, figures and file contents)."""
    return not text.isprintable()
