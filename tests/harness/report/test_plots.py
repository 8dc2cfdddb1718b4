"""The figures' shared primitives (harness.report.plots): panels by group, line styles and a palette that reads on
paper, --highlight in every panel, point labels that overlap nothing, log ticks, the paper style's PDF fonts and
width."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import matplotlib.colors
import matplotlib.text
import numpy as np
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
    PALETTE,
    PANEL_MAX,
    SINGLE_PANEL_MAX,
    LogTicks,
    declutter,
    highlighting,
    is_highlighted,
    label_point,
    line_styles,
    panel_layout,
    panels,
    paper_style,
    plt,
    short_length,
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
        # under the variants: a variant equal to a baseline (SDPA's state is the math kernel's) shows on top of it
        assert all(styles[b]["zorder"] < s["zorder"] for b in BASELINES for s in others)


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


def _linear_rgb(colour: str) -> np.ndarray:
    c = np.array(matplotlib.colors.to_rgb(colour))
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _lab(rgb: np.ndarray) -> np.ndarray:
    """CIE L*a*b* (D65) of a linear sRGB colour."""
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
    f = np.cbrt(np.maximum(xyz / np.array([0.9505, 1.0, 1.089]), 0.008856))
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


#: Machado, Oliveira and Fernandes (2009), severity 1: protanopia, deuteranopia, tritanopia.
_CVD = (np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]),
        np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]),
        np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]]))


def test_every_colour_of_the_palette_reads_on_white_paper() -> None:
    """Tol's sand and cyan reach under 1.8:1 against white, too faint for a thin line: each colour reaches 3:1 (WCAG's
    minimum for graphics), and under each simulated colour-vision deficiency no two colours come closer than in Tol's
    own scheme (ΔE 15.6) by more than a little."""
    for colour in PALETTE:
        luminance = float(np.array([0.2126, 0.7152, 0.0722]) @ _linear_rgb(colour))
        assert 1.05 / (luminance + 0.05) >= 3.0, colour
    for matrix in (np.eye(3), *_CVD):
        labs = [_lab(np.clip(matrix @ _linear_rgb(c), 0, 1)) for c in PALETTE]
        closest = min(np.linalg.norm(a - b) for i, a in enumerate(labs) for b in labs[i + 1:])
        assert closest >= 13.0


def test_a_highlighted_variant_is_in_every_panel_of_small_multiples() -> None:
    names = attentions.list_attentions()
    with highlighting(["s3attention", "fsat"]):
        every, layout = panel_layout(names, BASELINES)
        single = panel_layout(["vanilla", "s3attention", "linformer"], ["vanilla"])
    assert every == [*BASELINES, "s3attention", "fsat"]
    drawn = [n for _title, members in layout for n in members]
    assert "s3attention" not in drawn and "fsat" not in drawn and all(members for _t, members in layout)
    assert sorted(drawn) == sorted(set(names) - {*BASELINES, "s3attention", "fsat"})
    assert single == (["vanilla"], [("", ["s3attention", "linformer"])])  # one panel: drawn once, in it
    assert panel_layout(names, BASELINES) == (BASELINES, panels(names, BASELINES))
    with highlighting(["s3attention"]):
        styles = line_styles(["vanilla", "s3attention", *names[:12]], ["vanilla"], mute=False)
    others = [styles[n] for n in names[:12] if n not in ("vanilla", "s3attention")]
    assert all(s["color"] != styles["s3attention"]["color"] for s in others)  # its colour is its alone
    assert all(s["color"] != MUTED["color"] and s["lw"] < styles["s3attention"]["lw"] for s in others)


def test_point_labels_overlap_no_label_and_no_marker() -> None:
    """Budgets and lengths labelled at points close together: each label is placed where it covers no other label
    and no marker, inside its panel, or hidden."""
    with paper_style():
        fig, ax = plt.subplots(figsize=(COLUMN_IN, 2.5))
        try:
            xs = np.array([1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 2.0, 2.05, 2.1])
            ys = np.array([1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 3.0, 3.1, 2.9])
            ax.plot(xs, ys, ls="", marker="o")
            ax.set_xscale("log")
            ax.set_yscale("log")
            for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
                label_point(ax, x, y, f"budget={1000 + i}", "black", below=i % 2 == 1)
            declutter(fig)
            renderer = fig.canvas.get_renderer()
            shown = [_text_box(t, renderer) for t in ax.texts if t.get_visible() and t.get_gid() == "point label"]
            assert len(shown) >= 4
            assert not any(a.overlaps(b) for i, a in enumerate(shown) for b in shown[i + 1:])
            points = ax.transData.transform(np.column_stack([xs, ys]))
            assert not any(box.contains(px, py) for box in shown for px, py in points)
            assert all(ax.bbox.x0 <= b.x0 and b.x1 <= ax.bbox.x1 and ax.bbox.y0 <= b.y0 for b in shown)
        finally:
            plt.close(fig)


def _text_box(label: object, renderer: object) -> object:
    """A label's own box (an annotation's extent would include its leader line)."""
    return matplotlib.text.Text.get_window_extent(label, renderer)


def test_point_labels_keep_off_the_lines_and_lead_to_their_point() -> None:
    """A budget labelled at the end of one line, where other variants' lines and the reference line pass beside it:
    the label goes where it hides neither (its white ground hid them), with a leader line when it sits away from its
    point."""
    with paper_style():
        fig, ax = plt.subplots(figsize=(COLUMN_IN, 2.5))
        try:
            ax.plot([1.0, 2.0], [1.0, 1.0], marker="o")  # the labelled point is its right end
            ax.plot([1.0, 3.0], [1.06, 1.06])  # other variants' lines just above and below it
            ax.plot([1.0, 3.0], [0.94, 0.94])
            ax.axvline(2.12, color="0.45", ls="--")  # the reference line just right of it
            ax.set_xlim(0.5, 3.5)
            ax.set_ylim(0.5, 1.5)
            label_point(ax, 2.0, 1.0, "budget=64", "black")
            declutter(fig)
            renderer = fig.canvas.get_renderer()
            (label,) = [t for t in ax.texts if t.get_gid() == "point label"]
            box = _text_box(label, renderer)
            assert label.get_visible()
            for line in ax.get_lines():
                path = line.get_transform().transform_path(line.get_path())
                assert not path.intersects_bbox(box, filled=False), line
            leaders = [t for t in ax.texts if t.get_gid() == "point label leader"]
            assert max(abs(v) for v in label.xyann) > 4 and len(leaders) == 1
            assert leaders[0].xy == label.xy
        finally:
            plt.close(fig)


def test_short_lengths_read_as_the_tables_lengths() -> None:
    assert [short_length(n) for n in (700, 1000, 1024, 1843, 4096)] == ["700", "1000", "1K", "1.8K", "4K"]


def test_building_the_font_cache_says_nothing_on_stderr(tmp_path: Path) -> None:
    """A run keeps matplotlib's font cache under its --out, so every new --out builds it again, and matplotlib warns
    on stderr when that takes over 5 s (a loaded machine): one line too many for a command whose stderr is its
    messages. Here the 5 s are 0 s, as on a very loaded machine."""
    code = ("import threading, time\n"
            "timer = threading.Timer\n"
            "threading.Timer = lambda delay, call: timer(0, call)\n"
            "from harness.cli import _caches_under_out\n"
            f"_caches_under_out({str(tmp_path / 'out')!r})\n"
            "import harness.report.plots\n"
            "time.sleep(0.5)\n")
    env = {k: v for k, v in os.environ.items() if k != "MPLCONFIGDIR"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          cwd=Path(__file__).parents[3])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
