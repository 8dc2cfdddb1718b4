"""The forecasting suite kind: its keys checked with one-line errors, cells per dataset's own horizons, real CSV
files in the distributed layout end to end through `attnbench run --data-dir`, and bad files refused (exit 2)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from harness.core.errors import SuiteError
from harness.core.files import sha256_file
from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT, CliResult

SUITE = REPO_ROOT / "suites" / "forecasting.yaml"


def _write_suite(tmp_path: Path, **changes: object) -> Path:
    doc = yaml.safe_load(SUITE.read_text())
    doc.update(changes)
    path = tmp_path / "forecasting.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_dataset_is_trained_at_its_own_horizons_only() -> None:
    suite = load_suite(SUITE, "paper", data_dir=REPO_ROOT)  # any directory: nothing is read to expand
    cells = suite.expand("cpu")
    pairs = {(c.params["dataset"], c.params["horizon"]) for c in cells}
    assert {h for d, h in pairs if d == "ILI"} == {24, 36, 48, 60}
    assert {h for d, h in pairs if d == "Exchange"} == {96, 192, 336, 720}
    assert len(cells) == 7 * 6 * 4 * 5  # attentions (FEDformer-f and -w) x datasets x horizons x seeds
    s3 = next(c for c in cells if c.params["attention"] == "s3attention")
    fed = next(c for c in cells if c.params["attention"] == "fedformer_fourier")
    assert (s3.fixed["model"]["d_model"], fed.fixed["model"]["d_model"]) == (32, 512)  # the released scripts'


@pytest.mark.parametrize(("changes", "where"), [
    ({"train": {"epochs": 10, "warmup": 3}}, "train.warmup"),
    ({"train": {"lr": "1e-4"}}, "train"),
    ({"model": {"layers": 2}}, "model.layers"),
    ({"datasets": {"M4": {}}}, "datasets.M4"),
    ({"datasets": {"ILI": {"generate": {"kind": "chaos", "rows": 100, "variables": 2}}}}, "datasets.ILI.generate"),
    ({"datasets": {"ILI": {"horizons": [24, "long"]}}}, "datasets.ILI.horizons"),
    # beyond the machine's memory: refused at once, not generated for minutes first
    ({"datasets": {"ILI": {"generate": {"kind": "seasonal", "rows": 2147483647, "variables": 7}}}},
     "datasets.ILI.generate.rows: 2,147,483,647 rows of 7 variables would need about"),
    ({"datasets": {"ILI": {"generate": {"kind": "seasonal", "rows": -5, "variables": 7}}}},
     "rows and variables must be positive integers"),
    ({"datasets": {}, "profiles": {"smoke": {}, "quick": {}, "paper": {}}}, "datasets.ETTm2.generate"),
    ({"axes": {"attention": ["vanilla"], "dataset": ["ILI"], "horizon": [96], "seed": [0]}}, "axes.horizon"),
])
def test_bad_keys_name_their_place(tmp_path: Path, changes: dict, where: str) -> None:
    with pytest.raises(SuiteError) as exc:
        load_suite(_write_suite(tmp_path, **changes), "paper")
    assert where in str(exc.value)


def _exchange_like(rows: int) -> pd.DataFrame:
    """Daily rows in the layout exchange_rate.csv is distributed in: date, then one column per currency."""
    rng = np.random.default_rng(0)
    dates = pd.date_range("1990-01-01", periods=rows, freq="D").strftime("%Y/%m/%d %H:%M")
    walk = 1 + np.cumsum(0.01 * rng.standard_normal((rows, 8)), axis=0)
    return pd.DataFrame({"date": dates, **{str(i): walk[:, i] for i in range(7)}, "OT": walk[:, 7]})


def _ili_like(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    dates = pd.date_range("2002-01-01", periods=rows, freq="7D").strftime("%Y-%m-%d %H:%M:%S")
    return pd.DataFrame({"date": dates, **{f"v{i}": rng.gamma(2.0, 10.0 * (i + 1), rows) for i in range(6)},
                         "OT": rng.gamma(2.0, 5.0, rows)})


@pytest.mark.usefixtures("fast_runner", "one_thread")
def test_real_format_files_go_end_to_end(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _exchange_like(1000).to_csv(data / "exchange_rate.csv", index=False)
    _ili_like(300).to_csv(data / "national_illness.csv", index=False)
    out = tmp_path / "out"
    result = cli("run", SUITE, "--profile", "smoke", "--data-dir", data, "--out", out, "--device", "cpu",
                 "--set", "attention=s3attention,fedformer_fourier", "--set", "seed=0")
    assert result.code == 0, result.err
    csv = pd.read_csv(out / "forecasting" / "smoke" / "results.csv")
    assert set(csv["status"]) == {"ok"} and len(csv) == 4
    assert set(csv["dataset"]) == {"Exchange", "ILI"} and csv["test_mse"].notna().all()
    # the cells read the real files (8 variables and 7, standardised on their training rows), not the generators
    table = (out / "forecasting" / "smoke" / "table2.md").read_text()
    assert "Exchange" in table and "ILI" in table
    # every output names the file each number came from and its checksum; nothing says generated
    for name in ("exchange_rate.csv", "national_illness.csv"):
        digest = sha256_file(data / name)
        source = f"files in {data}: {name} sha256:{digest}"  # in full in every CSV; a footer shows 16 hex digits
        assert source in set(csv["data_source"]) and f"{name} sha256:{digest[:16]}…" in table
        assert source in set(pd.read_csv(out / "forecasting" / "smoke" / "table2.csv")["data_source"])
        assert source in set(pd.read_csv(out / "forecasting" / "smoke" / "curves.csv")["data_source"])
    assert "generated" not in table and table.startswith("### Table 2 — multivariate long-term forecasting "
                                                         "(forecasting)\n")


@pytest.mark.usefixtures("fast_runner", "one_thread")
def test_generated_stand_ins_are_titled_as_such(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    result = cli("run", SUITE, "--profile", "smoke", "--out", tmp_path, "--device", "cpu",
                 "--set", "attention=s3attention", "--set", "seed=0", "--set", "dataset=ILI")
    assert result.code == 0, result.err
    out = tmp_path / "forecasting" / "smoke"
    source = pd.read_csv(out / "results.csv")["data_source"].iloc[0]
    assert source.startswith("generated stand-in (attnbench ILI stand-in v1: ") and '"split": "70/10/20"' in source
    table = (out / "table2.md").read_text()
    assert table.startswith("### Table 2 — multivariate long-term forecasting (forecasting) (generated stand-ins, "
                            "not the datasets of Table 2)\n")
    assert f"Data: generated stand-ins, not the datasets of Table 2 — {source}" in table
    assert pd.read_csv(out / "curves.csv")["data_source"].eq(source).all()  # pasted alone, it says stand-in


@pytest.mark.usefixtures("fast_runner")
def test_a_malformed_file_is_refused_before_anything_is_written(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    frame = _exchange_like(1000)
    frame.loc[10, "OT"] = np.nan
    frame.to_csv(data / "exchange_rate.csv", index=False)
    _ili_like(300).to_csv(data / "national_illness.csv", index=False)
    out = tmp_path / "out"
    result = cli("run", SUITE, "--profile", "smoke", "--data-dir", data, "--out", out, "--device", "cpu")
    assert result.code == 2
    assert len(result.err_lines) == 1 and "exchange_rate.csv" in result.err_lines[0], result.err
    assert not (out / "forecasting").exists()


def test_a_cells_key_does_not_depend_on_the_other_horizons_of_the_axis() -> None:
    """Running one horizon first and the rest later reuses the first run's cells."""
    one = load_suite(SUITE, "quick", {"horizon": [96, 24]}).expand("cpu")
    every = {c.key for c in load_suite(SUITE, "quick").expand("cpu")}
    assert one and {c.key for c in one} <= every


@pytest.mark.usefixtures("fast_runner")
def test_a_series_too_short_for_a_horizon_stops_the_run(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    """Smoke's 1,200-row Exchange stand-in holds no validation window of 96 + 720 rows: exit 2 before training,
    one line naming the generator and the split."""
    out = tmp_path / "out"
    result = cli("run", SUITE, "--profile", "smoke", "--out", out, "--device", "cpu", "--set", "dataset=Exchange",
                 "--set", "horizon=720")
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    assert "generated Exchange stand-in" in result.err and "too few for one window of 96 history + 720" in result.err
    assert not list(out.glob("forecasting/smoke/checkpoints/*.pt"))
