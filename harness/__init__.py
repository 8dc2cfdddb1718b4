"""attnbench's harness: suites, runner, timing, memory, FLOPs, store, reports, plots, CLI."""
