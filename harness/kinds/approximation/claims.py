"""What the approximation suite's ``claims.md`` says: no paper's claim is checked here.

The papers of the zoo bound their approximations' errors in theory (Linformer's rank, Performer's feature count) but
print no error figure against softmax attention that a run could check; this suite's errors and times are the
project's own measurement, through each layer's own projections.
"""

from __future__ import annotations

#: The sentence of ``claims.md`` (:func:`harness.report.claims.write_claims`'s ``without``).
NO_PAPER_CLAIMS = ("no paper of the zoo prints an error figure against softmax attention that a run could check (their "
                   "bounds are theorems); this suite's errors and times are this project's own measurement, through "
                   "each layer's own projections, and its tables and Pareto figures show them without a verdict")
