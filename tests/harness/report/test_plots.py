"""The figures' shared primitives (harness.report.plots): panels by group, line styles, --highlight, log ticks, the
paper style's PDF fonts and width."""

from __future__ import annotations

from pathlib import Path

import matplotlib.colors
import pytest

import attentions
from harness.cli import build_parser
from harness.commands import highlight_patterns
from harness.core.errors import UserError
from harness.report.groups import group_of
from harness.report.plots import (
    COLUMN_IN,
    MAX_TICKS,
    MUTED,
    PANEL_MAX,
    SINGLE_PANEL_MAX,
    LogTicks,
    highlighting,
    is_highlighted,
    line_styles,
    panels,
    single_axes,
    split_patterns,
)

BASELINES = ["vanilla", "vanilla_sdpa"]


def test_the_zoo_is_one_panel_per_group_each_variant_once() -> None:
    names = attentions.list_attentions()
    layout = panels(names, BASELINES)
    drawn = [n for _title, members in layout for n in members]
    assert sorted(drawn) == sorted(set(names) - set(BASELINES))  # every variant once, the baselines in none
    assert all(0 < len(members) <= PANEL_MAX for _title, members in layout)
    for title, members in layout:
        assert {group_of(n) for n in members} == {title.split(" (")[0]}


def test_few_variants_are_one_panel() -> None:
    few = ["vanilla", "s3attention", "linformer", "performer", "reformer"]
    assert panels(few, ["vanilla"]) == [("", ["s3attention", "linformer", "performer", "reformer"])]
    assert len(panels(attentions.list_attentions()[:SINGLE_PANEL_MAX + 2], [])) > 1


def test_a_panel_has_a_distinct_colour_and_marker_per_line_and_emphasised_baselines() -> None:
    for _title, members in panels(attentions.list_attentions(), BASELINES):
        styles = line_styles([*BASELINES, *members], BASELINES)
        others = [styles[m] for m in members]
        assert len({s["color"] for s in others}) == len(others) and len({s["marker"] for s in others}) == len(others)
        assert [styles[b]["color"] for b in BASELINES] == ["black", "0.45"]
        assert all(styles[b]["lw"] > s["lw"] for b in BASELINES for s in others)


def test_highlight_greys_every_other_variant() -> None:
    names = ["vanilla", "s3attention", "s3attention_released", "linformer", "performer"]
    assert is_highlighted("linformer") is None
    with highlighting(split_patterns(["s3*", "perf*, x"])):
        styles = line_styles(names, ["vanilla"])
        assert is_highlighted("performer") and not is_highlighted("linformer")
    assert styles["linformer"] == MUTED
    coloured = [styles[n] for n in ("s3attention", "s3attention_released", "performer")]
    assert all(s["color"] != MUTED["color"] and s["zorder"] > MUTED["zorder"] for s in coloured)
    assert styles["vanilla"]["color"] == "black"  # a baseline keeps its style
    assert line_styles(names, ["vanilla"])["linformer"] != MUTED  # only inside the context


@pytest.mark.parametrize(("lo", "hi"), [(1e-7, 2.0), (0.05, 3000.0), (1.0, 1e12), (30.5, 34.0), (0.3, 1.1)])
def test_log_ticks_are_few_but_at_least_two(lo: float, hi: float) -> None:
    ticks = LogTicks().tick_values(lo, hi)
    inside = [t for t in ticks if lo * 0.999 <= t <= hi * 1.001]
    assert 2 <= len(inside) <= MAX_TICKS, inside


def test_the_pdf_embeds_truetype_fonts_at_a_column_width(tmp_path: Path) -> None:
    def draw(ax: object) -> None:
        ax.plot([1, 2, 3], [1, 4, 9], label="line")  # type: ignore[attr-defined]

    paths = single_axes(tmp_path, "f", "a title long enough to need wrapping in one column of a paper", draw,
                        xlabel="x", ylabel="y")
    pdf = paths[1].read_bytes()
    # Type 42: the TrueType font program embedded (FontFile2; matplotlib wraps it as a CIDFontType2 or TrueType font)
    assert b"/FontFile2" in pdf and (b"/Subtype /CIDFontType2" in pdf or b"/Subtype /TrueType" in pdf)
    assert b"/Subtype /Type3" not in pdf
    assert f"/MediaBox [ 0 0 {COLUMN_IN * 72:g} ".encode() in pdf


def test_highlight_option_of_run_and_report() -> None:
    args = build_parser().parse_args(["report", "results", "--highlight", "s3*,fsat", "--highlight", "luna"])
    assert highlight_patterns(args) == ["s3*", "fsat", "luna"]
    run = build_parser().parse_args(["run", "suites/speed.yaml", "--highlight", "vanilla"])
    assert highlight_patterns(run) == ["vanilla"]
    with pytest.raises(UserError, match="matches no registered attention"):
        highlight_patterns(build_parser().parse_args(["report", "results", "--highlight", "s4*"]))
    with pytest.raises(UserError, match="names no attention"):
        highlight_patterns(build_parser().parse_args(["report", "results", "--highlight", ","]))
    assert matplotlib.colors.to_hex(str(MUTED["color"])) != "#000000"


def test_a_title_of_items_breaks_between_items_only() -> None:
    from harness.report.plots import wrap_title

    title = "Memory: CPU · float32 · forward + backward · torch.compile (Inductor) · batch 4 · 2 heads · dim 64"
    lines = wrap_title(title, 3.3).splitlines()
    assert len(lines) > 1 and all(line.endswith("·") for line in lines[:-1])  # each break follows a separator
    assert " ".join(lines) == title and "\u00a0" not in title
