"""The store's file: its SQLite schema and versions, which file is a results store (and which is another
application's, empty, or newer than this code), the read-only opening of ``report``/``compare``, the migration of a
version-1 store, the decoding of its JSON columns, and which errors are the disk's. :mod:`harness.core.store` reads
and writes the rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from .errors import RunFailed, UserError

SCHEMA_VERSION = 2
#: Final statuses of a cell: measured, out of memory, failed (message kept), over its time limit, not runnable here
#: (a capability, a skip rule, a missing device), or non-finite output, loss or gradients. Defined with the schema,
#: whose CHECK constraint lists them, so that reading a store needs no torch (:mod:`harness.core.cell` re-exports it).
STATUSES = ("ok", "oom", "error", "timeout", "unsupported", "nan")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT,
    suite TEXT NOT NULL,
    profile TEXT NOT NULL,
    started_utc TEXT NOT NULL,
    argv TEXT NOT NULL,
    env_json TEXT NOT NULL,
    finished_utc TEXT,
    summary_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS cells (
    key TEXT NOT NULL,
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    suite TEXT NOT NULL,
    cell_json TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN (%s)),
    message TEXT NOT NULL DEFAULT '',
    metrics_json TEXT NOT NULL DEFAULT '{}',
    finished_utc TEXT NOT NULL,
    PRIMARY KEY (key, run_id)
);
CREATE TABLE IF NOT EXISTS curves (
    key TEXT NOT NULL,
    run_id INTEGER NOT NULL,
    step INTEGER NOT NULL,
    train_loss REAL, train_acc REAL, dev_loss REAL, dev_acc REAL,
    PRIMARY KEY (key, run_id, step)
);
CREATE TABLE IF NOT EXISTS samples (
    key TEXT NOT NULL,
    run_id INTEGER NOT NULL,
    timing_group TEXT NOT NULL,
    samples_json TEXT NOT NULL,
    PRIMARY KEY (key, run_id)
);
CREATE INDEX IF NOT EXISTS samples_by_group ON samples (timing_group);
"""
_SCHEMA %= ", ".join(f"'{status}'" for status in STATUSES)  # the statuses are written once, above


def loads_column(path: Path, text: str, what: str, kind: type = dict) -> Any:
    """A JSON column of the store, decoded, or exit 2 naming the store: a hand-edited or damaged row is bad input,
    not a traceback in the middle of a report."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, kind):
        raise UserError(f"{path}: a row's {what} is not valid JSON ({str(text)[:60]!r}); the store is damaged: move it "
                        f"aside and rerun the suite (or restore it from a copy)")
    return value


def cell_column(path: Path, text: str) -> dict[str, Any]:
    """A row's ``cell_json``: a mapping with the cell's ``params`` (a mapping naming its attention) and device."""
    cell = loads_column(path, text, "cell_json")
    params = cell.get("params")
    named = isinstance(params, dict) and isinstance(params.get("attention"), str)
    if not (named and isinstance(cell.get("device"), str)):
        raise UserError(f"{path}: a row's cell_json lacks its params or device ({text[:60]!r}); the store is damaged: "
                        f"move it aside and rerun the suite")
    return cell


def disk_error(exc: sqlite3.DatabaseError) -> bool:
    """Whether sqlite failed because of the disk (full, failing, read-only) rather than the file's content."""
    return any(s in str(exc) for s in ("disk is full", "disk I/O error", "readonly database", "read-only"))


def store_error(path: Path | str, exc: sqlite3.DatabaseError) -> Exception:
    """One line for a store that cannot be used: a full or failing disk is the environment (exit 1), anything else
    a file that is not a results store (exit 2)."""
    text = str(exc)
    if disk_error(exc):
        return RunFailed(f"{path}: {text}; free space or fix the disk (or give another --out), then rerun: "
                         f"the finished cells are kept and the run resumes")
    return UserError(f"{path}: not a readable results store ({text}); move it aside (its results cannot be read) "
                     f"or give another --out")


_OURS = {"runs", "cells"}  # the tables of every schema version (version 1 had no meta table)
_SQLITE_MAGIC = b"SQLite format 3\x00"


def check_ours(db: sqlite3.Connection, path: Path) -> int:
    """The schema version of the store ``db`` (0 for a new, empty file), or exit 2 for a database that is not
    ours or is newer than this code reads."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return 0
    if not _OURS <= tables:
        raise UserError(f"{path}: an SQLite database of another application (tables {', '.join(sorted(tables)[:5])}), "
                        f"not an attnbench results store; nothing was changed in it; give another directory")
    row = db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone() if "meta" in tables else None
    version = int(row[0]) if row and str(row[0]).isdigit() else 1
    if version > SCHEMA_VERSION:
        raise UserError(f"{path}: written by a newer attnbench (store schema {version}; this one reads up to "
                        f"{SCHEMA_VERSION}); upgrade attnbench to read or extend it")
    return version


def open_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write the store at ``path``; a version-1 store is migrated in a copy in memory.

    SQLite opens a WAL database read-only if it may create the ``-shm`` file beside it; in a read-only directory it
    cannot, and the file is opened ``immutable`` instead (nothing can be writing it there either).
    """
    try:
        with path.open("rb") as f:
            magic = f.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        raise UserError(f"{path}: no such results store; give a directory written by `attnbench run`") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror}); fix its permissions") from None
    if magic != _SQLITE_MAGIC:
        what = "an empty file" if not magic else "not an SQLite file"
        raise UserError(f"{path}: {what}, not a results store; move it aside (nothing in it can be read)")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    db = None
    try:
        for extra in ("", "&immutable=1"):
            try:
                db = sqlite3.connect(uri + extra, uri=True, isolation_level=None)
                version = check_ours(db, path)
                break
            except sqlite3.OperationalError as exc:
                if db is not None:
                    db.close()
                if extra or "unable to open" not in str(exc):
                    raise
        if version == 0:  # read-only: nothing may create the tables, so there is nothing to read
            db.close()
            wal = path.with_name(path.name + "-wal")
            why = (f"its rows are in {wal.name} beside it, which this read-only opening cannot apply; open it once "
                   f"with `attnbench run` (or copy both to a writable folder)" if wal.is_file() else
                   f"a copy taken without its {wal.name}, which held the rows of a run that was killed or still "
                   f"running; copy the -wal file too")
            raise UserError(f"{path}: a results store with no tables: {why}")
        if version == 1:
            memory = sqlite3.connect(":memory:", isolation_level=None)
            db.backup(memory)
            db.close()
            db = memory
            migrate_v1(db)
        return db
    except sqlite3.DatabaseError as exc:
        raise store_error(path, exc) from None


def create_tables(db: sqlite3.Connection) -> None:
    """The schema's tables, statement by statement (``executescript`` would commit the open transaction)."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def table_columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def migrate_v1(db: sqlite3.Connection) -> None:
    """A version-1 store (``cells`` keyed by key alone, curves without run ids) becomes version 2, rows kept."""
    if not table_columns(db, "cells") or "run_id" in table_columns(db, "curves"):
        return
    db.execute("ALTER TABLE cells RENAME TO cells_v1")
    if not table_columns(db, "curves"):  # stores written before learning curves were kept have no curves table
        db.execute("CREATE TABLE curves (key TEXT, step INTEGER, train_loss REAL, train_acc REAL, dev_loss REAL, "
                   "dev_acc REAL)")
    db.execute("ALTER TABLE curves RENAME TO curves_v1")
    db.execute("ALTER TABLE runs ADD COLUMN finished_utc TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN summary_json TEXT NOT NULL DEFAULT '{}'")
    create_tables(db)
    db.execute("INSERT INTO cells SELECT key, run_id, suite, cell_json, status, message, metrics_json, finished_utc "
               "FROM cells_v1")
    db.execute("INSERT INTO curves SELECT v.key, c.run_id, v.step, v.train_loss, v.train_acc, v.dev_loss, v.dev_acc "
               "FROM curves_v1 v JOIN cells_v1 c ON c.key = v.key")
    db.execute("DROP TABLE cells_v1")
    db.execute("DROP TABLE curves_v1")
