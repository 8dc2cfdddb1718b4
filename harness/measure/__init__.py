"""The measuring library of the timed kinds (speed, approximation): timing, peak memory, FLOPs and bytes, the quiet-
machine check, GPU figures, torch.compile. Imports no suite kind."""
