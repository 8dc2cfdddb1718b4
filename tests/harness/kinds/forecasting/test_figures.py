"""The forecasting figure (harness.kinds.forecasting.figures): a panel per model over one truth, the history cut to
the horizon's scale."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import harness.kinds.forecasting.figures
from harness.kinds.forecasting.table2 import EXAMPLE_DIR, PAPER_ORDER, forecast_figure
from tests.harness.figures import check_files, spy_axes


def test_each_model_forecasts_in_its_own_panel_over_the_truth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seven forecasts over one truth in one panel crossed past telling apart and hid the truth, and a horizon of 24
    after 96 steps of history took a fifth of the width: a panel per model in Table 2's order, each with the truth
    (dashed, over the forecast) and the history's last 24 steps."""
    rows, horizon = [], 24
    (tmp_path / EXAMPLE_DIR).mkdir()
    for i, attention in enumerate(PAPER_ORDER):
        key = f"k{i}"
        rows.append({"attention": attention, "key": key, "status": "ok", "dataset": "ILI", "horizon": horizon,
                     "seed": 0})
        example = {"history": [0.0] * 96, "truth": [1.0] * horizon, "forecast": [1.0 + i / 10] * horizon}
        (tmp_path / EXAMPLE_DIR / f"{key}.json").write_text(json.dumps(example))
    seen = spy_axes(monkeypatch, harness.kinds.forecasting.figures, write=True)
    paths = forecast_figure(pd.DataFrame(rows), tmp_path, "ILI", None, "ILI")
    check_files(paths, ["forecast_ILI.png", "forecast_ILI.pdf"])
    (axes,) = seen
    assert len(axes) == len(PAPER_ORDER) and axes[0].get_title(loc="left") == "S3Attention"
    for ax in axes:
        history, truth, forecast = [line for line in ax.get_lines() if len(line.get_xdata()) > 2]
        assert list(history.get_xdata()) == list(range(-horizon, 0))
        assert truth.get_linestyle() == "--" and truth.get_zorder() > forecast.get_zorder()
        assert forecast.get_gid() == ax.get_title(loc="left")
    legend = axes[0].get_figure().legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["history (last 24 steps)", "truth",
                                                          "forecast (the panel's model)"]
    # the x label under the lowest panel of each column: a figure-wide one sat on the legend
    assert [bool(ax.get_xlabel()) for ax in axes] == [False] * 3 + [True] * 4
    box = legend.get_window_extent()
    texts = [t.get_window_extent() for t in axes[0].get_figure().texts if t.get_text()]
    assert not any(box.overlaps(other) for other in [*texts, *(ax.get_tightbbox() for ax in axes)])
