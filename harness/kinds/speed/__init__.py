"""The speed suite kind: each cell's workload built, timed, measured for memory and FLOPs; its Table 4, slopes,
crossover, roofline and compile reports, and its claims."""
