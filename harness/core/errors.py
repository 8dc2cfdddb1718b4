"""Errors that mean "the user's input is wrong" (the CLI prints one line and exits with code 2), and how any
exception is shown in one line."""

from __future__ import annotations


class UserError(Exception):
    """Bad input (suite file, CLI flag, data path). The message names what is wrong and how to fix it."""

    exit_code = 2


class RunFailed(Exception):
    """A run that cannot give trustworthy results (no cell finished, or the machine never got quiet): exit code 1."""

    exit_code = 1


class SuiteError(UserError):
    """A suite file that does not validate."""

    def __init__(self, path: object, key: str, problem: str) -> None:
        where = f"{path}: {key}" if key else str(path)
        super().__init__(f"{where}: {problem}")


def first_line(exc: BaseException, limit: int = 500) -> str:
    """The first line of ``str(exc)`` (at most ``limit`` characters); "" for an exception without a message.

    Messages of torch, pickle and Ray errors run over many lines (stack dumps, hints); a cell's status message, a
    progress line and a one-line CLI error keep only their first.
    """
    return (str(exc).strip().splitlines() or [""])[0][:limit]
