"""The recall suite kind: multi-query associative recall (MQAR) of causal LMs, beside their state and time."""
