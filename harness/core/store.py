"""The store of record: SQLite in WAL mode, one transaction per finished cell, every run kept.

A cell's row is written only once it has a final status, in a single transaction, so a runner killed at any
point leaves either the whole row or nothing. Rows are never overwritten: each run (one ``attnbench run``) adds its
own rows, so ``--fresh`` adds a new measurement beside the old ones and the history stays. A rerun skips keys that
already have a row; the reports read the latest row of each key (:meth:`Store.dataframe`).
CSV, Markdown, LaTeX and plots are exports derived from this file (``attnbench report``).

Schema version 2 (:mod:`harness.core.schema`) added the run history, raw timing samples and the run's end and load
summary; a version-1 store (one row per key) is migrated in place the first time a run opens it.
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
from .current import Stored, current
from .current import identity as cell_identity
from .errors import UserError
from .schema import (
    SCHEMA_VERSION,
    cell_column,
    check_ours,
    create_tables,
    disk_error,
    loads_column,
    migrate_v1,
    open_read_only,
    store_error,
)

CURVE_COLUMNS = ("step", "train_loss", "train_acc", "dev_loss", "dev_acc")
_ROW = "SELECT c.key, c.run_id, c.suite, c.cell_json, c.status, c.message, c.metrics_json, c.finished_utc FROM cells c"
#: The latest row of every key (the one of the highest run id), or every row of one run.
_LATEST = (f"{_ROW} JOIN (SELECT key, MAX(run_id) AS run_id FROM cells GROUP BY key) m "
           "ON c.key = m.key AND c.run_id = m.run_id")
_OF_RUN = f"{_ROW} WHERE c.run_id = ?"


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Store:
    """The results of one suite directory (``<out>/<suite>/<profile>/results.db``): every run, every row."""

    def __init__(self, path: str | Path, *, suite: str | None = None, kind: str | None = None,
                 source: str | None = None, read_only: bool = False) -> None:
        """Open (or create) the store at ``path``.

        Given ``suite``, ``kind`` and ``source`` (the suite file's name), the store is bound to that suite on first
        use and refuses another one later: an accuracy store copied into a speed suite's directory, or two suite files
        with the same ``name`` sharing an ``--out``, would otherwise mix their rows into one table.

        ``read_only`` (``report``, ``compare``, ``show``): the file is never written, created or migrated in place, so
        a store on a read-only mount reads, and another application's SQLite file is refused untouched.

        Raises:
            UserError: the file is not a results store (empty, truncated, random bytes, a directory, another
                application's database), was written by a newer attnbench, or belongs to another suite (exit 2).
            RunFailed: the disk is full or failing (exit 1).
        """
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise UserError(f"{self.path}: not a file, so not a results store; move it aside or give another --out")
        if read_only:
            self.db = open_read_only(self.path)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per cell.
            self.db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            check_ours(self.db, self.path)  # before the first write: nothing is added to a file that is not ours
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
            with self._transaction():
                migrate_v1(self.db)
                create_tables(self.db)
                self.db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('schema_version', ?)",
                                (str(SCHEMA_VERSION),))
                if suite is not None:
                    self._bind(suite, kind or "", source or "")
        except sqlite3.DatabaseError as exc:
            raise store_error(self.path, exc) from None
        self.checkpoint()  # the tables in the file itself from the start (see checkpoint)

    def _bind(self, suite: str, kind: str, source: str) -> None:
        """Record which suite this store holds, or refuse another one (see ``__init__``)."""
        want = {"suite": suite, "kind": kind, "source": source}
        have = dict(self.db.execute("SELECT name, value FROM meta WHERE name IN ('suite', 'kind', 'source')"))
        if not have:  # a new store, or one written before stores knew their suite: its cells tell
            have = {k: v for k, v in zip(("suite", "kind"), self._cell_identity(), strict=True) if v is not None}
        clash = [f"{k} {have[k]!r}" for k in want if k in have and have[k] != want[k]]
        if clash:
            raise UserError(f"{self.path} holds the results of {', '.join(clash)}, not {suite!r} ({kind}, {source}); "
                            f"give this suite another --out (or another name)")
        self.db.executemany("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", want.items())

    def _cell_identity(self) -> tuple[str | None, str | None]:
        row = self.db.execute("SELECT suite, cell_json FROM cells LIMIT 1").fetchone()
        return (None, None) if row is None else (row[0], loads_column(self.path, row[1], "cell_json").get("kind"))

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -----------------------------------------------------------------------------------------------------------------
    # Runs

    def start_run(self, suite: str, profile: str, env: dict[str, Any], argv: Iterable[str]) -> int:
        with self._transaction():  # every write goes through one, so a failing disk is one line naming this file
            cur = self.db.execute(
                "INSERT INTO runs (suite, profile, started_utc, argv, env_json) VALUES (?, ?, ?, ?, ?)",
                (suite, profile, _utc_now(), json.dumps(list(argv)), json.dumps(env, default=str)),
            )
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, summary: dict[str, Any]) -> None:
        """Record the end of a run and its summary (statuses, cells flagged noisy, load)."""
        with self._transaction():
            self.db.execute("UPDATE runs SET finished_utc = ?, summary_json = ? WHERE run_id = ?",
                            (_utc_now(), json.dumps(summary, default=str), run_id))

    def runs(self, run_ids: Iterable[int] | None = None) -> pd.DataFrame:
        """One row per run: id, suite, profile, start and end, command line, commit, environment and summary."""
        rows = []
        wanted = None if run_ids is None else {int(r) for r in run_ids}
        for run_id, suite, profile, started, finished, argv, env_json, summary_json in self.db.execute(
            "SELECT run_id, suite, profile, started_utc, finished_utc, argv, env_json, summary_json FROM runs "
            "ORDER BY run_id"
        ):
            if wanted is not None and run_id not in wanted:
                continue
            env = loads_column(self.path, env_json, "env_json")
            rows.append({"run_id": run_id, "suite": suite, "profile": profile, "started_utc": started,
                         "finished_utc": finished, "argv": loads_column(self.path, argv, "argv", list),
                         "commit": env.get("git_commit"), "env": env,
                         "summary": loads_column(self.path, summary_json, "summary_json")})
        return pd.DataFrame(rows, columns=["run_id", "suite", "profile", "started_utc", "finished_utc", "argv",
                                           "commit", "env", "summary"])

    def latest_env(self) -> dict[str, Any]:
        row = self.db.execute("SELECT env_json FROM runs ORDER BY run_id DESC LIMIT 1").fetchone()
        return loads_column(self.path, row[0], "env_json") if row else {}

    # -----------------------------------------------------------------------------------------------------------------
    # Cells

    def checkpoint(self) -> None:
        """Copy the committed rows from the write-ahead log (``results.db-wal``) into ``results.db``: SQLite does so
        on its own only every thousand pages, so that a store copied without its ``-wal`` file would otherwise miss
        every row of a run. Passive: never waits for a reader."""
        try:
            self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.DatabaseError as exc:
            if not disk_error(exc):
                raise
            raise store_error(self.path, exc) from None

    def stale_cells(self) -> int:
        """How many stored keys were written by an attnbench whose keys did not cover the code's imports, the data's
        contents and the software (:mod:`harness.core.current`): results that can only be shown as stale."""
        return sum(1 for (cell_json,) in self.db.execute("SELECT DISTINCT cell_json FROM cells")
                   if "setting" not in cell_column(self.path, cell_json))

    def finished_keys(self) -> set[str]:
        return {row[0] for row in self.db.execute("SELECT DISTINCT key FROM cells")}

    def put(
        self,
        run_id: int,
        cell: Cell,
        status: str,
        message: str = "",
        metrics: dict[str, Any] | None = None,
        curve: list[dict[str, float]] | None = None,
        samples: list[float] | None = None,
    ) -> None:
        """Record a cell's final result in this run (with its learning curve and timing samples) atomically."""
        if status not in STATUSES:
            raise ValueError(f"status {status!r} is not one of {STATUSES}")
        metrics = metrics or {}
        with self._transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO cells (key, run_id, suite, cell_json, status, message, metrics_json,"
                " finished_utc) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (cell.key, run_id, cell.suite, json.dumps(cell.to_json(), default=str), status, message,
                 json.dumps(metrics), _utc_now()),
            )
            self.db.execute("DELETE FROM curves WHERE key = ? AND run_id = ?", (cell.key, run_id))
            self.db.executemany(
                f"INSERT INTO curves (key, run_id, {', '.join(CURVE_COLUMNS)})"
                f" VALUES (?, ?{', ?' * len(CURVE_COLUMNS)})",
                [(cell.key, run_id, *(point.get(c) for c in CURVE_COLUMNS)) for point in curve or []],
            )
            if samples:
                self.db.execute("INSERT OR REPLACE INTO samples (key, run_id, timing_group, samples_json) "
                                "VALUES (?, ?, ?, ?)",
                                (cell.key, run_id, str(metrics.get("timing_group", "")), json.dumps(samples)))
            faults.point("store.in_transaction", cell.label)  # rows written, not yet committed

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception.

        With isolation_level=None sqlite3 autocommits every statement and ``with connection:`` opens no
        transaction, so a process killed between a cell's row and its curve rows used to leave the cell stored
        without its curve (and a rerun skipped it). A kill inside this block leaves nothing: the WAL holds no
        commit record, so the next open rolls it back. A full or failing disk (at any statement, the commit
        included) is one line naming this file (:func:`store_error`, exit 1); the cell is not stored and a rerun
        measures it again.
        """
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # a failed disk may refuse the rollback as well
                    self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            if not disk_error(exc):
                raise
            with contextlib.suppress(sqlite3.Error):  # a commit that failed leaves its transaction open
                self.db.execute("ROLLBACK")
            raise store_error(self.path, exc) from None

    def dataframe(self, keys: Iterable[str] | None = None, *, run_id: int | None = None,
                  identity: bool = False) -> pd.DataFrame:
        """One row per cell as the tables show it (:func:`harness.core.current.current`: its newest result, measured
        under the store's current setting and data), or per cell of run ``run_id``: key, suite, kind, the axis values,
        device, status, message, the metrics (raw, full precision), the run id and the commit that measured it; with
        ``identity``, also the column ``identity`` (suite, every axis value and device as one string), on which cells
        of two stores are matched.

        ``attrs["left_out"]`` holds one line for each group of results left out (another setting, earlier data) or
        shown though stale (stored by an earlier attnbench); :func:`harness.report.export.write_suite_reports` prints
        them.
        """
        commits = {int(r): loads_column(self.path, e, "env_json").get("git_commit") for r, e in self.db.execute(
            "SELECT run_id, env_json FROM runs")}
        query = _LATEST if run_id is None else _OF_RUN
        wanted = None if keys is None else set(keys)
        stored, extra = [], []
        for key, rid, suite, cell_json, status, message, metrics_json, finished in self.db.execute(
            query, () if run_id is None else (run_id,)
        ):
            if wanted is not None and key not in wanted:
                continue
            cell = cell_column(self.path, cell_json)
            stored.append(Stored(len(stored), int(rid), finished, suite, cell))
            extra.append((key, status, message, metrics_json))
        kept, notes = current(stored)
        rows = []
        for row in kept:
            key, status, message, metrics_json = extra[row.index]
            cell = row.cell
            rows.append({"key": key, "suite": row.suite, "kind": cell.get("kind", "speed"), **cell["params"],
                         "device": cell["device"].split(":")[0], "status": status, "message": message,
                         **loads_column(self.path, metrics_json, "metrics_json"), "run_id": row.run_id,
                         "commit": commits.get(row.run_id), "finished_utc": row.finished_utc,
                         **({"identity": cell_identity(row.suite, cell["params"], cell["device"])} if identity
                            else {})})
        df = pd.DataFrame(rows)
        df.attrs["left_out"] = notes
        return df

    def samples(self, keys: Iterable[str] | None = None, *, timing_groups: Iterable[str] | None = None,
                run_ids: Iterable[int] | None = None) -> dict[tuple[str, str], list[float]]:
        """Raw per-round timing samples (ms per call), by (key, timing group), of the given keys, groups or runs.

        A timing group is unique to one run (a random id drawn when the group is timed), so (key, group) names one
        stored measurement.
        """
        keys = None if keys is None else set(keys)
        groups = None if timing_groups is None else set(timing_groups)
        runs = None if run_ids is None else {int(r) for r in run_ids}
        out = {}
        for key, run_id, group, blob in self.db.execute(
            "SELECT key, run_id, timing_group, samples_json FROM samples ORDER BY run_id"
        ):
            if (keys is None or key in keys) and (groups is None or group in groups) and (runs is None
                                                                                          or run_id in runs):
                out[(key, group)] = loads_column(self.path, blob, "samples_json", list)
        return out

    def group_samples(self, timing_groups: Iterable[str]) -> dict[tuple[str, str], list[float]]:
        """Raw timing samples by (timing group, attention): every variant timed in those interleaved groups, whichever
        key or run stored it, so a cell's speed-up is found with its own group's baseline."""
        groups = set(timing_groups)
        out = {}
        for group, cell_json, blob in self.db.execute(
            "SELECT s.timing_group, c.cell_json, s.samples_json FROM samples s "
            "JOIN cells c ON c.key = s.key AND c.run_id = s.run_id"
        ):
            if group in groups:
                attention = cell_column(self.path, cell_json)["params"]["attention"]
                out[(group, attention)] = loads_column(self.path, blob, "samples_json", list)
        return out

    def curves(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Every evaluation point of each cell's latest result: key, step, train/dev loss and accuracy, and the
        cell's axis values."""
        latest = self.dataframe(keys)
        if latest.empty:
            return pd.DataFrame(columns=["key", *CURVE_COLUMNS])
        points = pd.read_sql_query(f"SELECT key, run_id, {', '.join(CURVE_COLUMNS)} FROM curves ORDER BY key, step",
                                   self.db)
        params = pd.DataFrame([{"key": key, **cell_column(self.path, cell_json)["params"]}
                               for key, cell_json in self.db.execute("SELECT DISTINCT key, cell_json FROM cells")])
        points = points.merge(latest[["key", "run_id"]], on=["key", "run_id"], how="inner").drop(columns="run_id")
        if points.empty:
            return pd.DataFrame(columns=["key", *CURVE_COLUMNS])
        return points.merge(params.drop_duplicates("key"), on="key", how="inner")
