"""Subprocess entry for ``--isolate``: read one job as JSON on stdin, measure it, write the result file.

The parent treats a missing result file as the worker's death and records the exit code or signal.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from .runner import Context, execute_cell
from .suite import Cell


def main() -> None:
    job = json.loads(sys.stdin.read())
    cache_dir = Path(job["cache_dir"]) if job.get("cache_dir") else None
    ctx = Context(Path(job["workdir"]), cache_dir, job.get("gemm_peak_gflops"))
    result = execute_cell(Cell.from_json(job["cell"]), ctx)
    path = Path(job["result_path"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(result)))
    tmp.replace(path)  # atomic: the parent never reads half a file


if __name__ == "__main__":
    main()
