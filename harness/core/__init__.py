"""The kind-free core every part shares: cell records, the suite model and its validation, the store, safe files,
errors, fault points, the environment block, provenance and the timing process's settings. Imports no suite kind."""
