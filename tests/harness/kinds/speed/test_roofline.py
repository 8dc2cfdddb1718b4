"""The roofline view (harness.kinds.speed.roofline) and the eager/compiled comparison (harness.kinds.speed.compiled), on
constructed results whose answers are known."""

from __future__ import annotations

from pathlib import Path

import matplotlib.colors
import pandas as pd
import pytest

import harness.kinds.speed.roofline
from harness.kinds.speed.compiled import comparison_table, compile_comparison
from harness.kinds.speed.report import GROUP_COLUMNS, group_slug, group_title
from harness.kinds.speed.roofline import ABOVE, attach_roofline, roofline_table, write_roofline
from tests.harness.figures import spy_axes

GROUP = {"device": "cpu", "dtype": "float32", "mode": "fwd+bwd", "batch_size": 4, "heads": 2, "dim": 64}


def _cell(attention: str, n: int, *, intensity: float, gflops_per_s: float, run: str = "r1",
          compile_: str = "eager", status: str = "ok", time_ms: float = 1.0, **extra: object) -> dict[str, object]:
    return {**GROUP, "compile": compile_, "attention": attention, "seq_len": n, "status": status, "run_id": run,
            "intensity_flop_per_byte": intensity, "gflops_per_s": gflops_per_s, "time_ms_median": time_ms,
            "threads": 1, "gflops": 1.0, "gbytes_moved": 1.0 / intensity, **extra}


def test_the_roof_is_the_lower_of_the_peak_and_bandwidth_times_intensity() -> None:
    # peak 100 GFLOP/s, bandwidth 10 GB/s: the ridge point is at I = 10 FLOP/byte
    df = pd.DataFrame([_cell("a", 1024, intensity=2.0, gflops_per_s=10.0),
                       _cell("b", 1024, intensity=40.0, gflops_per_s=50.0),
                       _cell("c", 1024, intensity=10.0, gflops_per_s=1.0, status="error"),
                       _cell("d", 1024, intensity=5.0, gflops_per_s=5.0, run="unknown")])
    points = attach_roofline(df, {"r1": (100.0, 10.0)}).set_index("attention")
    assert list(points.index) == ["a", "b"]  # failed cells and cells of a run without ceilings are no points
    assert points.loc["a", "attainable_gflops_per_s"] == pytest.approx(20.0)
    assert points.loc["a", "roofline_fraction"] == pytest.approx(0.5) and points.loc["a", "bound"] == "memory"
    assert points.loc["b", "attainable_gflops_per_s"] == pytest.approx(100.0)
    assert points.loc["b", "roofline_fraction"] == pytest.approx(0.5) and points.loc["b", "bound"] == "compute"
    md = roofline_table(attach_roofline(df, {"r1": (100.0, 10.0)}), "md")
    assert "10 (50%, I 2, mem) |" in md and "50 (50%, I 40) |" in md


def test_write_roofline_writes_the_points_a_table_per_group_and_a_figure_per_mode(tmp_path: Path) -> None:
    df = pd.DataFrame([_cell("a", n, intensity=n / 512, gflops_per_s=n / 100, compile_=c)
                       for n in (1024, 2048) for c in ("eager", "inductor")])
    written = write_roofline(df, tmp_path, {"r1": (100.0, 10.0)}, group_columns=GROUP_COLUMNS, slug_of=group_slug,
                             title_of=group_title, suite="speed", env={})
    names = sorted(p.name for p in written)
    slug = "cpu_float32_fwdpbwd_b4_h2_d64"
    assert names == sorted(["roofline.csv", f"roofline_{slug}.md", f"roofline_{slug}.tex",
                            "roofline_cpu_float32_fwdpbwd_inductor_b4_h2_d64.md",
                            "roofline_cpu_float32_fwdpbwd_inductor_b4_h2_d64.tex",
                            f"roofline_{slug}.png", f"roofline_{slug}.pdf"])
    assert len(pd.read_csv(tmp_path / "roofline.csv")) == 4
    assert write_roofline(df.drop(columns="intensity_flop_per_byte"), tmp_path / "none", {},
                          group_columns=GROUP_COLUMNS,
                          slug_of=group_slug, title_of=group_title, suite="speed", env={}) == []


def test_a_point_above_its_roof_is_flagged_in_the_table_and_ringed_in_the_figure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A point above the roof means the roof or the count is loose: it is flagged (table, CSV, figure), the note says
    why it can happen, and the roof's values are in the legend, where no point covers them."""
    df = pd.DataFrame([_cell("sdpa", 2048, intensity=265.0, gflops_per_s=105.0),  # 105% of a 100 GFLOP/s peak
                       _cell("fused", 1024, intensity=2.0, gflops_per_s=30.0, compile_="inductor"),  # 150% of B·I
                       _cell("fine", 1024, intensity=40.0, gflops_per_s=50.0)])
    points = attach_roofline(df, {"r1": (100.0, 10.0)}).set_index("attention")
    assert points["above_roof"].to_dict() == {"sdpa": True, "fused": True, "fine": False}
    seen = spy_axes(monkeypatch, harness.kinds.speed.roofline)
    write_roofline(df, tmp_path, {"r1": (100.0, 10.0)}, group_columns=GROUP_COLUMNS, slug_of=group_slug,
                   title_of=group_title, suite="speed", env={})
    md = (tmp_path / "roofline_cpu_float32_fwdpbwd_b4_h2_d64.md").read_text()
    assert "105 (105%, I 2.6e+02, above roof)" in md and "50 (50%, I 40) |" in md
    assert "docs/measuring.md" in md and "README" not in md  # the section the caption points to exists
    assert pd.read_csv(tmp_path / "roofline.csv")["above_roof"].tolist().count(True) == 2
    (ax,) = seen[0]
    assert [t.get_text() for t in ax.texts] == []  # nothing written at the roof's ends for a point to cover
    legend = [t.get_text() for lg in ax.get_figure().legends for t in lg.get_texts()]
    assert "roof: 100 GFLOP/s GEMM, 10 GB/s copy" in legend and "above its roof (see note)" in legend
    rings = [c for c in ax.collections if c.get_edgecolor().size and
             matplotlib.colors.to_hex(c.get_edgecolor()[0]) == ABOVE.lower()]
    assert len(rings) == 2 and sum(len(c.get_offsets()) for c in rings) == 2


def test_a_point_above_the_drawn_roof_of_a_newer_run_is_ringed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs, two roofs: the figure draws the newest run's, and a point of the older run under its own (higher)
    roof but above the drawn one is ringed too, so no point sits above the drawn roof without a flag."""
    df = pd.DataFrame([_cell("old", 1024, intensity=40.0, gflops_per_s=80.0, run="r1"),  # 80% of r1's 100
                       _cell("new", 2048, intensity=40.0, gflops_per_s=30.0, run="r2")])  # 60% of r2's 50
    seen = spy_axes(monkeypatch, harness.kinds.speed.roofline)
    write_roofline(df, tmp_path, {"r1": (100.0, 10.0), "r2": (50.0, 10.0)}, group_columns=GROUP_COLUMNS,
                   slug_of=group_slug, title_of=group_title, suite="speed", env={})
    (ax,) = seen[0]
    rings = [c for c in ax.collections if c.get_edgecolor().size and
             matplotlib.colors.to_hex(c.get_edgecolor()[0]) == ABOVE.lower()]
    assert [list(map(float, c.get_offsets()[0])) for c in rings] == [[40.0, 80.0]]
    assert ax.get_figure().get_suptitle().startswith("Roofline — Speed:") or any(
        t.get_text().startswith("Roofline — Speed:") for t in ax.get_figure().texts)


def test_compile_comparison_pairs_each_compiled_cell_with_its_eager_one() -> None:
    df = pd.DataFrame([
        _cell("a", 1024, intensity=1, gflops_per_s=1, time_ms=30.0),
        _cell("a", 1024, intensity=1, gflops_per_s=1, time_ms=20.0, compile_="inductor", compile_s=4.0,
              compile_graphs=1, compile_graph_breaks=0, compile_check="matches eager", compile_rel_err=1e-7),
        _cell("b", 1024, intensity=1, gflops_per_s=1, time_ms=10.0),
        _cell("b", 1024, intensity=1, gflops_per_s=1, time_ms=float("nan"), compile_="inductor", status="error",
              message="BackendCompilerFailed: x"),
        _cell("c", 1024, intensity=1, gflops_per_s=1, time_ms=10.0),  # never compiled: no row
        _cell("d", 1024, intensity=1, gflops_per_s=1, time_ms=8.0),
        _cell("d", 1024, intensity=1, gflops_per_s=1, time_ms=4.0, compile_="inductor", compile_s=2.0,
              compile_check="not compared: two eager calls differ (random draws)"),
    ])
    cmp = compile_comparison(df).set_index("attention")
    assert list(cmp.index) == ["a", "b", "d"] and cmp.loc["a", "compile_rel_err"] == 1e-7
    assert cmp.loc["a", "compile_speedup"] == pytest.approx(1.5) and cmp.loc["a", "compile_s"] == 4.0
    assert cmp.loc["b", "status_compiled"] == "error" and pd.isna(cmp.loc["b", "compile_speedup"])
    md = comparison_table(compile_comparison(df), "md")
    assert "| 30 → 20 (1.5×) [4 s] |" in md and " error |" in md and " 8 → 4ʳ (2.0×) [2 s] |" in md


def test_compile_comparison_marks_a_time_that_refaults_its_memory() -> None:
    """`vanilla` at 4K on the Intel CPU: the eager call faulted its 1.5 GiB in again every time, the compiled one
    less than a tenth of its peak; only the eager time gets the mark."""
    gib = 2**30
    df = pd.DataFrame([
        _cell("vanilla", 4096, intensity=1, gflops_per_s=1, time_ms=4740.0, page_faults_per_call=402_709.0,
              peak_mem_bytes=1.51 * gib),
        _cell("vanilla", 4096, intensity=1, gflops_per_s=1, time_ms=919.0, compile_="inductor", compile_s=7.0,
              page_faults_per_call=20_000.0, peak_mem_bytes=1.02 * gib),
    ])
    cmp = compile_comparison(df)
    assert cmp["refaults_eager"].tolist() == [True] and cmp["refaults_compiled"].tolist() == [False]
    assert "| 4.74e+03§ → 919 (5.2×) [7 s] |" in comparison_table(cmp, "md")
    assert r"4.74e+03$^\S$ $\to$ 919" in comparison_table(cmp, "tex")
