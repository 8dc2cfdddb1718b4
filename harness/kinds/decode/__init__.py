"""The decode suite kind: one causal layer prefilled, then timed a token at a time against its state."""
