"""The approximation table's timings carry the marks of the evidence they rest on (harness.kinds.approximation.report):
a time its cell's, a speed-up its own and its reference's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.kinds.approximation.report import _rows, attach_speedup


def _cells(reference_noisy: bool, variant_noisy: bool) -> pd.DataFrame:
    base = {"input": "gaussian", "seq_len": 256, "status": "ok", "budget": "default", "timing_group": "g",
            "rel_fro": 0.1, "max_abs": 0.1, "cos_mean": 0.99, "cos_min": 0.9, "attn_tv": 0.05}
    return pd.DataFrame([
        {**base, "attention": "vanilla_sdpa", "key": "ref", "time_ms_median": 2.0, "noisy": reference_noisy,
         "rel_fro": 0.0},
        {**base, "attention": "linformer", "key": "lin", "time_ms_median": 1.0, "noisy": variant_noisy},
    ])


def _speed_columns(reference_noisy: bool, variant_noisy: bool) -> list[tuple[str, str]]:
    samples = {("ref", "g"): [2.0, 2.1, 1.9, 2.0], ("lin", "g"): [1.0, 1.05, 0.95, 1.0]}
    df = attach_speedup(_cells(reference_noisy, variant_noisy), samples, "vanilla_sdpa")
    return [(row[-2], row[-1]) for row in _rows(df, "md")]


def test_a_speedup_carries_its_references_mark_and_a_time_only_its_own() -> None:
    (ref_time, ref_speedup), (time, speedup) = _speed_columns(reference_noisy=True, variant_noisy=False)
    assert ref_time.endswith("†") and ref_speedup.endswith("†")
    assert not time.endswith("†")  # the variant's own timing was quiet
    assert speedup.startswith("2.0×") and speedup.endswith("]†")  # but its ratio rests on the noisy reference too


def test_quiet_timings_carry_no_mark_and_a_noisy_one_marks_once() -> None:
    assert all("†" not in t + s for t, s in _speed_columns(False, False))
    (_, _), (time, speedup) = _speed_columns(True, True)
    assert time.endswith("†") and speedup.count("†") == 1


def test_the_pareto_axis_spans_the_approximations_and_exact_points_sit_on_its_floor() -> None:
    """An exact configuration's error is float rounding (1e-7): the axis floor comes from the approximations (a third
    of the smallest error above rounding), and the exact points are drawn on it, ▼, with a legend entry saying so."""
    import matplotlib.pyplot as plt

    from harness.kinds.approximation.report import ROUNDING, _draw_pareto, _floor, _keys
    from harness.report.plots import line_styles

    part = pd.DataFrame({"attention": ["vanilla", "linformer", "linformer"], "budget": ["default", "k=32", "k=64"],
                         "rel_fro": [1.5e-7, 0.3, 0.015], "speedup": [0.6, 3.0, 2.0]})
    floor = _floor(part)
    assert floor == 0.015 / 3 and _floor(part.iloc[:1]) == ROUNDING
    assert _floor(part.assign(rel_fro=[0, 0.3, 0.2])) == 1e-2  # at most 1e-2: a decade under the best still shows
    fig, ax = plt.subplots()
    try:
        styles = line_styles(["vanilla", "linformer"], ["vanilla"])
        assert _draw_pareto(ax, part, ["vanilla", "linformer"], styles, ["vanilla"], floor)
        at_floor = [line for line in ax.get_lines() if line.get_marker() == "v"]
        assert len(at_floor) == 1 and list(at_floor[0].get_ydata()) == [floor]
        assert _keys("vanilla_sdpa", True)[-1].get_label() == "exact to rounding (below the axis)"
        # the reference's line at 1, named once ("Transformer (SDPA) (exact)" read as two asides)
        assert _keys("vanilla_sdpa", False)[0].get_label() == "Transformer (SDPA), exact: speed-up 1"
    finally:
        plt.close(fig)


def test_the_pareto_figures_labels_overlap_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Budget labels of lines that meet near one point ("nb_features=16" over "window=32"): each label covers no
    other label and no marker, or is hidden."""
    import matplotlib.text
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    import harness.kinds.approximation.report
    from harness.kinds.approximation.report import plot_pareto
    from tests.harness.figures import spy_axes

    rows = [("vanilla", "default", 1e-7, 0.6)]
    for name, budgets in (("linformer", ("k=32", "k=64", "k=256")), ("performer", ("nb_features=16", "m=64")),
                          ("local", ("window=32", "window=128")), ("nystromformer", ("m=8", "m=32"))):
        rows += [(name, b, 0.5 / (i + 1) + 0.01 * len(name), 0.9 + 0.05 * i) for i, b in enumerate(budgets)]
    df = pd.DataFrame([{"attention": a, "budget": b, "rel_fro": e, "speedup": s, "status": "ok", "input": "gaussian",
                        "seq_len": 128} for a, b, e, s in rows])
    seen = spy_axes(monkeypatch, harness.kinds.approximation.report)
    plot_pareto(df, tmp_path, suite="approximation", reference="vanilla_sdpa")
    (ax,) = seen[0]
    renderer = FigureCanvasAgg(ax.get_figure()).get_renderer()  # the figure is closed: a canvas to measure with
    labels = [t for t in ax.texts if t.get_visible() and t.get_gid() == "point label"]
    shown = [matplotlib.text.Text.get_window_extent(t, renderer) for t in labels]  # the text, not its leader
    assert len(shown) >= 4 and not any(a.overlaps(b) for i, a in enumerate(shown) for b in shown[i + 1:])
    points = [xy for line in ax.get_lines() if line.get_marker() not in ("None", "")
              for xy in line.get_transform().transform(line.get_xydata())]
    assert not any(box.contains(x, y) for box in shown for x, y in points)
