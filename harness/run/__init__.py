"""Running cells: orchestration (runner), one cell and its recorder (execute), ``--isolate`` workers, Ray."""
