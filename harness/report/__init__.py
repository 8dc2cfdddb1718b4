"""Reports: formatting shared by all tables, Table 4, Table 1, the study tables, plots, and which writer runs."""
