"""The speed kind's reported quantities: which stored column a Table 4 block or a figure shows, in which unit, and
which way is better."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...report.format import MIB


@dataclass(frozen=True)
class Metric:
    """A measured quantity as shown in tables and plots.

    Attributes:
        column: Column of the results DataFrame holding the raw value.
        label: Human-readable name including the displayed unit.
        scale: Factor from the raw column unit to the displayed unit.
        higher_is_better: Orients the multiplier so that above 1.0× always means "better".
        kind: Which block/figure the metric belongs to ("time" or "memory"); used in file names.
    """

    column: str
    label: str
    scale: float
    higher_is_better: bool
    kind: Literal["time", "memory"]


TIME = Metric("time_ms_median", "Time (ms)", 1.0, higher_is_better=False, kind="time")
THROUGHPUT = Metric("steps_per_s", "Throughput (steps/s)", 1.0, higher_is_better=True, kind="time")
MEMORY = Metric("peak_mem_bytes", "Peak memory (MiB)", 1.0 / MIB, higher_is_better=False, kind="memory")


def metrics_for(mode: str) -> tuple[Metric, Metric]:
    """Returns the (time, memory) metrics shown for a benchmark mode.

    Training steps are reported as throughput, as the paper does; single passes as latency.
    """
    return (THROUGHPUT if mode == "train_step" else TIME, MEMORY)
