"""The isolated worker (harness.run.worker) loads what its cells need and nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.run.suitefile import load_suite

REPO_ROOT = Path(__file__).resolve().parents[3]

_WORKER = """
import json, sys
from harness.run import worker
sys.argv = ["worker", sys.argv[1]]
worker.main()  # its stdout is gone after READY: the modules go to a file
loaded = sorted(m for m in sys.modules if m.startswith(("harness.kinds.", "matplotlib")))
open(sys.argv[1] + ".modules", "w").write(json.dumps(loaded))
"""


def test_a_speed_worker_imports_no_other_kind_and_no_plotting(tmp_path: Path) -> None:
    """A worker runs one group of one kind: importing the training code of the other kinds (and matplotlib) would
    only lengthen every worker's start, which --isolate pays once per group."""
    suite = load_suite(REPO_ROOT / "suites" / "speed.yaml", "smoke", overrides={"attention": ["vanilla"]})
    cell = next(c for c in suite.expand("cpu") if not c.skip_reason)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"runner_pid": os.getpid(), "cells": [cell.to_json()], "workdir": str(tmp_path),
                               "cache_dir": None, "result_path": str(tmp_path / "result.json")}))
    subprocess.run([sys.executable, "-c", _WORKER, str(job)], cwd=REPO_ROOT, check=True, timeout=300,
                   capture_output=True)
    results = json.loads((tmp_path / "result.json").read_text())
    assert [r["status"] for r in results] == ["ok"], results
    loaded = json.loads(Path(f"{job}.modules").read_text())
    assert loaded and all(m.startswith("harness.kinds.speed") for m in loaded), loaded
