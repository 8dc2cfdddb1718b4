"""Subprocess entry for ``--isolate``: read one job as JSON on stdin, measure it, write the result file.

The parent treats a missing result file as the worker's death and records the exit code or signal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .measure import measure_cell
from .suite import Cell


def main() -> None:
    job = json.loads(sys.stdin.read())
    result = measure_cell(Cell.from_json(job["cell"]), gemm_peak_gflops=job.get("gemm_peak_gflops"))
    path = Path(job["result_path"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"status": result.status, "message": result.message, "metrics": result.metrics}))
    tmp.replace(path)  # atomic: the parent never reads half a file


if __name__ == "__main__":
    main()
