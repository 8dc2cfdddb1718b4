"""Errors that mean "the user's input is wrong": the CLI prints one line and exits with code 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input (suite file, CLI flag, data path). The message names what is wrong and how to fix it."""

    exit_code = 2


class SuiteError(UserError):
    """A suite file that does not validate."""

    def __init__(self, path: object, key: str, problem: str) -> None:
        where = f"{path}: {key}" if key else str(path)
        super().__init__(f"{where}: {problem}")
