"""Figures drawn again only when what they show changed (harness.report.redraw): a report run again over the same
store draws nothing; other data, another --highlight, a deleted or edited file draw again."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.report.highlight import highlighting
from harness.report.redraw import MANIFEST, draw_if_changed


class Writer:
    """A figure writer that counts its calls and writes two files, as the writers write PNG and PDF."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, df: pd.DataFrame, out_dir: Path, *, stem: str) -> list[Path]:
        self.calls += 1
        paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"]
        for path in paths:
            path.write_text(f"{df.to_csv()}{self.calls}")
        return paths


def test_an_unchanged_figure_is_not_drawn_again(tmp_path: Path) -> None:
    draw, df = Writer(), pd.DataFrame({"attention": ["a", "b"], "time_ms_median": [1.0, 2.0]})
    first = draw_if_changed(tmp_path, draw, df, tmp_path, stem="time_g")
    again = draw_if_changed(tmp_path, draw, df.copy(), tmp_path, stem="time_g")
    assert draw.calls == 1 and again == first == [tmp_path / "time_g.png", tmp_path / "time_g.pdf"]
    assert (tmp_path / MANIFEST).is_file()

    draw_if_changed(tmp_path, draw, df.assign(time_ms_median=[1.0, 2.5]), tmp_path, stem="time_g")
    assert draw.calls == 2  # other data
    with highlighting(["a"]):
        draw_if_changed(tmp_path, draw, df.assign(time_ms_median=[1.0, 2.5]), tmp_path, stem="time_g")
    assert draw.calls == 3  # another --highlight colours other lines
    (tmp_path / "time_g.pdf").unlink()
    draw_if_changed(tmp_path, draw, df, tmp_path, stem="time_g")
    draw_if_changed(tmp_path, draw, df, tmp_path, stem="time_g")
    assert draw.calls == 4  # the figure of these data was overwritten since: drawn, then kept
    (tmp_path / "time_g.png").write_text("edited")
    draw_if_changed(tmp_path, draw, df, tmp_path, stem="time_g")
    assert draw.calls == 5 and (tmp_path / "time_g.png").read_text() != "edited"


def test_a_damaged_record_only_costs_a_redraw(tmp_path: Path) -> None:
    draw, df = Writer(), pd.DataFrame({"x": [[1, 2], [3]]})  # unhashable cells: keyed by their text
    draw_if_changed(tmp_path, draw, df, tmp_path, stem="f")
    (tmp_path / MANIFEST).write_text("{not json")
    draw_if_changed(tmp_path, draw, df, tmp_path, stem="f")
    draw_if_changed(tmp_path, draw, df, tmp_path, stem="f")
    assert draw.calls == 2
