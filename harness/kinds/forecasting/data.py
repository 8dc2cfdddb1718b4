"""Long-term forecasting data (S3Attention journal §IV-B, Table 2, Table S6): the six benchmarks' CSV files,
their chronological splits with a scaler fitted on the training rows only, (history, future) windows, and offline
generators that write the same CSV layout for the ``smoke`` and ``quick`` profiles.

File layout, as the files are distributed with the Informer/Autoformer/FEDformer code: a header row naming each
column once, a ``date`` column (any format pandas parses, one UTC offset or none, strictly increasing) and one numeric
column per variable, every value finite (no missing value, no ``inf``; no True/False column, which pandas would read
as 0/1). Every check runs when a file is read, before any training, and a failure is a
:class:`~harness.core.errors.UserError` (exit code 2) naming the file, what is wrong (the row and column of a bad
value) and what the file should hold. Scaling is checked too: a column whose training mean or standard deviation
overflows float64 (values near 1e308), or whose scaled values overflow float32, is refused by name rather than
zeroed or made infinite.

Splits, as the released code cuts them (``data_loader.py``, ``Dataset_ETT_minute`` and ``Dataset_Custom``), which is
what Table 2's numbers were computed on:
- ETT (15-minute files): 12 / 4 / 4 months of rows (34,560 / 11,520 / 11,520; "60/20/20" of the first 20 months;
  rows after them unused).
- Every other file: 70% train, 20% test (both rounded down as the released code does, in floating point:
  int(700 * 0.7) = 489), the rest validation.
- The validation and test windows start ``input_len`` rows before their first target, so every row of a split is
  forecast once (the released code's ``border1 - seq_len``).
- Variables keep the file's column order (the released code moves ``OT`` last; MSE and MAE average over all
  variables, so the order does not change them).
- One scaler per variable (mean and standard deviation of the training rows; a constant column gets scale 1), applied
  to every split; MSE and MAE are reported on this scale, as in Table 2.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ...core.datafiles import open_data_file
from ...core.errors import UserError
from ...core.files import atomic_write, checksum_matches, spec_key, write_checksum

ETT_MONTH_ROWS = 30 * 24 * 4  # rows of a 30-day month at 15-minute resolution (the released code's unit)


@dataclass(frozen=True)
class DatasetSpec:
    """One row group of Table 2: the file it is read from, how it is split, the history length and the horizons."""

    name: str
    file: str
    split: str  # "ett_minute" (12/4/4 months) or "ratio" (70/10/20)
    input_len: int
    horizons: tuple[int, ...]
    freq: str  # time-feature resolution: "t" (minutes), "h", "d", "w" (see time_features)


#: The six datasets of Table 2 under the file names they are distributed with; Table S6 gives their sizes. Time
#: features are the hourly ones for all six: the released run script (``Time Series/run_M.sh``) passes no ``--freq``,
#: so its default "h" applied to every dataset, ETTm2's 15-minute and ILI's weekly rows included.
DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec for spec in (
        DatasetSpec("ETTm2", "ETTm2.csv", "ett_minute", 96, (96, 192, 336, 720), "h"),
        DatasetSpec("Electricity", "electricity.csv", "ratio", 96, (96, 192, 336, 720), "h"),
        DatasetSpec("Exchange", "exchange_rate.csv", "ratio", 96, (96, 192, 336, 720), "h"),
        DatasetSpec("Traffic", "traffic.csv", "ratio", 96, (96, 192, 336, 720), "h"),
        DatasetSpec("Weather", "weather.csv", "ratio", 96, (96, 192, 336, 720), "h"),
        DatasetSpec("ILI", "national_illness.csv", "ratio", 36, (24, 36, 48, 60), "h"),
    )
}


@dataclass(frozen=True)
class Series:
    """A multivariate series as read: values [T, C] (float32), the time features of each row [T, F], the names."""

    values: np.ndarray
    marks: np.ndarray
    columns: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class Split:
    """One split, scaled: values [T, C] and time features [T, F]; windows start at every row that leaves a full
    history and horizon."""

    values: np.ndarray
    marks: np.ndarray

    def windows(self, input_len: int, horizon: int) -> int:
        """How many (history, future) windows this split holds."""
        return max(0, len(self.values) - input_len - horizon + 1)


@dataclass(frozen=True)
class Scaler:
    """Per-variable standardisation fitted on the training rows."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray) -> Scaler:
        """Mean and standard deviation of ``values`` [T, C]; either may be inf where values near float64's limit
        overflow (no warning: :func:`split_series` names the column)."""
        with np.errstate(over="ignore", invalid="ignore"):
            mean, std = values.mean(axis=0), values.std(axis=0)
        return cls(mean, np.where(std > 0, std, 1.0))  # a constant variable is left unscaled

    def transform(self, values: np.ndarray) -> np.ndarray:
        """``values`` standardised, as float32 (inf where they overflow it: :func:`split_series` names them)."""
        with np.errstate(over="ignore", invalid="ignore"):
            return ((values - self.mean) / self.std).astype(np.float32)


def time_features(dates: pd.DatetimeIndex, freq: str) -> np.ndarray:
    """The released code's ``timeF`` encoding: calendar fields scaled to [-0.5, 0.5], [T, F]; finer resolutions add
    finer fields (minute and hour for "t", hour for "h"; day of week, month and year for every resolution)."""
    fields = {
        "minute": (dates.minute, 59), "hour": (dates.hour, 23), "weekday": (dates.day_of_week, 6),
        "monthday": (dates.day - 1, 30), "yearday": (dates.day_of_year - 1, 365),
    }
    used = {"t": list(fields), "h": list(fields)[1:], "d": list(fields)[2:], "w": list(fields)[2:]}[freq]
    return np.stack([np.asarray(fields[k][0], dtype=np.float32) / fields[k][1] - 0.5 for k in used], axis=1)


#: A UTC offset at the end of a date ("+01:00", "-0500", "Z"), to name the row where a file's offsets change.
_OFFSET = r"(Z|[+-]\d\d:?\d\d)\s*$"


def _header(text: bytes) -> list[str]:
    """The header's names as written: pandas renames a second ``a`` to ``a.1``, which would read as a variable."""
    try:
        return list(pd.read_csv(io.BytesIO(text), header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, IndexError):
        return []  # the full read below names the problem


def _non_finite(values: np.ndarray) -> tuple[int, int] | None:
    """(row, column) of the first value of ``values`` [T, C] that is not finite, or None."""
    bad = np.argwhere(~np.isfinite(values))  # [K, 2]
    return (int(bad[0, 0]), int(bad[0, 1])) if len(bad) else None


def _first_non_finite(path: Path, values: np.ndarray, columns: list[str]) -> None:
    """A UserError naming the first value of ``values`` [T, C] that is not finite, by data row and column."""
    if (at := _non_finite(values)) is not None:
        row, col = at
        value = values[row, col]
        if np.isnan(value):
            raise UserError(f"{path}: missing value in data row {row + 1}, column {columns[col]!r}; fill or drop it "
                            "first (the benchmarks' files have none)")
        raise UserError(f"{path}: value {value} in data row {row + 1}, column {columns[col]!r} is not finite; "
                        "replace it with a number (the benchmarks' files hold none)")


def _dates(path: Path, column: pd.Series) -> pd.Series:
    """The ``date`` column parsed; a UserError naming the row of a date that is none, or where the UTC offset
    changes (pandas cannot hold several offsets in one column, and a change of clock is no step of the series)."""
    try:
        dates = pd.to_datetime(column, errors="coerce")
    except (ValueError, TypeError):  # pandas: "Mixed timezones detected"
        offsets = column.astype(str).str.extract(_OFFSET, expand=False).fillna("")
        changed = offsets.ne(offsets.iloc[0]).to_numpy()
        row = int(np.argmax(changed))
        where = f" (data row {row + 1}: {column.iloc[row]!r}, data row 1: {column.iloc[0]!r})" if changed.any() else ""
        raise UserError(f"{path}: the dates mix time zones or UTC offsets{where}; write every date with the same "
                        "offset, or none") from None
    if dates.isna().any():
        row = int(np.argmax(dates.isna().to_numpy()))
        raise UserError(f"{path}: date {column.iloc[row]!r} in data row {row + 1} is not a date")
    return dates


def read_series(path: str | Path, freq: str, within: str | Path | None = None) -> Series:
    """Read and check one CSV file (layout in the module docstring). ``within``: the data folder the user gave; the
    file must be a regular file whose real path lies under it (:func:`~harness.core.datafiles.open_data_file`: a link
    to elsewhere, a FIFO or a device is refused by name), as every reader of the user's data requires."""
    path = Path(path)
    expected = "a CSV with a header, a 'date' column and one numeric column per variable"
    if not path.is_file() and not path.is_symlink():
        raise UserError(f"{path}: no such file; the data directory must hold {path.name} ({expected})")
    if within is not None:
        with open_data_file(path, Path(within), expected) as f:
            text = f.read()
    else:
        text = path.read_bytes()
    try:
        frame = pd.read_csv(io.BytesIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not readable as CSV ({str(exc).splitlines()[0]}); expected {expected}") from None
    header = _header(text)
    twice = next((name for i, name in enumerate(header) if name and name in header[:i]), None)
    if twice is not None:
        raise UserError(f"{path}: column {twice!r} appears twice in the header (pandas would read the second as "
                        f"{twice + '.1'!r}); give each variable its own name; expected {expected}")
    if frame.empty:
        raise UserError(f"{path}: no data rows; expected {expected}")
    if "date" not in frame.columns:
        raise UserError(f"{path}: no 'date' column (columns: {', '.join(map(str, frame.columns[:5]))}...); "
                        f"expected {expected}")
    variables = [c for c in frame.columns if c != "date"]
    if not variables:
        raise UserError(f"{path}: only a 'date' column; expected {expected}")
    bad = [c for c in variables if not pd.api.types.is_numeric_dtype(frame[c]) or pd.api.types.is_bool_dtype(frame[c])]
    if bad:
        what = "holds True/False, not numbers" if pd.api.types.is_bool_dtype(frame[bad[0]]) else "is not numeric"
        raise UserError(f"{path}: column {bad[0]!r} {what}; expected {expected}")
    values = frame[variables].to_numpy(dtype=np.float64)
    _first_non_finite(path, values, [str(c) for c in variables])
    dates = _dates(path, frame["date"])
    if not dates.is_monotonic_increasing or dates.duplicated().any():
        raise UserError(f"{path}: the dates are not strictly increasing; the splits are chronological")
    return Series(values, time_features(pd.DatetimeIndex(dates), freq), tuple(map(str, variables)), str(path))


def borders(spec: DatasetSpec, rows: int) -> dict[str, tuple[int, int]]:
    """[start, end) row range of each split, windows included (see the module docstring)."""
    n = spec.input_len
    if spec.split == "ett_minute":
        train, val, test = 12 * ETT_MONTH_ROWS, 4 * ETT_MONTH_ROWS, 4 * ETT_MONTH_ROWS
        if rows < train + val + test:
            raise UserError(f"{spec.file}: {rows} rows, but the ETT split needs {train + val + test} "
                            "(12/4/4 months of 15-minute rows); is this the full ETTm2.csv?")
        ends = (train, train + val, train + val + test)
    else:
        train, test = int(rows * 0.7), int(rows * 0.2)
        ends = (train, rows - test, rows)
    return {"train": (0, ends[0]), "val": (ends[0] - n, ends[1]), "test": (ends[1] - n, ends[2])}


def split_series(series: Series, spec: DatasetSpec) -> dict[str, Split]:
    """The three splits of ``series``, scaled by a scaler fitted on the training rows; each must hold at least one
    window of the longest horizon."""
    ranges = borders(spec, len(series.values))
    scaler = Scaler.fit(series.values[slice(*ranges["train"])])
    scale = np.isfinite(scaler.mean) & np.isfinite(scaler.std)
    if not scale.all():
        col = int(np.argmin(scale))
        row = int(np.argmax(np.abs(series.values[slice(*ranges["train"]), col])))
        raise UserError(f"{series.source}: column {series.columns[col]!r}: the mean or standard deviation of its "
                        f"training rows overflows float64 (its largest value: {series.values[row, col]} in data row "
                        f"{row + 1}); fix the value, or rescale the column so that its values stay far below 1e154")
    splits = {name: Split(scaler.transform(series.values[a:b]), series.marks[a:b]) for name, (a, b) in ranges.items()}
    for name, (a, _) in ranges.items():
        if (at := _non_finite(splits[name].values)) is not None:
            row, col = at
            raise UserError(f"{series.source}: value {series.values[a + row, col]} in data row {a + row + 1}, column "
                            f"{series.columns[col]!r} lies beyond float32 once scaled by the training rows' mean "
                            f"{scaler.mean[col]:g} and standard deviation {scaler.std[col]:g}; fix the value or "
                            "rescale the column")
    check_windows(splits, spec.input_len, max(spec.horizons), series.source)
    return splits


def check_windows(splits: dict[str, Split], input_len: int, horizon: int, source: str) -> None:
    """Every split holds at least one window of ``input_len`` history and ``horizon`` future rows, or a UserError
    names the split and its size."""
    for name, split in splits.items():
        if split.windows(input_len, horizon) < 1:
            raise UserError(f"{source}: the {name} split has {len(split.values)} rows, too few for one "
                            f"window of {input_len} history + {horizon} horizon rows")


def load_dataset(spec: DatasetSpec, data_dir: str | Path) -> dict[str, Split]:
    """Read ``spec.file`` from ``data_dir``, check it, and split and scale it."""
    return split_series(read_series(Path(data_dir) / spec.file, spec.freq, within=data_dir), spec)


class Windows(torch.utils.data.Dataset):
    """(x [L, C], x_mark [L, F], y [H, C], y_mark [H, F]) for every start s of a split: the history is rows
    s..s+L-1 and the future rows s+L..s+L+H-1 (x_mark and y_mark their time features)."""

    def __init__(self, split: Split, input_len: int, horizon: int) -> None:
        self.values, self.marks = torch.from_numpy(split.values), torch.from_numpy(split.marks)
        self.input_len, self.horizon = input_len, horizon
        self.count = split.windows(input_len, horizon)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, s: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        if not 0 <= s < self.count:
            raise IndexError(s)
        mid, end = s + self.input_len, s + self.input_len + self.horizon
        return self.values[s:mid], self.marks[s:mid], self.values[mid:end], self.marks[mid:end]

    def batch(self, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The windows starting at ``starts`` [B], stacked: x [B, L, C], x_mark [B, L, F], y [B, H, C], y_mark."""
        rows = starts[:, None] + torch.arange(self.input_len + self.horizon)  # [B, L + H]
        values, marks = self.values[rows], self.marks[rows]  # [B, L + H, C], [B, L + H, F]
        return (values[:, : self.input_len], marks[:, : self.input_len], values[:, self.input_len:],
                marks[:, self.input_len:])


# ---------------------------------------------------------------------------------------------------------------------
# Offline generators (the smoke and quick profiles): the same CSV layout, so generated data goes through read_series


REAL_DATA = "the datasets of Table 2"  # what the generated stand-ins stand in for, in titles and footers
SYNTHETIC_VERSION = 1  # of the generator's output: a change of it names new cache files and new data sources


@dataclass(frozen=True)
class Synthetic:
    """A generated multivariate series: ``kind`` "seasonal" (two known periods, a trend, a regime change and noise)
    or "random_walk" (no period: a walk whose volatility changes regime, as exchange rates)."""

    kind: str
    rows: int
    variables: int
    seed: int = 0
    periods: tuple[int, ...] = (24, 168)  # seasonal only: rows per cycle (a day and a week of hourly rows)

    def frame(self) -> pd.DataFrame:
        """The series as a DataFrame in the distributed layout (hourly dates from 2016-07-01)."""
        rng = np.random.default_rng(self.seed)
        t = np.arange(self.rows, dtype=np.float64)[:, None]  # [T, 1]
        if self.kind == "seasonal":
            amp = rng.uniform(0.5, 2.0, (len(self.periods), self.variables))  # [P, C]
            phase = rng.uniform(0, 2 * np.pi, (len(self.periods), self.variables))
            season = sum(amp[i] * np.sin(2 * np.pi * t / p + phase[i]) for i, p in enumerate(self.periods))
            trend = rng.uniform(-1, 1, self.variables) * t / self.rows  # [T, C]
            change = int(rng.integers(self.rows // 3, 2 * self.rows // 3))  # regime change: a level and scale shift
            regime = np.where(t >= change, rng.uniform(0.5, 1.5, self.variables), 0.0)
            values = (1 + 0.3 * (t >= change)) * season + trend + regime + 0.2 * rng.standard_normal(season.shape)
        elif self.kind == "random_walk":
            change = int(rng.integers(self.rows // 3, 2 * self.rows // 3))
            scale = np.where(t >= change, 0.02, 0.005)  # [T, 1]: a calm and a volatile regime
            values = 1 + np.cumsum(scale * rng.standard_normal((self.rows, self.variables)), axis=0)
        else:
            raise ValueError(f"unknown synthetic kind {self.kind!r} (seasonal or random_walk)")
        dates = pd.date_range("2016-07-01", periods=self.rows, freq="h")
        columns = {f"v{i}": values[:, i] for i in range(self.variables)}
        return pd.DataFrame({"date": dates.strftime("%Y-%m-%d %H:%M:%S"), **columns})

    def key(self) -> str:
        fields = {"kind": self.kind, "rows": self.rows, "variables": self.variables, "seed": self.seed,
                  "periods": list(self.periods), "version": SYNTHETIC_VERSION}
        return spec_key(fields)


def synthetic_csv(synthetic: Synthetic, cache_dir: str | Path) -> Path:
    """The generated series as a CSV file in ``cache_dir`` (written once; a file that does not match its checksum
    is written again)."""
    path = Path(cache_dir) / "forecast" / f"{synthetic.kind}-{synthetic.key()}.csv"
    if not checksum_matches(path):
        atomic_write(path, lambda tmp: synthetic.frame().to_csv(tmp, index=False, float_format="%.6f"))
        write_checksum(path)
    return path
