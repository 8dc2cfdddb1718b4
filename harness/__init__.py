"""attnbench's harness: suites, runner, timing, memory, FLOPs, store, reports, plots, CLI."""

import os

# The CPU memory method uses torch.profiler; without this, kineto prints two log lines per profiled call.
os.environ.setdefault("KINETO_LOG_LEVEL", "99")
