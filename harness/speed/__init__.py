"""The speed suite kind: one cell's workload, timing, peak memory and FLOPs."""
