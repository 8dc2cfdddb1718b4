"""The store of record: SQLite in WAL mode, one transaction per finished cell.

A cell's row is written only once it has a final status, in a single transaction, so a runner killed at any
point leaves either the whole row or nothing; a rerun skips keys already present (``--fresh`` redoes them).
CSV, Markdown, LaTeX and plots are exports derived from this file (``attnbench report``).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from . import faults
from .cell import STATUSES, Cell

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT,
    suite TEXT NOT NULL,
    profile TEXT NOT NULL,
    started_utc TEXT NOT NULL,
    argv TEXT NOT NULL,
    env_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cells (
    key TEXT PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(run_id),
    suite TEXT NOT NULL,
    cell_json TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN (%s)),
    message TEXT NOT NULL DEFAULT '',
    metrics_json TEXT NOT NULL DEFAULT '{}',
    finished_utc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS curves (
    key TEXT NOT NULL,
    step INTEGER NOT NULL,
    train_loss REAL, train_acc REAL, dev_loss REAL, dev_acc REAL,
    PRIMARY KEY (key, step)
);
"""
_SCHEMA %= ", ".join(f"'{status}'" for status in STATUSES)  # the statuses are written once, in harness.cell
CURVE_COLUMNS = ("step", "train_loss", "train_acc", "dev_loss", "dev_acc")


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Store:
    """Append-only results of one suite directory (``<out>/<suite>/<profile>/results.db``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per cell.
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_run(self, suite: str, profile: str, env: dict[str, Any], argv: Iterable[str]) -> int:
        cur = self.db.execute(
            "INSERT INTO runs (suite, profile, started_utc, argv, env_json) VALUES (?, ?, ?, ?, ?)",
            (suite, profile, _utc_now(), json.dumps(list(argv)), json.dumps(env, default=str)),
        )
        return int(cur.lastrowid)

    def finished_keys(self) -> set[str]:
        return {row[0] for row in self.db.execute("SELECT key FROM cells")}

    def put(
        self,
        run_id: int,
        cell: Cell,
        status: str,
        message: str = "",
        metrics: dict[str, Any] | None = None,
        curve: list[dict[str, float]] | None = None,
    ) -> None:
        """Record a cell's final result (and learning curve) atomically, replacing an earlier one (``--fresh``)."""
        if status not in STATUSES:
            raise ValueError(f"status {status!r} is not one of {STATUSES}")
        with self._transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO cells (key, run_id, suite, cell_json, status, message, metrics_json,"
                " finished_utc) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    cell.key,
                    run_id,
                    cell.suite,
                    json.dumps(cell.to_json(), default=str),
                    status,
                    message,
                    json.dumps(metrics or {}),
                    _utc_now(),
                ),
            )
            self.db.execute("DELETE FROM curves WHERE key = ?", (cell.key,))
            self.db.executemany(
                f"INSERT INTO curves (key, {', '.join(CURVE_COLUMNS)}) VALUES (?{', ?' * len(CURVE_COLUMNS)})",
                [(cell.key, *(point.get(c) for c in CURVE_COLUMNS)) for point in curve or []],
            )
            faults.point("store.in_transaction", cell.label)  # rows written, not yet committed

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception.

        With isolation_level=None sqlite3 autocommits every statement and ``with connection:`` opens no
        transaction, so a process killed between a cell's row and its curve rows used to leave the cell stored
        without its curve (and a rerun skipped it). A kill inside this block leaves nothing: the WAL holds no
        commit record, so the next open rolls it back.
        """
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def latest_env(self) -> dict[str, Any]:
        row = self.db.execute("SELECT env_json FROM runs ORDER BY run_id DESC LIMIT 1").fetchone()
        return json.loads(row[0]) if row else {}

    def dataframe(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """One row per cell: key, suite, status, message, the axis values, the metrics (raw, full precision)."""
        rows = []
        wanted = None if keys is None else set(keys)
        for key, suite, cell_json, status, message, metrics_json, finished in self.db.execute(
            "SELECT key, suite, cell_json, status, message, metrics_json, finished_utc FROM cells"
        ):
            if wanted is not None and key not in wanted:
                continue
            cell = json.loads(cell_json)
            rows.append(
                {
                    "key": key,
                    "suite": suite,
                    "kind": cell["kind"],
                    **cell["params"],
                    "device": cell["device"].split(":")[0],
                    "status": status,
                    "message": message,
                    **json.loads(metrics_json),
                    "finished_utc": finished,
                }
            )
        return pd.DataFrame(rows)

    def curves(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Every evaluation point: key, step, train/dev loss and accuracy, and the cell's axis values."""
        wanted = None if keys is None else set(keys)
        points = pd.read_sql_query(f"SELECT key, {', '.join(CURVE_COLUMNS)} FROM curves ORDER BY key, step", self.db)
        params = pd.DataFrame([{"key": key, **json.loads(cell_json)["params"]}
                               for key, cell_json in self.db.execute("SELECT key, cell_json FROM cells")
                               if wanted is None or key in wanted])
        if params.empty or points.empty:
            return pd.DataFrame(columns=["key", *CURVE_COLUMNS])
        return points.merge(params, on="key", how="inner")
