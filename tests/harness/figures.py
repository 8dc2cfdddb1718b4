"""Helpers of the figure tests (not a test module): the files a figure writes, and the axes of every figure saved."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import matplotlib.pyplot as plt
import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def check_files(paths: list[Path], names: list[str]) -> None:
    """``paths`` are ``names``, each a PNG or PDF by its first bytes, and no figure is left open."""
    assert [p.name for p in paths] == names
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC if path.suffix == ".png" else b"%PDF")
    assert plt.get_fignums() == []


def spy_axes(monkeypatch: pytest.MonkeyPatch, module: ModuleType, write: bool = False) -> list[list[plt.Axes]]:
    """The axes of every figure ``module`` saves (looked at before the figure is closed); the files are written
    only with ``write`` (rendering a whole-zoo figure twice costs seconds a test)."""
    seen: list[list[plt.Axes]] = []
    real_save = module.save_figure

    def spy(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
        fig.draw_without_rendering()  # the layout and tick labels, set at draw time, without rasterising
        seen.append(list(fig.axes))
        return real_save(fig, out_dir, stem) if write else []

    monkeypatch.setattr(module, "save_figure", spy)
    return seen
