"""One-time costs measured apart from the steady state (the plan, the first call) and the tables in the field's units
beside Table 4 (TFLOP/s, % of peak, GB/s; harness.kinds.speed.throughput)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from torch import nn

import attentions
import harness.kinds.speed.cells
from harness.core.cell import Cell, Context
from harness.kinds.speed.report import table4, write_speed_reports
from harness.kinds.speed.throughput import attach_rates, blocks_table, onetime_blocks, rate_blocks
from harness.run.suitefile import load_suite
from tests.conftest import tiny_doc

GROUP = {"device": "cpu", "dtype": "float32", "mode": "fwd", "causal": False, "compile": "eager", "batch_size": 1,
         "heads": 2, "dim": 16}
PLAN_S = 0.02


def _cell(write_yaml: Callable[..., Path], mode: str, **fixed: Any) -> Cell:
    doc = tiny_doc(axes={"attention": ["vanilla"], "seq_len": [16], "mode": [mode]}, metrics=["time"])
    if fixed:
        doc["fixed"] = fixed
    (cell,) = load_suite(write_yaml(doc), "smoke").expand("cpu")
    return cell


@pytest.mark.usefixtures("one_thread")
def test_the_plan_is_built_once_before_the_first_call_and_never_timed(monkeypatch: pytest.MonkeyPatch,
                                                                      write_yaml: Callable[..., Path]) -> None:
    """A made-up attention whose ``build_plan`` takes 20 ms: called once, before any call, for the cell's shape;
    its time is ``plan_ms``, and no timed call includes it."""
    log: list[object] = []

    class Planned(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def build_plan(self, seq_len: int, batch_size: int) -> None:
            log.append(("plan", seq_len, batch_size))
            time.sleep(PLAN_S)

    module = Planned()

    def call() -> torch.Tensor:
        log.append("call")
        with torch.no_grad():
            return module.lin(torch.ones(2, 4))

    monkeypatch.setattr(harness.kinds.speed.cells, "build_workload", lambda cell, device: (call, call, module))
    result = harness.kinds.speed.cells.measure_cell(_cell(write_yaml, "fwd"), Context(Path(".")))
    assert result.status == "ok", result.message
    assert log[0] == ("plan", 16, 1) and log[1:] == ["call"] * (len(log) - 1) and len(log) > 3
    m = result.metrics
    assert m["plan_ms"] >= PLAN_S * 1e3 and m["first_call_ms"] > 0
    assert m["time_ms_median"] < m["plan_ms"]  # microseconds of a 4 × 4 layer, not the plan's 20 ms


@pytest.mark.usefixtures("one_thread")
def test_a_training_step_builds_the_plan_of_every_layer(monkeypatch: pytest.MonkeyPatch,
                                                        write_yaml: Callable[..., Path]) -> None:
    """The encoder of a train_step cell has one attention per layer: each builds its plan once, and plan_ms is the
    sum."""
    planned: list[tuple[int, int]] = []

    def build_plan(self: nn.Module, seq_len: int, batch_size: int) -> None:
        planned.append((seq_len, batch_size))
        time.sleep(PLAN_S)

    monkeypatch.setattr(type(attentions.build("vanilla")), "build_plan", build_plan, raising=False)
    result = harness.kinds.speed.cells.measure_cell(_cell(write_yaml, "train_step", layers=3), Context(Path(".")))
    assert result.status == "ok", result.message
    assert planned == [(16, 1)] * 3 and result.metrics["plan_ms"] >= 3 * PLAN_S * 1e3


def test_an_attention_without_a_plan_has_no_plan_time(write_yaml: Callable[..., Path]) -> None:
    result = harness.kinds.speed.cells.measure_cell(_cell(write_yaml, "fwd"), Context(Path(".")))
    assert result.status == "ok" and "plan_ms" not in result.metrics and result.metrics["first_call_ms"] > 0


def _row(attention: str, n: int, **metrics: object) -> dict[str, object]:
    return {**GROUP, "attention": attention, "seq_len": n, "status": "ok", "run_id": 1, "time_ms_median": 4.0,
            "time_ms_iqr": 0.1, "threads": 1, "peak_mem_bytes": 2**20, **metrics}


def test_the_throughput_table_gives_tflops_percent_of_the_right_peak_and_gbytes() -> None:
    """Peak 1000 GFLOP/s, bandwidth 100 GB/s (ridge at 10 FLOP/byte). In 4 ms: 2 GFLOP over 0.05 GB (I 40) is 0.5
    TFLOP/s, 50% of the GEMM peak, 12.5 GB/s; 0.2 GFLOP over 0.2 GB (I 1) is 0.05 TFLOP/s and 50 GB/s, 50% of the
    bandwidth, marked; ‡ marks the warm-L2 cell's rates and its Table 4 time."""
    df = pd.DataFrame([_row("vanilla", 1024, gflops=2.0, gbytes_moved=0.05),
                       _row("performer", 1024, gflops=0.2, gbytes_moved=0.2, warm_cache=True),
                       {**_row("linformer", 1024), "status": "oom", "time_ms_median": float("nan")}])
    rated = attach_rates(df, {1: (1000.0, 100.0)})
    md = blocks_table(rated, ["vanilla", "performer", "linformer"], rate_blocks(rated), "md")
    lines = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
             for line in md.splitlines()[2:]}
    assert md.splitlines()[0].split("|")[2:5] == [" TFLOP/s 1K ", " % of peak 1K ", " GB/s 1K "]
    assert lines["Transformer"] == ["0.500", "50.0", "12.5"]
    assert lines["Performer"] == ["0.0500‡", "50.0*", "50.0‡"]
    assert lines["Linformer"] == ["OOM"] * 3
    assert "‡" in table4(rated, baseline="vanilla")
    tex = blocks_table(rated, ["vanilla", "performer"], rate_blocks(rated), "tex")
    assert tex.count(r"\begin{tabular}") == 3 and r"50.0$^*$" in tex and r"0.0500$^\ddagger$" in tex


def test_one_time_costs_show_the_first_call_or_the_compilation_and_the_plan() -> None:
    eager = pd.DataFrame([_row("vanilla", 1024, first_call_ms=12.0), _row("local", 1024, first_call_ms=9.0,
                                                                           plan_ms=3.5)])
    md = blocks_table(eager, ["vanilla", "local"], onetime_blocks(eager), "md")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()]
    assert rows[0] == ["Attention", "First call (ms) 1K", "Plan (ms) 1K"]
    assert rows[2:] == [["Transformer", "12.0", "—"], ["Local Attention", "9.00", "3.50"]]
    compiled = eager.assign(compile="inductor", compile_s=[20.0, 30.0])
    md = blocks_table(compiled, ["vanilla", "local"], onetime_blocks(compiled), "md")
    assert "torch.compile, first call (s) 1K" in md and "First call (ms)" not in md and "30.0" in md
    assert onetime_blocks(eager.drop(columns=["first_call_ms", "plan_ms"])) == []


def test_the_reports_write_a_throughput_and_a_one_time_table_per_group(tmp_path: Path) -> None:
    df = pd.DataFrame([_row(a, n, gflops=1.0, gbytes_moved=0.1, first_call_ms=5.0)
                       for a in ("vanilla", "s3attention") for n in (1024, 2048)])
    written = {p.name for p in write_speed_reports(df, tmp_path, env={}, suite="s", plots=False,
                                                   roofs={1: (1000.0, 10.0)})}
    slug = "cpu_float32_fwd_b1_h2_d16"
    assert {f"throughput_{slug}.md", f"throughput_{slug}.tex", f"onetime_{slug}.md", f"onetime_{slug}.tex"} <= written
    csv = pd.read_csv(tmp_path / "results.csv")
    assert (csv["tflops_per_s"] == 0.25).all() and (csv["gbytes_per_s"] == 25.0).all()
    # 250 GFLOP/s at 10 FLOP/byte, left of the ridge (100): 25 GB/s is 2.5 times the copy bandwidth measured
    assert (csv["peak_fraction"] == 2.5).all() and (csv["peak_against"] == "bandwidth").all()
