"""The speed suite's scaling figures: files written, formats, skipped figures, readable axes, small multiples of the
whole zoo with the baselines in every panel and one shared legend, titles naming the metric, the tables' multipliers
in the ratio figures, crossover lengths in the legend, --highlight in every panel, and a dot chart where a group has
one length."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib.colors
import pandas as pd
import pytest

import attentions
import harness.kinds.speed.plots
from harness.kinds.speed.plots import plot_scaling
from harness.kinds.speed.report import write_speed_reports
from harness.report.format import display_name
from harness.report.plots import COLUMN_IN, DOUBLE_IN, MAX_TICKS, MUTED, highlighting, panels
from tests.harness.figures import check_files, spy_axes
from tests.harness.kinds.speed.test_speed import ENV, _row, make_results

BASELINES = ["vanilla", "vanilla_sdpa"]  # the suite's baseline first (black), then SDPA (grey)


def _files(*stems: str) -> list[str]:
    return [f"{stem}.{ext}" for stem in stems for ext in ("png", "pdf")]


def zoo_results(lengths: Sequence[int] = (256, 512, 1024, 2048, 4096)) -> pd.DataFrame:
    """Every registered variant at ``lengths``: times and memory growing with n, a few OOM and failed cells."""
    rows = []
    for i, name in enumerate(attentions.list_attentions()):
        for n in lengths:
            status = "oom" if name == "vanilla" and n == max(lengths) > min(lengths) else "ok"
            status = "error" if name == "sinkhorn" and n == 512 else status
            r = n / 1024
            rows.append(_row(name, n, status, (1 + i % 7) * r ** (1 + (i % 3) / 2), (2 + i % 5) * r**1.5, "fwd+bwd"))
    return pd.DataFrame(rows)


def _legend_texts(ax: object) -> list[str]:
    legend = ax.get_legend()  # type: ignore[attr-defined]
    return [t.get_text() for t in legend.get_texts()] if legend else []


def test_plot_scaling_writes_time_and_memory_with_their_ratios(tmp_path: Path) -> None:
    paths = plot_scaling(make_results(), tmp_path / "figs", slug="s", title="synthetic")
    check_files(paths, _files("time_s", "time_ratio_s", "memory_s", "memory_ratio_s"))


def test_plot_scaling_train_step(tmp_path: Path) -> None:
    paths = plot_scaling(make_results(mode="train_step"), tmp_path, slug="t", title="train")
    check_files(paths, _files("time_t", "time_ratio_t", "memory_t", "memory_ratio_t"))


def test_plot_scaling_skips_unmeasured_metric(tmp_path: Path) -> None:
    df = make_results().assign(peak_mem_bytes=math.nan)
    paths = plot_scaling(df, tmp_path, slug="s", title="time only")
    check_files(paths, _files("time_s", "time_ratio_s"))
    assert plot_scaling(df.assign(status="oom"), tmp_path / "none", slug="s", title="all OOM") == []


def test_write_reports_draws_each_group(tmp_path: Path) -> None:
    df = pd.concat([make_results(), make_results().assign(device="cuda")])
    written = write_speed_reports(df, tmp_path, env=ENV, suite="synthetic")
    figures = sorted(p.name for p in written if p.suffix in (".png", ".pdf"))
    assert figures == sorted(f"{kind}_{device}_float32_fwdpbwd_b4_h2_d64.{ext}"
                             for kind in ("time", "time_ratio", "memory", "memory_ratio")
                             for device in ("cpu", "cuda") for ext in ("png", "pdf"))
    check_files([tmp_path / name for name in figures], figures)


def test_a_narrow_log_axis_still_has_two_labelled_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    df = make_results()
    df["time_ms_median"] = 30.0 + df["seq_len"] / 1000.0  # 30.5 .. 34: far less than a decade
    df["peak_mem_bytes"] = 2**20 * (50.0 + df["seq_len"] / 4096.0)
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots)
    plot_scaling(df, tmp_path, slug="s", title="narrow")
    for (ax,) in seen[::2]:  # the absolute figures; the ratio ones follow each
        lo, hi = ax.get_ylim()
        labelled = [t for t in ax.yaxis.get_major_ticks() if t.label1.get_text() and lo <= t.get_loc() <= hi]
        assert len(labelled) >= 2, [t.label1.get_text() for t in labelled]


def _figure_legend_texts(ax: object) -> list[str]:
    """The texts of the legends of ``ax``'s figure (the shared legend of small multiples)."""
    return [t.get_text() for legend in ax.get_figure().legends for t in legend.get_texts()]  # type: ignore[attr-defined]


def test_the_whole_zoo_is_small_multiples_with_the_baselines_in_every_panel_and_one_shared_legend(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    df = zoo_results().assign(peak_mem_bytes=math.nan)  # the time figures suffice
    names = sorted(df["attention"].unique())
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots)
    plot_scaling(df, tmp_path, slug="zoo", title="zoo", crossover_baseline="vanilla_sdpa",
                 crossovers={"time": {"linformer": 700.0, "performer": 900.0}})
    layout = panels([n for n in names if n not in BASELINES], BASELINES)
    assert len(layout) > 1
    axes = seen[0]  # time
    assert len(axes) == len(layout)
    drawn: list[str] = []
    for ax, (_title, members) in zip(axes, layout, strict=True):
        # the panel's legend names its own lines only: the baselines and the keys are in the shared legend
        assert [t.split(" (○")[0] for t in _legend_texts(ax)] == [display_name(m) for m in members]
        drawn += members
        # baselines in every panel, thick, black and grey; the others a distinct colour and marker each
        lines = {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}
        assert [matplotlib.colors.to_hex(lines[b].get_color()) for b in BASELINES] == ["#000000", "#737373"]
        assert all(lines[b].get_linewidth() >= 1.5 for b in BASELINES)
        styles = [(matplotlib.colors.to_hex(lines[m].get_color()), lines[m].get_marker()) for m in members]
        assert len({c for c, _m in styles}) == len(styles) and len({m for _c, m in styles}) == len(styles)
        assert "#000000" not in {c for c, _m in styles}
    assert sorted(drawn) == sorted(n for n in names if n not in BASELINES)  # every variant exactly once
    shared = _figure_legend_texts(axes[0])
    assert shared[:2] == [display_name(b) for b in BASELINES]  # once, for the whole figure
    assert "OOM (top edge)" in shared and any(t.startswith("crossover vs Transformer (SDPA)") for t in shared)


def test_crossover_lengths_go_in_the_legend_and_no_label_sits_beside_a_ring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many variants cross the baseline near the same length: their lengths printed beside the rings ran together
    ("291 283 287 468 1.1K"); each goes after its variant's name in the legend, the ring stays on the line."""
    df = zoo_results().assign(peak_mem_bytes=math.nan)
    close = {name: 700.0 + 10 * i for i, name in enumerate(["local", "sparse_transformer", "longformer", "bigbird"])}
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots)
    plot_scaling(df, tmp_path, slug="zoo", title="zoo", crossover_baseline="vanilla",
                 crossovers={"time": close})
    texts = [t for axes in seen for ax in axes for t in ax.texts if t.get_visible()]
    assert texts == []  # no free-standing label that could collide
    legend = [t for axes in seen[:1] for ax in axes for t in _legend_texts(ax)]
    assert "Local Attention (○ 700)" in legend and "BigBird (○ 730)" in legend
    rings = [line for ax in seen[0] for line in ax.get_lines() if line.get_markerfacecolor() == "white"]
    assert sorted(round(float(line.get_xdata()[0])) for line in rings) == [700, 710, 720, 730]


def test_figures_are_titled_by_what_they_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory figure of the speed suite was titled "Speed: …"; each figure's title starts with its metric."""
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots)
    plot_scaling(make_results(), tmp_path, slug="s", title="Speed suite: CPU")
    plot_scaling(make_results(mode="train_step"), tmp_path, slug="t", title="Speed suite: CPU")
    titles = [axes[0].get_figure().get_suptitle() for axes in seen]
    assert titles == ["Time — Speed suite: CPU", "Speed-up — Speed suite: CPU", "Peak memory — Speed suite: CPU",
                      "Memory saving — Speed suite: CPU", "Throughput — Speed suite: CPU",
                      "Throughput ratio — Speed suite: CPU", "Peak memory — Speed suite: CPU",
                      "Memory saving — Speed suite: CPU"]


def test_the_ratio_figures_show_the_tables_multipliers_against_the_suites_baseline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Table 4's multipliers: the baseline's time (memory) over the variant's, above 1 is better; the figures divided
    the variant by SDPA instead (below 1 was better), so a reader cross-checking got two numbers."""
    df = pd.concat([make_results(), make_results().query("attention == 'vanilla'").assign(
        attention="vanilla_sdpa", time_ms_median=lambda d: d["time_ms_median"] / 2)])
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots)
    plot_scaling(df, tmp_path, slug="s", title="t", crossover_baseline="vanilla_sdpa", baseline="vanilla")
    (time_ratio,), (memory_ratio,) = seen[1], seen[3]
    s3 = next(line for line in time_ratio.get_lines() if line.get_gid() == "s3attention")
    at_1k = dict(zip(s3.get_xdata(), s3.get_ydata(), strict=True))[1024]
    assert at_1k == pytest.approx(4.0)  # vanilla 40 ms / s3attention 10 ms: 4.0x faster, as Table 4 prints it
    s3_memory = next(line for line in memory_ratio.get_lines() if line.get_gid() == "s3attention")
    assert dict(zip(s3_memory.get_xdata(), s3_memory.get_ydata(), strict=True))[1024] == pytest.approx(8.0)
    assert " ".join(time_ratio.get_ylabel().split()) == "Speed-up over Transformer (> 1: faster)"
    assert " ".join(memory_ratio.get_ylabel().split()) == "Memory saving over Transformer (> 1: leaner)"
    assert "vanilla" not in {line.get_gid() for line in time_ratio.get_lines()}  # the reference is the line at 1


def test_paper_figures_are_a_column_or_two_wide_with_few_ticks_and_legends_within_their_panel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots, write=True)  # the PDF's page size is checked below
    plot_scaling(zoo_results().assign(peak_mem_bytes=math.nan), tmp_path, slug="zoo", title="zoo")
    plot_scaling(make_results(), tmp_path, slug="few", title="few")
    for axes in seen:
        fig = axes[0].get_figure()
        assert fig.get_figwidth() in (COLUMN_IN, DOUBLE_IN)
        for ax in axes:
            for axis in (ax.xaxis, ax.yaxis):
                lo, hi = sorted(axis.get_view_interval())
                shown = [t for t in axis.get_major_ticks() if t.label1.get_text() and lo <= t.get_loc() <= hi]
                assert len(shown) <= MAX_TICKS
            legend = ax.get_legend()
            if legend is not None:
                assert legend.get_window_extent().height <= ax.get_window_extent().height + 1
    pdf = (tmp_path / "time_zoo.pdf").read_bytes()
    assert b"/MediaBox [ 0 0 496.8 " in pdf  # 6.9 in at 72 pt/in: the layout kept the width


def test_a_highlighted_variant_is_drawn_in_every_panel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--highlight myattn`` left the highlighted line alone in its own panel and greyed the family panels: it is
    drawn in every panel, thick and on top, in the shared legend, and each family keeps its colours."""
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots)
    with highlighting(["s3attention"]):
        plot_scaling(zoo_results().assign(peak_mem_bytes=math.nan), tmp_path, slug="zoo", title="zoo")
    grey = matplotlib.colors.to_hex(str(MUTED["color"]))
    for ax in seen[0]:
        lines = {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}
        s3 = lines["s3attention"]
        others = [line for gid, line in lines.items() if gid not in ("s3attention", *BASELINES)]
        assert others, "a panel of the highlighted variant alone"
        assert all(s3.get_zorder() > line.get_zorder() and s3.get_linewidth() > line.get_linewidth() for line in others)
        colours = {matplotlib.colors.to_hex(line.get_color()) for line in others}
        assert grey not in colours and matplotlib.colors.to_hex(s3.get_color()) not in colours
        assert "S3Attention" not in [t.split(" (○")[0] for t in _legend_texts(ax)]
    assert "S3Attention" in _figure_legend_texts(seen[0][0])


def test_highlight_in_one_panel_greys_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    df = pd.concat([make_results(), make_results().query("attention == 's3attention'").assign(attention="linformer",
                                                                                               time_ms_median=12.0)])
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots)
    with highlighting(["s3*"]):
        plot_scaling(df, tmp_path, slug="few", title="few")
    lines = {line.get_gid(): line for line in seen[0][0].get_lines() if line.get_gid()}
    grey = matplotlib.colors.to_hex(str(MUTED["color"]))
    assert matplotlib.colors.to_hex(lines["linformer"].get_color()) == grey
    assert matplotlib.colors.to_hex(lines["s3attention"].get_color()) != grey
    assert "others" in _figure_legend_texts(seen[0][0])


def test_one_length_is_a_dot_chart_not_one_point_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots, write=True)
    df = zoo_results(lengths=(1024,))
    check_files(plot_scaling(df, tmp_path, slug="one", title="compiled"),
                _files("time_one", "time_ratio_one", "memory_one", "memory_ratio_one"))
    for (ax,) in seen:
        assert ax.get_figure().get_figwidth() == COLUMN_IN
        data = [line for line in ax.get_lines() if line.get_marker() not in ("None", "", None)]
        assert data and all(len(line.get_xdata()) == 1 for line in data)  # dots, no line through one point
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels[0] in ("Transformer (SDPA)", "Transformer")  # the baselines on top
    assert len(seen[0][0].get_yticklabels()) == df["attention"].nunique()


def test_a_ratio_figure_says_where_its_reference_ran_out_of_memory(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the baseline is OOM (vanilla at 4K) the multipliers stop: the ratio figures left those lengths empty
    without a word; a ✕ at the top edge and a key say why."""
    seen = spy_axes(monkeypatch, harness.kinds.speed.plots)
    plot_scaling(make_results(), tmp_path, slug="s", title="t")
    for (ratio,) in (seen[1], seen[3]):
        (oom,) = [line for line in ratio.get_lines() if line.get_gid() == "vanilla oom"]
        assert list(oom.get_xdata()) == [4096] and list(oom.get_ydata()) == [1.0]
        assert "Transformer OOM: no multiplier" in _figure_legend_texts(ratio)
    assert "Transformer OOM: no multiplier" not in _figure_legend_texts(seen[0][0])
