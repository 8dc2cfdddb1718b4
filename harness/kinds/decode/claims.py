"""What the decode suite's ``claims.md`` says: no paper's claim is checked here.

The S3Attention paper times no decoding (S3Attention has no causal form: its Fourier convolution mixes the whole
sequence), and no paper of the zoo prints a decoding figure this suite could check. What decoding must satisfy is a
rule of this project, checked by the tests rather than by a run: prefill followed by steps equals the causal forward,
and no output depends on a later token (``tests/attentions/test_causal.py``).
"""

from __future__ import annotations

#: The sentence of ``claims.md`` (:func:`harness.report.claims.write_claims`'s ``without``).
NO_PAPER_CLAIMS = ("the S3Attention paper times no decoding (S3Attention has no causal form) and no paper of the zoo "
                   "prints a decoding figure to check; the tables measure each variant's ms per token and state "
                   "against `vanilla`'s KV cache. What decoding must satisfy — prefill then steps equal to the causal "
                   "forward, no output depending on a later token — is checked by the tests "
                   "(tests/attentions/test_causal.py), on every variant that decodes")
