"""Every suite's quick profile writes LaTeX that prints, and the speed suite's paper profile a Table 4 that sits in one
column: each suite runs through the real pipeline (suite file, cells, store, reports) with its cells' measurements
made up, so that the tables have the quick profile's shape (every variant, every length, every seed) in seconds.

Each ``.tex`` is compiled in a two-column article where pdflatex is installed: no error, no float taller than a
page, no box past its column or page, no table scaled below 0.85 or above 1 (tests/latex.py). The LaTeX tables print
the paper's rows; the Markdown tables and the supplementary long tables every row.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import attentions
import harness.kinds.approximation.report
import harness.kinds.decode.report
import harness.kinds.recall.report
import harness.kinds.speed.plots
import harness.kinds.speed.roofline
import harness.report.plots
from harness.core.cell import Cell, CellResult, Context
from harness.core.kind_table import KINDS
from harness.kinds.speed.table4 import PAPER_ROWS
from harness.report.format import display_name
from harness.report.latex import COLUMN_MIN_SCALE
from tests.conftest import REPO_ROOT, CliResult, patch_kind
from tests.latex import ENGINE, compile_report

SUITES = sorted((REPO_ROOT / "suites").glob("*.yaml"))


def _draw(cell: Cell, salt: str = "") -> float:
    """A number in [0, 1) fixed by the cell (its key) and ``salt``."""
    return int(hashlib.sha256((cell.key + salt).encode()).hexdigest()[:8], 16) / 2**32


def _timed(cell: Cell, ms: float) -> dict[str, Any]:
    t = ms * (0.5 + _draw(cell))
    return {"time_ms_median": t, "time_ms_iqr": 0.04 * t, "time_ms_q25": 0.98 * t, "time_ms_q75": 1.02 * t,
            "time_ms_mean": t, "n_calls": 10, "rounds": 5, "threads": 1, "steps_per_s": 1000 / t}


def _speed(cell: Cell, ctx: Context) -> CellResult:
    name, n = cell.params["attention"], cell.params["seq_len"]
    if not attentions.spec(name).available("cpu"):
        return CellResult("unsupported", "not available on the CPU")
    if name == "vanilla" and n >= 4096 and cell.params["mode"] != "fwd":
        return CellResult("oom", "out of memory")
    ms = (n / 1024) ** (2 if name.startswith("vanilla") else 1) * 20
    metrics = _timed(cell, ms)
    # the roofline (ROOFS: 100 GFLOP/s, 10 GB/s): intensities both sides of the ridge, some points
    # above their roof
    intensity = 2 ** (1 + 4 * _draw(cell, "i"))
    achieved = min(100.0, 10.0 * intensity) * (0.2 + 0.9 * _draw(cell, "f"))
    gflops = achieved * metrics["time_ms_median"] / 1e3
    metrics |= {"peak_mem_bytes": int(ms * 2**20 * (1 + _draw(cell, "m"))), "gflops": gflops,
                "gbytes_moved": gflops / intensity, "intensity_flop_per_byte": intensity, "gflops_per_s": achieved,
                "page_faults_per_call": 0, "first_call_ms": 3 * ms,
                **({"plan_ms": ms / 4} if name.startswith(("local", "bigbird")) else {}),
                **({"warm_cache": True} if name == "vanilla_sdpa" and n <= 1024 else {})}  # a CUDA flag: its mark
    return CellResult("ok", "", metrics, samples=[metrics["time_ms_median"]] * 5)


def _accuracy(cell: Cell, ctx: Context) -> CellResult:
    acc = 0.3 + 0.4 * _draw(cell)
    metrics: dict[str, Any] = {"test_acc": acc, "best_dev_acc": acc, "best_step": 10, "steps": 20,
                               "final_train_loss": 1.0, "steps_per_s": 3.0, "wall_s": 1.0}
    for rank in (cell.fixed.get("incoherence") or {}).get("ranks", []):
        for which in ("x", "smooth"):
            metrics |= {f"mu_{which}_r{rank}_mean": 1 + _draw(cell, which), f"mu_{which}_r{rank}_std": 0.1}
    curve = [{"step": step, "dev_acc": acc * step / 20, "train_loss": 2.0 - step / 20, "dev_loss": 2.0 - step / 20}
             for step in (5, 10, 15, 20)]
    return CellResult("ok", "", metrics | {"mu_count": 10}, curve=curve)


def _forecasting(cell: Cell, ctx: Context) -> CellResult:
    mse = 0.2 + 2 * _draw(cell)
    naive = {f"naive_{k}_{m}": 1 + _draw(cell, k + m) for k in ("last", "mean", "fourier") for m in ("mse", "mae")}
    history, horizon = range(96), range(cell.params["horizon"])  # the figure's test window (forecasting/cells.py)
    example = {"history": [math.sin(t / 8) for t in history], "truth": [math.sin((96 + t) / 8) for t in horizon],
               "forecast": [math.sin((96 + t) / 8) + _draw(cell) * t / len(horizon) for t in horizon]}
    (ctx.workdir / "forecasts").mkdir(exist_ok=True)
    (ctx.workdir / "forecasts" / f"{cell.key}.json").write_text(json.dumps(example))
    return CellResult("ok", "", {"test_mse": mse, "test_mae": mse / 2, "best_val_mse": mse, "best_step": 5,
                                 "steps": 10, "stopped_early": False, "train_windows": 100, "test_windows": 50,
                                 "steps_per_s": 3.0, "wall_s": 1.0, **naive})


def _decode(cell: Cell, ctx: Context) -> CellResult:
    name, context = cell.params["attention"], cell.params["context"]
    if name == "vanilla" and context >= 32768:
        return CellResult("oom", "out of memory")
    cache = name.startswith("vanilla") or name in ("reformer", "synthesizer")
    metrics = _timed(cell, (context / 1024 if cache else 1) * 0.3)
    metrics |= {"ms_per_token": metrics["time_ms_median"], "tokens_per_s": 1000 / metrics["time_ms_median"],
                "prefill_ms": context / 10, "state_bytes": (context if cache else 1024) * 2**12,
                "state_bytes_per_sequence": 1, "state_bytes_tensors": 1, "gflops": 1e-3 * context,
                "gbytes_moved": 1e-3 * context, "first_call_ms": 1.0, "warm_cache": context <= 1024}
    return CellResult("ok", "", metrics, samples=[metrics["time_ms_median"]] * 5)


def _approximation(cell: Cell, ctx: Context) -> CellResult:
    group = f"{cell.params['input']} {cell.params['seq_len']}"  # timed beside the reference: speed-ups, a figure
    metrics = _timed(cell, 0.3) | {"timing_group": group, "rel_fro": 0.5 * _draw(cell), "max_abs": 0.2,
                                   "cos_mean": 0.9, "cos_min": -0.1, "attn_tv": 0.3, "attn_rel_fro": 0.1,
                                   "attn_max_abs": 0.1, "real_tokens": cell.params["seq_len"]}
    return CellResult("ok", "", metrics, samples=[metrics["time_ms_median"]] * 5)


def _recall(cell: Cell, ctx: Context) -> CellResult:
    recall = _draw(cell)
    return CellResult("ok", "", {"recall": recall, "best_recall": recall, "epochs_run": 3, "steps": 100,
                                 "stopped_early": False, "step_ms": 40 * (1 + _draw(cell, "t")), "wall_s": 1.0,
                                 "state_bytes": 2**16 * (1 + _draw(cell, "s")), "state_note": "",
                                 "vocab_size": 8192},
                      curve=[{"step": 100, "train_loss": 1.0, "dev_accuracy": recall}])


FAKES = {"speed": _speed, "accuracy": _accuracy, "forecasting": _forecasting, "decode": _decode,
         "approximation": _approximation, "recall": _recall}


#: What a run measures of the machine before its first cell (a kind's ``run_env``), made up: the roofline's ceilings.
ROOFS = {"gemm_peak_gflops": 100.0, "memory_bandwidth_gbs": 10.0}
ENVS = {"speed": lambda cells, device: dict(ROOFS), "decode": lambda cells, device: {"memory_bandwidth_gbs": 10.0}}


def test_every_kind_has_its_made_up_cells() -> None:
    """A kind without made-up cells would run its quick profile for real (an hour of training) inside the tests."""
    assert set(FAKES) == set(KINDS)


@pytest.fixture
def made_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kind's cells made up (no data prepared, no machine measured), and no figure saved: the tables are
    what is tested, and drawing every figure of a quick profile takes a minute. ``ATTNBENCH_TEST_FIGURES=1`` saves
    them, to look at every figure of every suite's quick profile::

        ATTNBENCH_TEST_FIGURES=1 .venv/bin/python -m pytest -q tests/test_tables_print.py --basetemp=/tmp/figs
    """
    for kind, run in FAKES.items():
        patch_kind(monkeypatch, kind, run=run, prepare=lambda cells, ctx: None, run_env=ENVS.get(kind))
    if os.environ.get("ATTNBENCH_TEST_FIGURES") == "1":
        return
    for module in (harness.report.plots, harness.kinds.speed.plots, harness.kinds.speed.roofline,
                   harness.kinds.decode.report, harness.kinds.approximation.report, harness.kinds.recall.report):
        monkeypatch.setattr(module, "save_figure", lambda fig, out_dir, stem: [])


def _run(cli: Callable[..., CliResult], path: Path, profile: str, out: Path) -> Path:
    result = cli("run", path, "--profile", profile, "--out", out, "--device", "cpu")
    assert result.code == 0, result.err
    (directory,) = out.glob(f"*/{profile}")
    return directory


def _compiles(directory: Path, workdir: Path) -> dict[str, Any]:
    tex = sorted(directory.glob("*.tex"))
    assert tex
    for path in tex:
        first = path.read_text().splitlines()[0]
        assert first.startswith(r"% Needs \usepackage{booktabs}, \usepackage{"
                                + ("longtable" if path.stem.endswith("_full") else "graphicx")), path.name
    if ENGINE is None:
        return {}
    compiled = compile_report(tex, workdir)
    assert compiled.pdf is not None and not compiled.problems, "\n".join(compiled.problems)
    return compiled.files


@pytest.mark.usefixtures("made_up", "fast_runner", "one_thread")
@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in SUITES])
def test_every_table_of_a_quick_run_prints(cli: Callable[..., CliResult], tmp_path: Path, path: Path) -> None:
    directory = _run(cli, path, "quick", tmp_path / "out")
    typeset = _compiles(directory, tmp_path / "latex")
    for name, floats in typeset.items():
        assert floats.envs and set(floats.envs) <= {"table", "table*", "longtable"}, name
    for md in directory.glob("table4_*.md"):  # Markdown: every variant measured; LaTeX: the paper's rows
        shown = pd.read_csv(directory / "results.csv")["attention"].unique()
        tex = (directory / f"{md.stem}.tex").read_text()
        full = (directory / f"{md.stem}_full.tex").read_text()
        for name in shown:
            label = display_name(name)
            in_md = f"| {label} " in md.read_text() or f"{label}." in md.read_text()  # a row, or named not run
            assert in_md and f"{label} &" in full or f"{label}." in full, name
            assert (f"\n{label} &" in tex) == (name in PAPER_ROWS and f"\n{label} &" in full), name


@pytest.mark.usefixtures("made_up", "fast_runner", "one_thread")
def test_table4_of_the_papers_rows_fits_one_column_at_8_pt(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    """The paper profile (training steps at 1K-4K): the time and memory blocks of the paper's six rows in one column
    with text of 8 pt or more; every variant in the long table."""
    directory = _run(cli, REPO_ROOT / "suites" / "speed.yaml", "paper", tmp_path / "out")
    table4 = directory / "table4_cpu_float32_train_step_b32_h2_d64.tex"
    text = table4.read_text()
    assert r"\begin{table}[t]" in text and r"\begin{table*}" not in text
    assert [line.split(" & ")[0] for line in text.splitlines() if " & " in line and line[0].isupper()] == [
        "Attention", "Transformer", "S3Attention", "Linformer", "Nyströmformer", "Performer", "Reformer"] * 2
    typeset = _compiles(directory, tmp_path / "latex")
    if typeset:
        assert typeset[table4.name].envs == ["table"]
        assert all(s >= COLUMN_MIN_SCALE for s in typeset[table4.name].scales)  # 9 pt × scale ≥ 8 pt
