"""Forecasting data (harness.kinds.forecasting.data): the distributed CSV layout, the released code's splits, train-only
scaling, windows, bad files, and the offline generators."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.core.errors import UserError
from harness.kinds.forecasting.data import (
    DATASETS,
    ETT_MONTH_ROWS,
    Synthetic,
    Windows,
    borders,
    load_dataset,
    read_series,
    synthetic_csv,
    time_features,
)


def _ili_like(rows: int = 700, seed: int = 0) -> pd.DataFrame:
    """A few hundred weekly rows in the layout national_illness.csv is distributed in (date, then the variables)."""
    rng = np.random.default_rng(seed)
    dates = pd.date_range("2002-01-01", periods=rows, freq="7D").strftime("%Y-%m-%d %H:%M:%S")
    names = ["% WEIGHTED ILI", "%UNWEIGHTED ILI", "AGE 0-4", "AGE 5-24", "ILITOTAL", "NUM. OF PROVIDERS", "OT"]
    return pd.DataFrame({"date": dates, **{n: rng.gamma(2.0, 100.0 * (i + 1), rows) for i, n in enumerate(names)}})


def test_a_real_format_sample_goes_through_the_loader(tmp_path: Path) -> None:
    raw = _ili_like()
    raw.to_csv(tmp_path / "national_illness.csv", index=False)
    spec = DATASETS["ILI"]
    splits = load_dataset(spec, tmp_path)
    # 70 / 10 / 20 of 700 rows as the released code rounds them (int(700 * 0.7) is 489 in floating point); the
    # validation and test windows start input_len (36) rows before their first target
    assert {k: len(s.values) for k, s in splits.items()} == {"train": 489, "val": 71 + 36, "test": 140 + 36}
    values = raw.drop(columns="date").to_numpy()
    mean, std = values[:489].mean(axis=0), values[:489].std(axis=0)  # the scaler sees the training rows only
    np.testing.assert_allclose(splits["train"].values.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(splits["train"].values.std(axis=0), 1, atol=1e-5)
    np.testing.assert_allclose(splits["test"].values, (values[524:] - mean) / std, rtol=1e-5, atol=1e-5)
    windows = Windows(splits["test"], spec.input_len, 60)
    assert len(windows) == 176 - 36 - 60 + 1
    x, x_mark, y, y_mark = windows[0]
    np.testing.assert_allclose(x.numpy(), (values[524:560] - mean) / std, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y.numpy(), (values[560:620] - mean) / std, rtol=1e-5, atol=1e-5)
    assert x_mark.shape == (36, 4) and y_mark.shape == (60, 4)  # the released runs' hourly features, for every file
    with pytest.raises(IndexError):
        windows[len(windows)]


def test_ett_files_are_split_by_months_as_the_released_code_does() -> None:
    spec, month = DATASETS["ETTm2"], ETT_MONTH_ROWS
    assert borders(spec, 69680) == {"train": (0, 12 * month), "val": (12 * month - 96, 16 * month),
                                    "test": (16 * month - 96, 20 * month)}
    with pytest.raises(UserError, match="12/4/4 months"):
        borders(spec, 20 * month - 1)


def _write(tmp_path: Path, frame: pd.DataFrame) -> Path:
    frame.to_csv(tmp_path / "national_illness.csv", index=False)
    return tmp_path


def _break(column: str, row: int, value: object) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def broken(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.astype({column: object}) if isinstance(value, str) else frame.copy()
        frame.loc[row, column] = value
        return frame

    return broken


def _tiny_scale(frame: pd.DataFrame) -> pd.DataFrame:
    """'AGE 5-24' at 1e-42 of its size, one test row at 1.0: scaled by the training rows' std, beyond float32."""
    frame = frame.copy()
    frame["AGE 5-24"] *= 1e-42
    frame.loc[650, "AGE 5-24"] = 1.0
    return frame


def _duplicate_column(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame.columns = [*frame.columns[:-1], "ILITOTAL"]  # OT renamed to an earlier column's name
    return frame


def _offsets(frame: pd.DataFrame) -> pd.DataFrame:
    """The dates with a UTC offset, +01:00 for the first 350 rows and +02:00 after (a clock change)."""
    frame = frame.copy()
    frame["date"] = [f"{d}+0{1 + (i >= 350)}:00" for i, d in enumerate(frame["date"])]
    return frame


@pytest.mark.parametrize(("damage", "message"), [
    (lambda f: f.drop(columns="date"), "no 'date' column"),
    (lambda f: f[["date"]], "only a 'date' column"),
    (_break("OT", 5, "n/a?"), "column 'OT' is not numeric"),
    (_break("OT", 5, np.nan), "missing value in data row 6"),
    (_break("date", 3, "yesterday"), "'yesterday' in data row 4 is not a date"),
    (lambda f: f.iloc[::-1], "not strictly increasing"),
    (lambda f: f.iloc[:300], "too few for one window"),
    (lambda f: f.iloc[:0], "no data rows"),
    # non-finite values: an ok cell with MSE inf (test row), a nan cell after the store exists (training row), a
    # column zeroed by a scale of inf (1e308), a scaled value beyond float32
    (_break("OT", 650, np.inf), "value inf in data row 651, column 'OT' is not finite"),
    (_break("ILITOTAL", 5, -np.inf), "value -inf in data row 6, column 'ILITOTAL' is not finite"),
    (_break("AGE 0-4", 7, 1e308), "column 'AGE 0-4': the mean or standard deviation of its training rows overflows "
                                  "float64 .its largest value: 1e.308 in data row 8."),
    (_tiny_scale, "value 1.0 in data row 651, column 'AGE 5-24' lies beyond float32 once scaled"),
    # values pandas reads as something else without a word
    (lambda f: f.assign(OT=[i % 2 == 0 for i in range(len(f))]), "column 'OT' holds True/False, not numbers"),
    (_duplicate_column, "column 'ILITOTAL' appears twice in the header .pandas would read the second as "
                        "'ILITOTAL.1'."),
    (_offsets, "the dates mix time zones or UTC offsets .data row 351: '2008-09-16 00:00:00\\+02:00', data row 1"),
], ids=["no-date", "no-variables", "text", "missing", "bad-date", "reversed", "short", "header-only", "inf-test-row",
        "inf-train-row", "1e308", "beyond-float32", "bool-column", "duplicate-column", "mixed-utc-offsets"])
def test_a_bad_file_is_a_user_error_naming_the_problem(tmp_path: Path, damage: Callable[[pd.DataFrame], pd.DataFrame],
                                                       message: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would be a second line under the error
        with pytest.raises(UserError, match=message) as err:
            load_dataset(DATASETS["ILI"], _write(tmp_path, damage(_ili_like())))
    assert err.value.exit_code == 2 and "national_illness.csv" in str(err.value) and "\n" not in str(err.value)


def test_a_csv_linked_from_outside_the_data_folder_is_refused(tmp_path: Path) -> None:
    """Nothing outside --data-dir is read: a link to a file elsewhere is refused by name, not read."""
    elsewhere = tmp_path / "elsewhere"
    _write(elsewhere.mkdir() or elsewhere, _ili_like())
    data = tmp_path / "data"
    data.mkdir()
    (data / "national_illness.csv").symlink_to(elsewhere / "national_illness.csv")
    with pytest.raises(UserError, match="outside the data folder"):
        load_dataset(DATASETS["ILI"], data)


def test_a_missing_file_names_the_file_the_directory_must_hold(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file; the data directory must hold exchange_rate.csv"):
        load_dataset(DATASETS["Exchange"], tmp_path)


@pytest.mark.parametrize(("freq", "fields"), [("t", 5), ("h", 4), ("d", 3), ("w", 3)])
def test_time_features_lie_in_the_released_codes_range(freq: str, fields: int) -> None:
    marks = time_features(pd.date_range("2016-01-01", periods=2000, freq="253min"), freq)  # 351 days
    assert marks.shape == (2000, fields) and marks.min() >= -0.5 and marks.max() <= 0.5
    assert (marks.max(axis=0) - marks.min(axis=0) > 0.5).all()  # every field moves over most of a year


def test_generated_series_are_deterministic_cached_and_read_like_real_files(tmp_path: Path) -> None:
    spec = Synthetic("seasonal", 1500, 3, seed=1)
    path = synthetic_csv(spec, tmp_path)
    first, stamp = path.read_bytes(), path.stat().st_mtime_ns
    assert synthetic_csv(spec, tmp_path) == path and path.stat().st_mtime_ns == stamp  # cached: not rewritten
    path.write_text("corrupted")
    assert synthetic_csv(spec, tmp_path).read_bytes() == first  # a file off its checksum is written again
    other = synthetic_csv(Synthetic("seasonal", 1500, 3, seed=2), tmp_path)
    assert other != path and other.read_bytes() != first
    series = read_series(path, "h")
    assert series.values.shape == (1500, 3) and series.columns == ("v0", "v1", "v2")


def _spectrum(x: np.ndarray) -> np.ndarray:
    return np.abs(np.fft.rfft(x - x.mean())) ** 2


def test_the_seasonal_kind_has_its_periods_and_the_random_walk_has_none(tmp_path: Path) -> None:
    """Periodograms of the first differences: the seasonal series' two strongest bins are its daily and weekly
    cycles; the walk's steps pass Fisher's g test for no period (largest bin's share of the total below the 0.1%
    critical value ln(m / 0.001) / m), which the seasonal series fails by far."""
    rows = 24 * 7 * 20  # a whole number of both cycles
    seasonal = read_series(synthetic_csv(Synthetic("seasonal", rows, 4), tmp_path), "h").values
    walk = read_series(synthetic_csv(Synthetic("random_walk", rows, 4), tmp_path), "h").values

    def fisher_g(column: np.ndarray) -> float:
        power = _spectrum(np.diff(column))[1:]
        return float(power.max() / power.sum())

    m = len(_spectrum(np.diff(walk[:, 0]))) - 1
    critical = np.log(m / 0.001) / m
    for column in seasonal.T:
        assert set(np.argsort(_spectrum(np.diff(column)))[-2:]) == {rows // 24, rows // 168}
        assert fisher_g(column) > 10 * critical
    for column in walk.T:
        assert fisher_g(column) < critical
    with pytest.raises(ValueError, match="unknown synthetic kind"):
        Synthetic("chaotic", 100, 1).frame()
