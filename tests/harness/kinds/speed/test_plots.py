"""The speed suite's scaling figures: files written, formats, skipped figures, readable axes."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

import harness.kinds.speed.plots
from harness.kinds.speed.plots import plot_scaling
from harness.kinds.speed.report import write_speed_reports
from tests.harness.figures import check_files, spy_axes
from tests.harness.kinds.speed.test_speed import ENV, make_results


def test_plot_scaling_writes_time_and_memory(tmp_path: Path) -> None:
    paths = plot_scaling(make_results(), tmp_path / "figs", slug="s", title="synthetic")
    check_files(paths, ["time_s.png", "time_s.pdf", "memory_s.png", "memory_s.pdf"])


def test_plot_scaling_train_step(tmp_path: Path) -> None:
    paths = plot_scaling(make_results(mode="train_step"), tmp_path, slug="t", title="train")
    check_files(paths, ["time_t.png", "time_t.pdf", "memory_t.png", "memory_t.pdf"])


def test_plot_scaling_skips_unmeasured_metric(tmp_path: Path) -> None:
    df = make_results().assign(peak_mem_bytes=math.nan)
    paths = plot_scaling(df, tmp_path, slug="s", title="time only")
    check_files(paths, ["time_s.png", "time_s.pdf"])
    assert plot_scaling(df.assign(status="oom"), tmp_path / "none", slug="s", title="all OOM") == []


def test_write_reports_draws_each_group(tmp_path: Path) -> None:
    df = pd.concat([make_results(), make_results().assign(device="cuda")])
    written = write_speed_reports(df, tmp_path, env=ENV, suite="synthetic")
    figures = sorted(p.name for p in written if p.suffix in (".png", ".pdf"))
    assert figures == sorted(f"{kind}_{device}_float32_fwdpbwd_b4_h2_d64.{ext}" for kind in ("time", "memory")
                             for device in ("cpu", "cuda") for ext in ("png", "pdf"))
    check_files([tmp_path / name for name in figures], figures)


def test_a_narrow_log_axis_still_has_two_labelled_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    df = make_results()
    df["time_ms_median"] = 30.0 + df["seq_len"] / 1000.0  # 30.5 .. 34: far less than a decade
    df["peak_mem_bytes"] = 2**20 * (50.0 + df["seq_len"] / 4096.0)
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots)
    plot_scaling(df, tmp_path, slug="s", title="narrow")
    for (ax,) in seen:
        lo, hi = ax.get_ylim()
        labelled = [t for t in ax.yaxis.get_major_ticks() if t.label1.get_text() and lo <= t.get_loc() <= hi]
        assert len(labelled) >= 2, [t.label1.get_text() for t in labelled]
