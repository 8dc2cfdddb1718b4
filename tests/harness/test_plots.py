"""Tests of harness.plots: files written, formats, skipped figures and no leaked figures."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from harness.plots import plot_scaling
from harness.report import write_reports
from tests.harness.test_report import ENV, make_results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _check_files(paths: list[Path], names: list[str]) -> None:
    assert [p.name for p in paths] == names
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC if path.suffix == ".png" else b"%PDF")
    assert plt.get_fignums() == []


def test_plot_scaling_writes_time_and_memory(tmp_path: Path) -> None:
    paths = plot_scaling(make_results(), tmp_path / "figs", slug="s", title="synthetic")
    _check_files(paths, ["time_s.png", "time_s.pdf", "memory_s.png", "memory_s.pdf"])


def test_plot_scaling_train_step(tmp_path: Path) -> None:
    paths = plot_scaling(make_results(mode="train_step"), tmp_path, slug="t", title="train")
    _check_files(paths, ["time_t.png", "time_t.pdf", "memory_t.png", "memory_t.pdf"])


def test_plot_scaling_skips_unmeasured_metric(tmp_path: Path) -> None:
    df = make_results().assign(peak_mem_bytes=math.nan)
    paths = plot_scaling(df, tmp_path, slug="s", title="time only")
    _check_files(paths, ["time_s.png", "time_s.pdf"])
    assert plot_scaling(df.assign(status="oom"), tmp_path / "none", slug="s", title="all OOM") == []


def test_write_reports_draws_each_group(tmp_path: Path) -> None:
    df = pd.concat([make_results(), make_results().assign(device="cuda")])
    written = write_reports(df, tmp_path, env=ENV, suite="synthetic")
    figures = sorted(p.name for p in written if p.suffix in (".png", ".pdf"))
    assert figures == sorted(f"{kind}_{device}_float32_fwdpbwd_b4_h2_d64.{ext}" for kind in ("time", "memory")
                             for device in ("cpu", "cuda") for ext in ("png", "pdf"))
    _check_files([tmp_path / name for name in figures], figures)
